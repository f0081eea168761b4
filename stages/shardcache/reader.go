package shardcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/hashindex"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/vecfile"
)

// Reader serves hits from a cache directory that another process may have open as its
// writer (a running `run`, a watching feed, a replica): `search` and `serve` beside a
// pipeline. It does not open the Pebble index -- Pebble locks its directory against a second
// process even read-only (pebble v1.1 Open takes the LOCK unconditionally), and a read-only
// instance would not see the writer's compactions delete the tables it reads -- but the two
// files the writer already makes durable for every hit: the key table (index.hash) and the
// shards' companions. It opens both read-only, takes no lock and writes nothing, so the writer
// is never blocked or slowed.
//
// What it sees: every row whose shard, companion and table entries the writer has written
// (committed shards; rows still in the writer's memory are not visible until its next flush).
// What becomes visible later: entries are written in place, so a new shard's keys are seen by
// the next lookup; when the writer doubles or rebuilds the table (a new file renamed over the
// old one), a lookup that misses notices it (one stat per miss) and reopens the table. A
// companion is immutable once it has its name, and sequence numbers are never reused, so open
// companions stay valid. Memory is bounded by the open companions (OpenFiles descriptors) and
// one 4 KiB page per lookup in flight; nothing grows with the store.
//
// Every row read is checked (its key and CRC, as for the writer), so a row that changed
// under it is ErrCorrupt, never a wrong vector. The space is checked against the first shard
// it serves from (a directory holds one space: the writer refuses another).
type Reader struct {
	opts   ReaderOptions
	sp     shardfile.Space
	shardD string
	vecs   *vecfile.Pool

	mu     sync.Mutex
	tab    *hashindex.Reader // nil while the directory has no table yet
	closed bool
	// spaceOK: the space was checked against a shard of the directory.
	spaceOK atomic.Bool

	hits, misses, reopens, corrupt atomic.Int64
}

// ReaderOptions configure OpenReader. Dir, Fingerprint, Dim, K and S are required, as for Open.
type ReaderOptions struct {
	Dir         string
	Fingerprint string
	Dim, K, S   int
	OpenFiles   int // companion files kept open; default vecfile.DefaultOpen
}

// ReaderStats are a Reader's counters since OpenReader.
type ReaderStats struct {
	Hits    int64 `json:"hits"`
	Misses  int64 `json:"misses"`
	Reopens int64 `json:"table_reopens"` // the writer replaced the key table (doubled, rebuilt)
	Corrupt int64 `json:"corrupt"`       // rows that failed their checks
}

// OpenReader opens dir for reading beside its writer. A directory without a cache yet is not
// an error: every Get misses until a writer has committed a shard there.
func OpenReader(o ReaderOptions) (*Reader, error) {
	if o.Dir == "" || o.Fingerprint == "" {
		return nil, errors.New("shardcache: ReaderOptions.Dir and Fingerprint are required")
	}
	if o.Dim <= 0 || o.K <= 0 || o.S <= 0 {
		return nil, fmt.Errorf("shardcache: Dim, K and S must be positive (got %d, %d, %d)", o.Dim, o.K, o.S)
	}
	if o.OpenFiles <= 0 {
		o.OpenFiles = vecfile.DefaultOpen()
	}
	r := &Reader{opts: o, sp: shardfile.Space{Fingerprint: o.Fingerprint, Dim: o.Dim, K: o.K, S: o.S}, shardD: filepath.Join(o.Dir, "shards")}
	r.vecs = vecfile.NewPool(func(seq uint64) string { return filepath.Join(r.shardD, shardfile.VecName(seq)) }, o.Dim, o.OpenFiles)
	// A directory of another space is refused now when it has a shard to tell by; an empty one
	// is checked at its first hit.
	if seq, ok := r.firstShard(); ok {
		if err := r.checkSpace(seq); err != nil {
			return nil, err
		}
	}
	if _, err := r.table(); err != nil {
		return nil, err
	}
	return r, nil
}

// Dir is the directory read.
func (r *Reader) Dir() string { return r.opts.Dir }

