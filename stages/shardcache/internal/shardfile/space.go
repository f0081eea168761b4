package shardfile

import (
	"fmt"

	"github.com/reignpipe/reignpipe/internal/parquetread"
)

// CheckSpace reads only path's footer and refuses a shard of another space than sp: what a
// reader of a cache it did not open (no index config to check) asks of the first shard it
// serves from.
func CheckSpace(path string, sp Space) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("shard %s: corrupt: %v", path, r)
		}
	}()
	pf, err := parquetread.Open(path)
	if err != nil {
		return fmt.Errorf("shard %s: %w", path, err)
	}
	defer pf.Close()
	return checkSpace(path, pf.MetaData().KeyValueMetadata(), sp)
}
