package shardcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cockroachdb/pebble"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/hashindex"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/indexrec"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
)

// ReadSpace returns the GN space (fingerprint, dim, K, S) a cache directory was built for, read
// from its index, so that a tool can open a cache without loading the GN that filled it.
func ReadSpace(dir string) (fingerprint string, dim, k, s int, err error) {
	db, err := pebble.Open(filepath.Join(dir, "index"), &pebble.Options{Logger: quietLogger{}, ReadOnly: true})
	if err != nil {
		return "", 0, 0, 0, fmt.Errorf("shardcache: open index of %s: %w", dir, err)
	}
	defer db.Close()
	v, closer, err := db.Get([]byte(indexrec.ConfigKey))
	if err != nil {
		return "", 0, 0, 0, fmt.Errorf("shardcache: %s has no space record: %w", dir, err)
	}
	defer closer.Close()
	sp, err := indexrec.DecodeSpace(v)
	if err != nil {
		return "", 0, 0, 0, fmt.Errorf("shardcache: %s: %w", dir, err)
	}
	return sp.Fingerprint, sp.Dim, sp.K, sp.S, nil
}

// Damage is one shard that failed verification.
type Damage struct {
	Shard  uint64 `json:"shard"`
	Reason string `json:"reason"`
	Rows   int64  `json:"index_entries"` // index entries that name it
}

// VerifyReport is what Verify found and, with repair, did. Open has already removed crash
// leftovers, re-indexed unindexed shards and rebuilt missing companions before Verify looks.
type VerifyReport struct {
	Shards  int      `json:"shards"`
	Rows    int64    `json:"rows_checked"`
	Entries int64    `json:"index_entries"`
	Damaged []Damage `json:"damaged_shards"`
	// Stale are index entries naming a shard that is gone or a row past its end.
	Stale int64 `json:"stale_index_entries"`
	// MissingKeys are manifest window keys without an index entry (nor a damaged row):
	// re-aggregating those documents needs the GN again.
	MissingKeys int64    `json:"manifest_keys_missing"`
	MissingDocs []string `json:"docs_with_missing_keys,omitempty"` // the first few
	Manifests   int64    `json:"manifests"`
	Quarantined []string `json:"quarantined,omitempty"`
	EntriesDrop int64    `json:"index_entries_dropped"`
	// TableDamaged says why the key table failed its checks (a page CRC): its entries and the
	// manifests' keys cannot be checked then. Repair leaves the table for the next Open to
	// rebuild from the shards (no GN).
	TableDamaged string `json:"key_table_damaged,omitempty"`
	Repaired     bool   `json:"repaired"`
	ProblemCount int64  `json:"problems"`
}

// OK reports whether the cache needs nothing.
func (r VerifyReport) OK() bool { return r.ProblemCount == 0 }

const maxListedDocs = 20

