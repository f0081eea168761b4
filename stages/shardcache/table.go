package shardcache

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/hashindex"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/indexrec"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
)

const tableName = "index.hash"

// minTableBits is the size of a new, empty table (16 pages, 64 KiB). A variable so tests can
// start from one page and reach bucket overflow with a few hundred rows.
var minTableBits = 4

// tableBitsFor sizes a rebuilt table for rows at most 70% of its slots on average. Keys are
// uniform, so bucket loads are near-Poisson: at 10^7 rows (2^16 buckets, mean 153) the fullest
// bucket is expected near 210 of 255, and the rebuild does not double; a table grown by
// doubling sits between about 37% and 75% full.
func tableBitsFor(rows int64) int {
	b := minTableBits
	if per := rows / (hashindex.Slots * 7 / 10); per > 0 {
		b = max(b, bits.Len64(uint64(per)))
	}
	return min(b, hashindex.MaxBits)
}

// replayBatch bounds the entries recover collects before writing them to the table (16 MiB).
// One batch rewrites each page at most once, so a rebuild makes about rows/replayBatch passes
// over the table instead of one page write per key. A variable so tests can cross batches.
var replayBatch = 1 << 20

// openTable opens the key table, or creates an empty one when it is missing or fails its checks
// (crash-torn pages, a bad header, a truncated file) or predates the table (keys in Pebble).
// An empty table has watermark 0, so recover then inserts every shard: the rebuild is the
// ordinary crash-replay path run over the whole store.
func (c *Cache) openTable(markers map[uint64]indexrec.Marker) error {
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

// replayer collects the keys of marked shards past the table's watermark (whose entries a crash
// may have lost, or every shard of a rebuild) and writes them in batches. Only the key column of
// each shard is read. Nothing reads the table while recover runs, and inserts are idempotent
// and order-free, so batching across shards changes nothing but the number of page writes.
type replayer struct {
	c       *Cache
	pending []hashindex.Entry
}

func (r *replayer) add(seq uint64) error {
	if seq > 1<<32-1 {
		return fmt.Errorf("shardcache: shard sequence %d does not fit the key table", seq)
	}
	d, err := shardfile.ReadKeys(filepath.Join(r.c.shardD, shardfile.Name(seq)), r.c.sp, r.c.opts.Allocator)
	if err != nil {
		return err
	}
	for i, k := range d.Keys {
		r.pending = append(r.pending, hashindex.Entry{Key: k, Shard: uint32(seq), Row: uint32(i)})
	}
	if len(r.pending) >= replayBatch {
		return r.flush()
	}
	return nil
}

// flush writes what is pending (not yet committed). It must run before anything commits the
// table, or the watermark would claim entries still in memory.
func (r *replayer) flush() error {
	if err := r.c.tab.InsertEntries(r.pending); err != nil {
		return fmt.Errorf("shardcache: key table: %w", err)
	}
	r.pending = r.pending[:0]
	return nil
}

// dropLegacyKeys removes the per-key Pebble entries of a cache written before the table, once
// the table holds its keys durably: they are no longer read, and no longer kept current.
func (c *Cache) dropLegacyKeys() error {
	lo, hi := []byte{indexrec.PrefixKey}, []byte{indexrec.PrefixKey + 1}
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
