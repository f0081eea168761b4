package shardcache

import (
	"errors"

	"github.com/reignpipe/reignpipe/schemas"
)

// DeleteManifest is not applied yet (interim, replaced by the deletes work).
func (c *Cache) DeleteManifest(d schemas.Deletion) error {
	return errors.New("the chunk cache does not apply deletions yet")
}
