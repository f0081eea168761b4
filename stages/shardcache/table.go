package shardcache

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/hashindex"
)

const tableName = "index.hash"

// minTableBits is the size of a new, empty table (16 pages, 64 KiB). A variable so tests can
// start from one page and reach bucket overflow with a few hundred rows.
var minTableBits = 4

// tableBitsFor sizes a rebuilt table so that rows fill buckets about half, leaving room before
// the first doubling.
func tableBitsFor(rows int64) int {
	b := minTableBits
	if per := rows / (hashindex.Slots / 2); per > 0 {
		b = max(b, bits.Len64(uint64(per)))
	}
	return min(b, hashindex.MaxBits)
}

// openTable opens the key table, or creates an empty one when it is missing or fails its checks
// (crash-torn pages, a bad header, a truncated file) or predates the table (keys in Pebble).
// An empty table has watermark 0, so recover then inserts every shard: the rebuild is the
// ordinary crash-replay path run over the whole store.
func (c *Cache) openTable(markers map[uint64]marker) error {
	path := filepath.Join(c.opts.Dir, tableName)
	t, err := hashindex.Open(path)
	if err == nil {
		c.tab = t
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, hashindex.ErrCorrupt) {
		return fmt.Errorf("shardcache: key table: %w", err)
	}
	var rows int64
	for _, m := range markers {
		rows += m.Rows
	}
	if t, err = hashindex.Create(path, tableBitsFor(rows)); err != nil {
		return fmt.Errorf("shardcache: key table: %w", err)
	}
	c.tab = t
	c.tableRebuilt = true
	return nil
}

// insertShardKeys puts a marked shard's keys into the table (not yet committed): a shard past
// the table's watermark whose entries a crash may have lost, or every shard of a rebuild. Only
// the key column is read.
func (c *Cache) insertShardKeys(seq uint64) error {
	d, err := readShardKeys(filepath.Join(c.shardD, shardName(seq)), c.sp, c.opts.Allocator)
	if err != nil {
		return err
	}
	if err := c.tab.Insert(seq, d.keys); err != nil {
		return fmt.Errorf("shardcache: key table: %w", err)
	}
	return nil
}

// dropLegacyKeys removes the per-key Pebble entries of a cache written before the table, once
// the table holds its keys durably: they are no longer read, and no longer kept current.
func (c *Cache) dropLegacyKeys() error {
	lo, hi := []byte{prefixKey}, []byte{prefixKey + 1}
	it, err := c.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("shardcache: index: %w", err)
	}
	any := it.First()
	if err := it.Close(); err != nil {
		return fmt.Errorf("shardcache: index: %w", err)
	}
	if !any {
		return nil
	}
	if err := c.db.DeleteRange(lo, hi, pebble.Sync); err != nil {
		return fmt.Errorf("shardcache: index: %w", err)
	}
	// Once, at migration: reclaims the old entries' space now instead of whenever compaction
	// next reaches them.
	if err := c.db.Compact(lo, hi, true); err != nil {
		return fmt.Errorf("shardcache: index: %w", err)
	}
	return nil
}
