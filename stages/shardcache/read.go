package shardcache

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/hashindex"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/indexrec"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
)

// memLookup finds key in rows not yet visible or, on the ReadParquet path, in decoded shards;
// c.mu must be held.
func (c *Cache) memLookup(key uint64) []float32 {
	dim := c.opts.Dim
	if i, ok := c.buf.Pos[key]; ok {
		return c.buf.Emb[int(i)*dim : int(i+1)*dim]
	}
	for _, p := range c.sealed {
		if i, ok := p.Pos[key]; ok {
			return p.Emb[int(i)*dim : int(i+1)*dim]
		}
	}
	for n, d := range c.lru {
		if i, ok := d.Pos[key]; ok {
			if n > 0 {
				copy(c.lru[1:n+1], c.lru[:n])
				c.lru[0] = d
			}
			return d.Emb[int(i)*dim : int(i+1)*dim]
		}
	}
	return nil
}

// lookup asks the key table where key lives. Entries naming a shard whose file is gone are misses.
func (c *Cache) lookup(key uint64) (indexrec.Location, bool, error) {
	shard, row, found, err := c.tab.Lookup(key)
	if errors.Is(err, hashindex.ErrCorrupt) {
		// A damaged table page: as for a damaged row, the caller embeds the window again and
		// Add's insert resets the page. The table is derived; the next Open rebuilds it whole.
		return indexrec.Location{}, false, fmt.Errorf("%w: key %016x: key table: %v", ErrCorrupt, key, err)
	}
	if err != nil {
		return indexrec.Location{}, false, fmt.Errorf("shardcache: key %016x: %w", key, err)
	}
	if !found {
		return indexrec.Location{}, false, nil
	}
	loc := indexrec.Location{Shard: shard, Row: row}
	c.mu.Lock()
	_, ok := c.shards[loc.Shard]
	c.mu.Unlock()
	return loc, ok, nil
}