// Verify reads every shard (the Parquet file and its companion, row by row, and compares them),
// checks every index entry against the shards and every manifest's keys against the index.
// With repair, damaged shards move to Dir/quarantine and their index entries and the stale ones
// are dropped, so their windows are misses: the next run embeds them again on demand. Nothing
// else is changed; manifests stay (they are what the next run re-embeds against).
//
// Verify is for a cache no one else is using (reignpipe verify): it must not run concurrently
// with Close, and with repair not with reads either.
func (c *Cache) Verify(repair bool) (VerifyReport, error) {
	rep := VerifyReport{Damaged: []Damage{}}
	if err := c.Flush(); err != nil { // what is buffered is checked as shards too
		return rep, err
	}

	markers, err := c.markers()
	if err != nil {
		return rep, err
	}
	c.mu.Lock()
	seqs := make([]uint64, 0, len(c.shards))
	visible := make(map[uint64]bool, len(c.shards))
	for s := range c.shards {
		seqs = append(seqs, s)
		visible[s] = true
	}
	c.mu.Unlock()
	slices.Sort(seqs)
	damaged := map[uint64]*Damage{}
	for _, seq := range seqs {
		rep.Shards++
		n, err := c.checkShard(seq, markers[seq])
		rep.Rows += n
		if err != nil {
			damaged[seq] = &Damage{Shard: seq, Reason: err.Error()}
		}
	}

	// Table entries: each must name a live, undamaged row.
	var drop []uint64
	err = c.tab.Scan(func(e hashindex.Entry) error {
		rep.Entries++
		seq := uint64(e.Shard)
		m, live := markers[seq]
		switch {
		case !live || !visible[seq] || int64(e.Row) >= m.Rows:
			rep.Stale++
			drop = append(drop, e.Key)
		case damaged[seq] != nil:
			damaged[seq].Rows++
			drop = append(drop, e.Key)
		}
		return nil
	})
	if errors.Is(err, hashindex.ErrCorrupt) {
		rep.TableDamaged, drop = err.Error(), nil
	} else if err != nil {
		return rep, fmt.Errorf("shardcache: key table: %w", err)
	}

	// Manifests: every window key must be findable (unless the table that finds them is
	// damaged: its rebuild decides).
	err = c.ScanManifests(func(m Manifest) error {
		if rep.TableDamaged != "" {
			rep.Manifests++
			return nil
		}
		rep.Manifests++
		missing := false
		for _, k := range m.Keys {
			ok, err := c.Contains(k)
			if err != nil {
				return err
			}
			if !ok {
				rep.MissingKeys++
				missing = true
			}
		}
		if missing && len(rep.MissingDocs) < maxListedDocs {
			rep.MissingDocs = append(rep.MissingDocs, m.DocID)
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	for _, seq := range seqs {
		if d := damaged[seq]; d != nil {
			rep.Damaged = append(rep.Damaged, *d)
		}
	}
	rep.ProblemCount = int64(len(rep.Damaged)) + rep.Stale + rep.MissingKeys
	if rep.TableDamaged != "" {
		rep.ProblemCount++
		if repair {
			c.tab.MarkDamaged() // Close leaves it for the next Open to check and rebuild
		}
	}
	if !repair || (len(damaged) == 0 && len(drop) == 0) {
		rep.Repaired = repair && rep.TableDamaged != ""
		return rep, nil
	}
	return rep, c.repair(&rep, damaged, drop)
}

// checkShard decodes shard seq and reads its companion row by row: both must hold the same
// keys and bit-identical embeddings, as many rows as the marker says.
func (c *Cache) checkShard(seq uint64, m indexrec.Marker) (int64, error) {
	if err := c.brokenErr(seq); err != nil {
		return 0, err
	}
	d, err := shardfile.Read(filepath.Join(c.shardD, shardfile.Name(seq)), c.sp, c.opts.Allocator)
	if err != nil {
		return 0, err
	}
	if int64(len(d.Keys)) != m.Rows {
		return 0, fmt.Errorf("shard has %d rows, its index marker says %d", len(d.Keys), m.Rows)
	}
	f, err := c.vecs.Acquire(seq)
	if err != nil {
		return 0, err
	}
	defer c.vecs.Release(f)
	dim := c.opts.Dim
	row := make([]float32, dim)
	for i, k := range d.Keys {
		if err := c.vecs.Read(f, int32(i), k, row); err != nil {
			return int64(i), err
		}
		if !slices.Equal(row, d.Emb[i*dim:(i+1)*dim]) {
			return int64(i), fmt.Errorf("%w: shard %d row %d: the companion and the Parquet shard disagree", ErrCorrupt, seq, i)
		}
	}
	return int64(len(d.Keys)), nil
}

// repair quarantines damaged shards, then drops the table entries Verify collected, then the
// shards' markers: a crash in between leaves entries naming a shard that is gone, which lookups
// already treat as misses and the next Verify drops. The table keeps the quarantined sequence
// numbers as used (MaxSeq), so a stale entry never resolves into a newer shard.
func (c *Cache) repair(rep *VerifyReport, damaged map[uint64]*Damage, drop []uint64) error {
	qdir := filepath.Join(c.opts.Dir, "quarantine")
	if len(damaged) > 0 {
		if err := os.MkdirAll(qdir, 0o755); err != nil {
			return fmt.Errorf("shardcache: %w", err)
		}
	}
	c.vecs.CloseAll()
	b := c.db.NewBatch()
	for seq := range damaged {
		for _, name := range []string{shardfile.Name(seq), shardfile.VecName(seq)} {
			src := filepath.Join(c.shardD, name)
			if err := os.Rename(src, filepath.Join(qdir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("shardcache: quarantine %s: %w", name, err)
			}
			rep.Quarantined = append(rep.Quarantined, filepath.Join(qdir, name))
		}
		sk := indexrec.ShardKeyOf(seq)
		_ = b.Delete(sk[:], nil)
		c.mu.Lock()
		delete(c.shards, seq)
		delete(c.broken, seq)
		c.mu.Unlock()
	}
	if err := syncDir(c.shardD); err != nil {
		return err
	}
	if err := c.tab.Delete(drop); err != nil {
		return fmt.Errorf("shardcache: key table: %w", err)
	}
	if err := c.tab.Commit(0); err != nil {
		return fmt.Errorf("shardcache: key table: %w", err)
	}
	rep.EntriesDrop = int64(len(drop))
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("shardcache: index: %w", err)
	}
	c.mu.Lock()
	clear(c.bad)
	c.mu.Unlock()
	rep.Repaired = true
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}