func (r *Reader) firstShard() (uint64, bool) {
	es, err := os.ReadDir(r.shardD)
	if err != nil {
		return 0, false
	}
	var seqs []uint64
	for _, e := range es {
		if seq, ok := shardfile.ParseName(e.Name()); ok && e.Type().IsRegular() {
			seqs = append(seqs, seq)
		}
	}
	if len(seqs) == 0 {
		return 0, false
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs[0], true
}

func (r *Reader) checkSpace(seq uint64) error {
	if r.spaceOK.Load() {
		return nil
	}
	err := shardfile.CheckSpace(filepath.Join(r.shardD, shardfile.Name(seq)), r.sp)
	if errors.Is(err, os.ErrNotExist) {
		return nil // gone meanwhile (a repair): the next shard served from tells
	}
	if err != nil {
		return err
	}
	r.spaceOK.Store(true)
	return nil
}

// table returns the key table, opening it when the directory has one by now; nil, nil when
// it has none yet.
func (r *Reader) table() (*hashindex.Reader, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	if r.tab != nil {
		return r.tab, nil
	}
	t, err := hashindex.OpenReader(filepath.Join(r.opts.Dir, tableName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("shardcache: key table of %s: %w", r.opts.Dir, err)
	}
	r.tab = t
	return t, nil
}

// locate finds key in the table, and on a miss looks once more in a table the writer may have
// replaced meanwhile.
func (r *Reader) locate(key uint64) (seq uint64, row int32, found bool, err error) {
	t, err := r.table()
	if err != nil || t == nil {
		return 0, 0, false, err
	}
	for try := 0; try < 2; try++ {
		seq, row, found, err = t.Lookup(key)
		if errors.Is(err, hashindex.ErrCorrupt) {
			r.corrupt.Add(1)
			return 0, 0, false, fmt.Errorf("%w: key %016x: key table: %v", ErrCorrupt, key, err)
		}
		if err != nil || found || try == 1 {
			return seq, row, found, err
		}
		changed, rerr := t.Refresh()
		if rerr != nil {
			return 0, 0, false, fmt.Errorf("shardcache: key table of %s: %w", r.opts.Dir, rerr)
		}
		if !changed {
			return 0, 0, false, nil
		}
		r.reopens.Add(1)
	}
	return 0, 0, false, nil
}

// Get copies the embedding of key into dst (length Dim) and reports whether the directory
// holds it. A row that fails its checks is ErrCorrupt.
func (r *Reader) Get(key uint64, dst []float32) (bool, error) {
	if len(dst) != r.opts.Dim {
		return false, fmt.Errorf("shardcache: Get: dst has length %d, want %d", len(dst), r.opts.Dim)
	}
	seq, row, found, err := r.locate(key)
	if err != nil || !found {
		if err == nil {
			r.misses.Add(1)
		}
		return false, err
	}
	if err := r.checkSpace(seq); err != nil {
		return false, err
	}
	f, err := r.vecs.Acquire(seq)
	if errors.Is(err, os.ErrNotExist) {
		// The entry names a shard that is gone (removed by hand, quarantined by a repair): a
		// miss, as the writer counts it.
		r.misses.Add(1)
		return false, nil
	}
	if err != nil {
		r.noteCorrupt(err)
		return false, err
	}
	defer r.vecs.Release(f)
	if err := r.vecs.Read(f, row, key, dst); err != nil {
		r.noteCorrupt(err)
		return false, err
	}
	r.hits.Add(1)
	return true, nil
}

func (r *Reader) noteCorrupt(err error) {
	if errors.Is(err, ErrCorrupt) {
		r.corrupt.Add(1)
	}
}

// Stats returns the counters.
func (r *Reader) Stats() ReaderStats {
	return ReaderStats{Hits: r.hits.Load(), Misses: r.misses.Load(), Reopens: r.reopens.Load(), Corrupt: r.corrupt.Load()}
}

// Close releases the table and the companions; Get fails with ErrClosed afterwards.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.vecs.CloseAll()
	if r.tab == nil {
		return nil
	}
	return r.tab.Close()
}