// Contains reports whether key is cached, flushed or not.
func (c *Cache) Contains(key uint64) (bool, error) {
	if err := c.enter(); err != nil {
		return false, err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	found := c.memLookup(key) != nil
	c.mu.Unlock()
	if found {
		return true, nil
	}
	_, ok, err := c.lookup(key)
	return ok, err
}

// Get copies the embedding of key into dst, which must have length Dim.
func (c *Cache) Get(key uint64, dst []float32) (bool, error) {
	if len(dst) != c.opts.Dim {
		return false, fmt.Errorf("shardcache: Get: dst has length %d, want %d", len(dst), c.opts.Dim)
	}
	if err := c.enter(); err != nil {
		return false, err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	if e := c.memLookup(key); e != nil {
		copy(dst, e)
		c.mu.Unlock()
		c.hits.Add(1)
		return true, nil
	}
	c.mu.Unlock()
	loc, ok, err := c.lookup(key)
	if err != nil || !ok {
		if err == nil {
			c.misses.Add(1)
		}
		return false, err
	}
	if err := c.readFlushed(key, loc, dst); err != nil {
		c.noteCorrupt(key, err)
		return false, err
	}
	c.hits.Add(1)
	return true, nil
}

// noteCorrupt remembers a key whose stored row is damaged, so that Add replaces it.
func (c *Cache) noteCorrupt(key uint64, err error) {
	if !errors.Is(err, ErrCorrupt) {
		return
	}
	c.corrupt.Add(1)
	c.mu.Lock()
	c.bad[key] = struct{}{}
	c.mu.Unlock()
}

// readFlushed serves one row of a visible shard: from its companion, or by decoding the shard
// on the ReadParquet path.
func (c *Cache) readFlushed(key uint64, loc indexrec.Location, dst []float32) error {
	if err := c.brokenErr(loc.Shard); err != nil {
		return err
	}
	if !c.opts.ReadParquet {
		f, err := c.vecs.Acquire(loc.Shard)
		if err != nil {
			return err
		}
		defer c.vecs.Release(f)
		return c.vecs.Read(f, loc.Row, key, dst)
	}
	d, err := c.load(loc.Shard)
	if err != nil {
		return err
	}
	if int(loc.Row) >= len(d.Keys) || d.Keys[loc.Row] != key {
		return fmt.Errorf("shardcache: index says key %016x is at %v, the shard disagrees", key, loc)
	}
	dim := c.opts.Dim
	copy(dst, d.Emb[int(loc.Row)*dim:int(loc.Row+1)*dim])
	return nil
}

func (c *Cache) brokenErr(seq uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken[seq]
}

// GetMany is Get for a document's windows: dst[i] (length Dim) receives keys[i] and hit[i]
// says whether it was found; it returns the number found. Flushed rows are read in (shard, row)
// order, one companion acquire per shard, which is what a re-aggregation wants.
func (c *Cache) GetMany(keys []uint64, dst [][]float32, hit []bool) (int, error) {
	if len(dst) < len(keys) || len(hit) < len(keys) {
		return 0, fmt.Errorf("shardcache: GetMany: %d keys, %d dst, %d hit", len(keys), len(dst), len(hit))
	}
	for i := range keys {
		if len(dst[i]) != c.opts.Dim {
			return 0, fmt.Errorf("shardcache: GetMany: dst[%d] has length %d, want %d", i, len(dst[i]), c.opts.Dim)
		}
	}
	if err := c.enter(); err != nil {
		return 0, err
	}
	defer c.life.RUnlock()
	todo := make([]want, 0, len(keys))
	n := 0
	c.mu.Lock()
	for i, k := range keys {
		hit[i] = false
		if e := c.memLookup(k); e != nil {
			copy(dst[i], e)
			hit[i] = true
			n++
		} else {
			todo = append(todo, want{i: i})
		}
	}
	c.mu.Unlock()
	found := todo[:0]
	for _, w := range todo {
		loc, ok, err := c.lookup(keys[w.i])
		if err != nil {
			return n, err
		}
		if !ok {
			c.misses.Add(1)
			continue
		}
		w.loc = loc
		found = append(found, w)
	}
	sort.Slice(found, func(a, b int) bool {
		if found[a].loc.Shard != found[b].loc.Shard {
			return found[a].loc.Shard < found[b].loc.Shard
		}
		return found[a].loc.Row < found[b].loc.Row
	})
	for s := 0; s < len(found); {
		e := s + 1
		for e < len(found) && found[e].loc.Shard == found[s].loc.Shard {
			e++
		}
		if err := c.readRun(keys, dst, hit, found[s:e]); err != nil {
			for _, w := range found[s:e] {
				if !hit[w.i] {
					c.noteCorrupt(keys[w.i], err)
				}
			}
			return n, err
		}
		n += e - s
		s = e
	}
	c.hits.Add(int64(n))
	return n, nil
}

// want is a GetMany key (by position) and where the index says it lives.
type want struct {
	i   int
	loc indexrec.Location
}

// readRun reads ws, all rows of one shard, for GetMany, holding its companion once.
func (c *Cache) readRun(keys []uint64, dst [][]float32, hit []bool, ws []want) error {
	if c.opts.ReadParquet {
		for _, w := range ws {
			if err := c.readFlushed(keys[w.i], w.loc, dst[w.i]); err != nil {
				return err
			}
			hit[w.i] = true
		}
		return nil
	}
	seq := ws[0].loc.Shard
	if err := c.brokenErr(seq); err != nil {
		return err
	}
	f, err := c.vecs.Acquire(seq)
	if err != nil {
		return err
	}
	defer c.vecs.Release(f)
	for _, w := range ws {
		if err := c.vecs.Read(f, w.loc.Row, keys[w.i], dst[w.i]); err != nil {
			return err
		}
		hit[w.i] = true
	}
	return nil
}

// load returns the decoded shard seq, decoding it into the LRU if needed. Two goroutines may
// decode the same shard at once; the second result is dropped, which is cheaper than making
// every reader wait on a per-shard lock.
func (c *Cache) load(seq uint64) (*shardfile.Decoded, error) {
	c.mu.Lock()
	for _, d := range c.lru {
		if d.Seq == seq {
			c.mu.Unlock()
			return d, nil
		}
	}
	c.mu.Unlock()
	d, err := shardfile.Read(filepath.Join(c.shardD, shardfile.Name(seq)), c.sp, c.opts.Allocator)
	if err != nil {
		return nil, err
	}
	d.Seq = seq
	c.loads.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.lru {
		if o.Seq == seq {
			return o, nil
		}
	}
	if len(c.lru) < c.opts.ReadCacheShards {
		c.lru = append(c.lru, nil)
	}
	copy(c.lru[1:], c.lru[:len(c.lru)-1])
	c.lru[0] = d
	return d, nil
}
