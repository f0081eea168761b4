// Package shardcache is the persistent chunk-embedding cache: every embedded window is stored
// once, keyed by a 64-bit window key, so a re-run or a new document version re-embeds only the
// windows it has not seen. Embeddings live in Parquet shards that pyarrow and DuckDB read as
// they are; each shard has an uncompressed fixed-width companion that serves hits; a hash table
// file maps keys to shard rows; a Pebble database holds shard markers and manifests.
//
// On-disk layout under Options.Dir:
//
//	shards/shard-00000001.parquet   immutable shard, the file of record: written as *.tmp, fsynced,
//	                                renamed, dir fsynced. Columns key uint64, doc_id utf8,
//	                                chunk_index int32, n_tokens int32, embedding
//	                                fixed_size_list<float not null>[dim] (schemas.ChunkSchema);
//	                                zstd; key-value metadata reignpipe.{schema_version,gn_fingerprint,k,s,dim}.
//	                                Written and decoded by internal/shardfile.
//	shards/shard-00000001.vec       its companion (layout in internal/vecfile): the same rows' keys
//	                                and embeddings at 32 + row*(16+4*dim), each row with a CRC32C.
//	                                Written the same way, after the shard and before its index.
//	shards/*.tmp                    left by a crash mid-write; removed by Open.
//	index.hash                      key -> (shard seq, row) table (layout in internal/hashindex):
//	                                4 KiB bucket pages picked by the key's top bits, each with a
//	                                CRC32C; a header with a watermark and a clean flag.
//	index/                          Pebble database (records in internal/indexrec):
//	  "c"                 -> space (fingerprint, dim, K, S); Open refuses a different one
//	  's' + seq (8B BE)   -> "indexed" marker: version byte, uvarint rows, uvarint file bytes
//	  'm' + doc id        -> Manifest (see indexrec.EncodeManifest)
//	  'd' + doc id        -> Tombstone of a deleted document (version, when), in place of its
//	                         manifest while Options.DeleteRetention remembers it (manifests.go)
//	  'k' + key (8B BE)   -> caches from before index.hash only: removed once Open has built
//	                         the table (see table.go)
//
// Why a companion: serving a hit from Parquet means decoding a whole zstd shard (8192 rows) for
// one row, so a read order unrelated to write order (re-aggregation walks manifests in doc id
// order) thrashes any LRU of decoded shards once the store outgrows it: measured 15.5 µs/window
// at 7 shards, 6.6 ms/window at 21. A fixed-width row is one pread of 16+4*dim bytes at a
// computed offset, O(1) in store size and order; the page cache, not our heap, holds the hot
// part, so memory does not grow with the corpus (open companions are bounded by an LRU of
// Options.OpenFiles descriptors, and the Parquet pages just written are dropped from the page
// cache since hits no longer read them). The price is disk: about 16+4*dim bytes per window
// beside the Parquet bytes. Parquet stays as it was so other tools and the trainer read shards
// unchanged; Options.ReadParquet keeps the old decode-the-shard path for measurement.
//
// Why a hash table and not Pebble for keys: with per-key Pebble entries the lookup in front of
// every hit grew with the store (a random hit 3.2 µs at 10^4 windows, 43 µs at 10^7, 64% of the
// read CPU in pebble Get once the ~410 MB index outgrew its block cache;
// ops/bench/results/store-2026-12-01.md). Keys are uniform hashes, so their top bits pick a
// bucket page directly: a hit is one 4 KiB pread of the table and one of the companion at any
// store size, and nothing of the table is held in memory.
//
// Crash safety rests on ordering, and on every index being derived from the shards. A shard
// becomes visible (rename), then its companion, then its keys go into the table, which is
// fsynced with its watermark (the highest shard sequence whose entries are durable), and only
// then is its marker committed. Open re-inserts the keys of marked shards past the watermark
// (the table was rebuilt, or a crash interrupted Open's own replay before its Commit); a visible
// shard without a marker is indexed again, its companion rewritten first (a torn companion is
// only a *.tmp). A table that is missing (a cache from before it),
// truncated, with a bad header, or with a torn page after an unclean close (Open checks every
// page's CRC then) is rebuilt from the shards' key columns. Inserts are idempotent and a key
// in two shards (a damaged row re-added) resolves to the higher sequence, so replays in any
// state converge on the same table. A marked shard whose companion is missing or has the wrong
// size (a cache from before companions, a file removed by hand) gets it rebuilt from the shard
// by Open; if the shard cannot be decoded, its hits are errors (or, after a table rebuild,
// misses) and the rest of the cache works. Damage that keeps the size (a flipped bit, another
// shard's file, a table entry naming the wrong row) is caught per read by the header and row
// checks and returned as ErrCorrupt, never as a vector. A companion whose shard is gone is
// removed. Manifests are written after the table entries of the rows they name, so a manifest
// never points at keys the table does not know.
//
// What lives where: this package is the cache itself -- Open and recovery (cache.go), the read
// paths (read.go), the key table's sizing and rebuild (table.go), verification and repair
// (verify.go). The file formats are internal packages it alone uses: shardfile (a Parquet
// shard: build, write, decode, space check), vecfile (the companion), hashindex (the key
// table) and indexrec (the Pebble index's keys and values).
package shardcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"

	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/hashindex"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/indexrec"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/inuse"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/vecfile"
)

var (
	// ErrSpaceMismatch: the Dir was built for another GN fingerprint, dim, K or S.
	ErrSpaceMismatch = shardfile.ErrSpaceMismatch
	// ErrCorrupt: a companion file, or a row read from it, failed its checks. Deleting the
	// companion makes the next Open rebuild it from the Parquet shard.
	ErrCorrupt = vecfile.ErrCorrupt
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("shardcache: cache is closed")
)

// Options configure Open. Dir, Fingerprint, Dim, K and S are required.
type Options struct {
	Dir             string
	Fingerprint     string
	Dim, K, S       int
	RowsPerShard    int              // default 8192
	ReadCacheShards int              // ReadParquet: decoded shards kept to serve hits; default 8
	OpenFiles       int              // companion files kept open; default vecfile.DefaultOpen (64-4096, from the descriptor limit)
	IndexCacheBytes int64            // Pebble block cache; default 64 MiB
	Allocator       memory.Allocator // default memory.DefaultAllocator
	// ReadParquet serves hits by decoding whole Parquet shards into an LRU, the read path from
	// before companion files. Kept so the two can be measured against each other
	// (ops/bench/store -legacy); companions are still written and rebuilt.
	ReadParquet bool
	// DeleteRetention is how long a deletion is remembered against older versions of its
	// document arriving later (run.delete_retention); default DefaultDeleteRetention.
	DeleteRetention time.Duration
}

// Options are the options in effect, defaults filled in.
func (c *Cache) Options() Options { return c.opts }

// Row is one embedded window.
type Row struct {
	Key        uint64
	DocID      string
	ChunkIndex int32
	NTokens    int32
	Embedding  []float32
}

// Manifest lists the ordered window keys of one document version, enough to re-aggregate its
// vector from the cache without re-tokenizing: DocID, Version, ContentHash, Fingerprint, K, S,
// Keys, and Title, Source and NTokens (content tokens) so a re-aggregation publishes complete
// rows. It is defined beside its index encoding.
type Manifest = indexrec.Manifest

// Stats are counters since Open (Rows, Shards and Bytes include what was there before).
type Stats struct {
	Rows       int64 `json:"rows"`        // flushed and buffered
	Buffered   int64 `json:"buffered"`    // not yet in a visible shard
	Shards     int64 `json:"shards"`      // visible, indexed shards
	Bytes      int64 `json:"bytes"`       // size of those shard files
	Hits       int64 `json:"hits"`        // Get calls that found the key
	Misses     int64 `json:"misses"`      // Get calls that did not
	ShardLoads int64 `json:"shard_loads"` // shard decodes into the read cache (ReadParquet)
	FileOpens  int64 `json:"file_opens"`  // companion files opened to serve hits
	Rebuilt    int64 `json:"rebuilt"`     // companions rebuilt from their shard by Open
	Broken     int64 `json:"broken"`      // shards whose companion could not be rebuilt; their hits are errors
	Corrupt    int64 `json:"corrupt"`     // reads that returned ErrCorrupt (an Add of such a key replaces its row)
	// TableRebuilt: Open found the key table missing (a cache from before it) or damaged
	// (a crash mid-write) and rebuilt it from the shards.
	TableRebuilt bool `json:"table_rebuilt"`
}

// Cache is safe for concurrent use. Lock order: life, then flushMu, then mu.
type Cache struct {
	opts   Options
	sp     shardfile.Space
	schema *arrow.Schema
	shardD string
	db     *pebble.DB
	tab    *hashindex.Table // key -> (shard, row)
	// tableRebuilt: Open found the table missing or damaged and rebuilt it from the shards.
	tableRebuilt bool

	// life is read-held by every call and write-held by Close, so nothing touches the Pebble
	// handle after it is closed.
	life   sync.RWMutex
	closed bool

	// flushMu serializes shard writing so shards reach disk in sequence order.
	flushMu sync.Mutex

	mu        sync.Mutex
	buf       *shardfile.Rows
	sealed    []*shardfile.Rows      // cut, waiting to become visible; still served from memory
	manifests map[string]*pendingDoc // manifests and deletions for the next Flush (manifests.go)
	nextSeq   uint64
	shards    map[uint64]struct{}  // visible and indexed
	lru       []*shardfile.Decoded // ReadParquet only; most recently used first
	broken    map[uint64]error     // shards Open could not rebuild a companion for
	// bad holds keys whose stored row failed its checks when read: Add replaces them instead
	// of keeping the broken row, so a re-embedded window heals the cache. Bounded by the rows
	// of damaged shards that were actually read.
	bad     map[uint64]struct{}
	corrupt atomic.Int64 // reads that met a damaged row or shard
	rebuilt int64
	rows    int64
	bytes   int64
	vecs    *vecfile.Pool

	hits, misses, loads atomic.Int64
}

// Open opens or creates the cache in opts.Dir, removing crash leftovers and indexing shards a
// crash left unindexed.
func Open(opts Options) (*Cache, error) {
	if opts.Dir == "" {
		return nil, errors.New("shardcache: Options.Dir is required")
	}
	if opts.Fingerprint == "" {
		return nil, errors.New("shardcache: Options.Fingerprint is required")
	}
	if opts.Dim <= 0 || opts.K <= 0 || opts.S <= 0 {
		return nil, fmt.Errorf("shardcache: Dim, K and S must be positive (got %d, %d, %d)", opts.Dim, opts.K, opts.S)
	}
	if opts.RowsPerShard < 0 || opts.ReadCacheShards < 0 || opts.OpenFiles < 0 || opts.IndexCacheBytes < 0 || opts.DeleteRetention < 0 {
		return nil, errors.New("shardcache: RowsPerShard, ReadCacheShards, OpenFiles, IndexCacheBytes and DeleteRetention must not be negative")
	}
	if opts.DeleteRetention == 0 {
		opts.DeleteRetention = DefaultDeleteRetention
	}
	if opts.RowsPerShard == 0 {
		opts.RowsPerShard = 8192
	}
	if opts.ReadCacheShards == 0 {
		opts.ReadCacheShards = 8
	}
	if opts.OpenFiles == 0 {
		opts.OpenFiles = vecfile.DefaultOpen()
	}
	if opts.IndexCacheBytes == 0 {
		opts.IndexCacheBytes = 64 << 20
	}
	if opts.Allocator == nil {
		opts.Allocator = memory.DefaultAllocator
	}
	sp := shardfile.Space{Fingerprint: opts.Fingerprint, Dim: opts.Dim, K: opts.K, S: opts.S}
	c := &Cache{
		opts:      opts,
		sp:        sp,
		schema:    schemas.ChunkSchema(opts.Dim, shardfile.Meta(sp)),
		shardD:    filepath.Join(opts.Dir, "shards"),
		manifests: map[string]*pendingDoc{},
		shards:    map[uint64]struct{}{},
		broken:    map[uint64]error{},
		bad:       map[uint64]struct{}{},
		nextSeq:   1,
	}
	c.vecs = vecfile.NewPool(func(seq uint64) string { return filepath.Join(c.shardD, shardfile.VecName(seq)) }, opts.Dim, opts.OpenFiles)
	c.buf = shardfile.NewRows(0, opts.Dim)
	for _, d := range []string{c.shardD, filepath.Join(opts.Dir, "index")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("shardcache: %w", err)
		}
	}
	// Every hit is an index Get. Pebble's default 8 MiB block cache stops holding the filter
	// and index blocks of the key entries somewhere past 10^6 windows, and each Get then reads
	// and decompresses three blocks: 61% of hit time at 10^6 in the store benchmark. A fixed
	// larger cache keeps those hot (the data blocks come from the page cache), and uncompressed
	// blocks (random 64-bit keys barely compress) spare a decode per miss.
	bc := pebble.NewCache(opts.IndexCacheBytes)
	defer bc.Unref()
	popts := &pebble.Options{Levels: make([]pebble.LevelOptions, 7), Logger: quietLogger{}, Cache: bc}
	for i := range popts.Levels {
		// Most Contains calls on a cold run are misses; bloom filters answer them without
		// reading data blocks.
		popts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		popts.Levels[i].Compression = pebble.NoCompression
	}
	db, err := pebble.Open(filepath.Join(opts.Dir, "index"), popts)
	if err != nil {
		if err = inuse.Wrap(opts.Dir, err); errors.As(err, new(*InUseError)) {
			return nil, err
		}
		return nil, fmt.Errorf("shardcache: open index: %w", err)
	}
	c.db = db
	if err := c.recover(); err != nil {
		if c.tab != nil {
			err = errors.Join(err, c.tab.Abandon())
		}
		return nil, errors.Join(err, db.Close())
	}
	return c, nil
}

// recover checks the space, removes temp files and indexes visible shards without a marker.
func (c *Cache) recover() error {
	if v, closer, err := c.db.Get([]byte(indexrec.ConfigKey)); err == nil {
		got, derr := indexrec.DecodeSpace(v)
		_ = closer.Close()
		if derr != nil {
			return fmt.Errorf("shardcache: index config: %w", derr)
		}
		if got != c.sp {
			return fmt.Errorf("%w: %s was created with %s, opened with %s; use another Dir per GN space",
				ErrSpaceMismatch, c.opts.Dir, got, c.sp)
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("shardcache: index: %w", err)
	}
	entries, err := os.ReadDir(c.shardD)
	if err != nil {
		return fmt.Errorf("shardcache: %w", err)
	}
	var files []uint64
	vecs := map[uint64]int64{} // companion seq -> size
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), shardfile.TmpSuffix) {
			if err := os.Remove(filepath.Join(c.shardD, e.Name())); err != nil {
				return fmt.Errorf("shardcache: remove crash leftover: %w", err)
			}
			continue
		}
		if !e.Type().IsRegular() {
			continue
		}
		if seq, ok := shardfile.ParseName(e.Name()); ok {
			files = append(files, seq)
		} else if seq, ok := shardfile.ParseVecName(e.Name()); ok {
			info, err := e.Info()
			if err != nil {
				return fmt.Errorf("shardcache: %w", err)
			}
			vecs[seq] = info.Size()
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i] < files[j] })
	markers, err := c.markers()
	if err != nil {
		return err
	}
	if err := c.openTable(markers); err != nil {
		return err
	}
	wm := c.tab.Watermark()
	replay := &replayer{c: c}
	for _, seq := range files {
		if seq >= c.nextSeq {
			c.nextSeq = seq + 1
		}
		m, ok := markers[seq]
		if ok && seq > wm {
			// Marked, but its table entries may not have reached the disk (or the table is
			// being rebuilt): insert them again; the inserts are idempotent.
			if err := replay.add(seq); err != nil {
				if errors.Is(err, ErrSpaceMismatch) {
					return err
				}
				c.broken[seq] = fmt.Errorf("%w: shard %d cannot be read: %v", ErrCorrupt, seq, err)
			}
		}
		if !ok {
			if err := replay.flush(); err != nil { // reindex commits the table
				return err
			}
			if m, err = c.reindex(seq); err != nil {
				return err
			}
		} else if size, ok := vecs[seq]; !ok || size != vecfile.Size(m.Rows, c.opts.Dim) {
			// Lost or truncated (a shard from before companions existed, or removed by hand):
			// rebuilt from the shard. A shard that cannot be decoded costs its own rows, not
			// the whole cache: its hits return the error.
			if err := c.rebuildVec(seq, m); err != nil {
				if errors.Is(err, ErrSpaceMismatch) {
					return err
				}
				c.broken[seq] = fmt.Errorf("%w: shard %d cannot be read: %v", ErrCorrupt, seq, err)
			} else {
				c.rebuilt++
			}
		}
		delete(vecs, seq)
		c.shards[seq] = struct{}{}
		c.rows += m.Rows
		c.bytes += m.Bytes
	}
	// A companion without its shard (the shard deleted by hand) would serve rows the file of
	// record no longer has.
	for seq := range vecs {
		if err := os.Remove(filepath.Join(c.shardD, shardfile.VecName(seq))); err != nil {
			return fmt.Errorf("shardcache: remove orphan companion: %w", err)
		}
	}
	// A marker whose file is gone (deleted by hand) keeps its sequence number reserved:
	// its index entries still name it and must never resolve into a newer shard. The table
	// remembers the highest sequence it ever held for the same reason (a repair deletes the
	// marker of the shard it quarantines).
	for seq := range markers {
		if seq >= c.nextSeq {
			c.nextSeq = seq + 1
		}
	}
	c.nextSeq = max(c.nextSeq, c.tab.MaxSeq()+1)
	// Every visible shard's keys are in the table now; one sync covers the re-inserts.
	if err := replay.flush(); err != nil {
		return err
	}
	last := wm
	if len(files) > 0 {
		last = max(last, files[len(files)-1])
	}
	if err := c.tab.Commit(last); err != nil {
		return fmt.Errorf("shardcache: key table: %w", err)
	}
	if err := c.dropLegacyKeys(); err != nil {
		return err
	}
	if err := c.db.Set([]byte(indexrec.ConfigKey), indexrec.EncodeSpace(c.sp), pebble.Sync); err != nil {
		return fmt.Errorf("shardcache: index: %w", err)
	}
	return nil
}

func (c *Cache) markers() (map[uint64]indexrec.Marker, error) {
	lo, hi := []byte{indexrec.PrefixShard}, []byte{indexrec.PrefixShard + 1}
	it, err := c.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, fmt.Errorf("shardcache: index: %w", err)
	}
	out := map[uint64]indexrec.Marker{}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		m, err := indexrec.DecodeMarker(it.Value())
		if len(k) != 9 || err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("shardcache: index marker %x: corrupt", k)
		}
		out[beUint64(k[1:])] = m
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("shardcache: index: %w", err)
	}
	return out, nil
}

// quietLogger drops Pebble's routine info lines (WAL replay on every Open) that would otherwise
// land in the pipeline's output; fatal errors still stop the process as Pebble expects.
type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{}) {}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	pebble.DefaultLogger.Fatalf(format, args...)
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, x := range b[:8] {
		v = v<<8 | uint64(x)
	}
	return v
}

// reindex indexes a visible shard that a crash left without index entries, writing its
// companion first (again, if the crash came after it) so the ordering of drain still holds.
func (c *Cache) reindex(seq uint64) (indexrec.Marker, error) {
	path := filepath.Join(c.shardD, shardfile.Name(seq))
	d, err := shardfile.Read(path, c.sp, c.opts.Allocator)
	if err != nil {
		return indexrec.Marker{}, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return indexrec.Marker{}, fmt.Errorf("shardcache: %w", err)
	}
	if _, err := vecfile.Write(filepath.Join(c.shardD, shardfile.VecName(seq)), seq, c.opts.Dim, d.Keys, d.Emb); err != nil {
		return indexrec.Marker{}, fmt.Errorf("shardcache: companion of shard %d: %w", seq, err)
	}
	m := indexrec.Marker{Rows: int64(len(d.Keys)), Bytes: st.Size()}
	return m, c.commitIndex(seq, d.Keys, m)
}

// rebuildVec rewrites the companion of an indexed shard from the shard itself.
func (c *Cache) rebuildVec(seq uint64, m indexrec.Marker) error {
	d, err := shardfile.Read(filepath.Join(c.shardD, shardfile.Name(seq)), c.sp, c.opts.Allocator)
	if err != nil {
		return err
	}
	if int64(len(d.Keys)) != m.Rows {
		return fmt.Errorf("shardcache: shard %d has %d rows, its index marker says %d", seq, len(d.Keys), m.Rows)
	}
	if _, err := vecfile.Write(filepath.Join(c.shardD, shardfile.VecName(seq)), seq, c.opts.Dim, d.Keys, d.Emb); err != nil {
		return fmt.Errorf("shardcache: companion of shard %d: %w", seq, err)
	}
	return nil
}

// commitIndex puts a shard's keys in the table, makes them durable with the watermark, and
// only then writes the shard's marker: a marker always means the entries are on disk, and a
// crash before it leaves a visible unmarked shard that recover indexes again.
func (c *Cache) commitIndex(seq uint64, keys []uint64, m indexrec.Marker) error {
	if err := c.tab.Insert(seq, keys); err != nil {
		return fmt.Errorf("shardcache: key table: %w", err)
	}
	if err := c.tab.Commit(seq); err != nil {
		return fmt.Errorf("shardcache: key table: %w", err)
	}
	sk := indexrec.ShardKeyOf(seq)
	if err := c.db.Set(sk[:], indexrec.EncodeMarker(m), pebble.Sync); err != nil {
		return fmt.Errorf("shardcache: index: %w", err)
	}
	return nil
}

func (c *Cache) enter() error {
	c.life.RLock()
	if c.closed {
		c.life.RUnlock()
		return ErrClosed
	}
	return nil
}

// Add buffers r and reports whether it did: a key already cached or buffered is a no-op
// (false), so callers count the rows really written. When RowsPerShard rows are buffered the
// shard is written before Add returns.
func (c *Cache) Add(r Row) (bool, error) {
	if len(r.Embedding) != c.opts.Dim {
		return false, fmt.Errorf("shardcache: Add %016x: embedding has length %d, want %d", r.Key, len(r.Embedding), c.opts.Dim)
	}
	if err := c.enter(); err != nil {
		return false, err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	if c.memLookup(r.Key) != nil {
		c.mu.Unlock()
		return false, nil
	}
	// The index is asked under mu: rows leave c.sealed only after their index batch is
	// committed, so a key is always in memory or in the index and cannot be added twice --
	// unless its row is damaged: then the new row's index entry replaces the old one.
	shard, _, found, err := c.tab.Lookup(r.Key)
	if errors.Is(err, hashindex.ErrCorrupt) {
		// The key's table page is damaged: its row may or may not be stored, so this one is
		// (a key in two shards resolves to the newer row); the insert resets the page.
		found, err = false, nil
	}
	if err != nil {
		c.mu.Unlock()
		return false, fmt.Errorf("shardcache: key table: %w", err)
	}
	if found {
		_, bad := c.bad[r.Key]
		if !bad && c.broken[shard] == nil {
			c.mu.Unlock()
			return false, nil
		}
	}
	if len(c.buf.Keys) == 0 {
		c.buf = shardfile.NewRows(min(c.opts.RowsPerShard, 1024), c.opts.Dim)
	}
	c.buf.Add(r.Key, r.DocID, r.ChunkIndex, r.NTokens, r.Embedding)
	c.rows++
	cut := len(c.buf.Keys) >= c.opts.RowsPerShard
	if cut {
		c.seal()
	}
	c.mu.Unlock()
	if !cut {
		return true, nil
	}
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	return true, c.drain()
}

// seal queues the buffer as the next shard; c.mu must be held.
func (c *Cache) seal() {
	c.buf.Seq = c.nextSeq
	c.nextSeq++
	c.sealed = append(c.sealed, c.buf)
	c.buf = shardfile.NewRows(0, c.opts.Dim)
}

// drain writes sealed buffers in order; c.flushMu must be held. On error the failed buffer
// stays queued (and served from memory) and the next Flush retries it.
func (c *Cache) drain() error {
	for {
		c.mu.Lock()
		if len(c.sealed) == 0 {
			c.mu.Unlock()
			return nil
		}
		p := c.sealed[0]
		c.mu.Unlock()

		rec := p.Record(c.opts.Allocator, c.schema, c.opts.Dim)
		shardPath := filepath.Join(c.shardD, shardfile.Name(p.Seq))
		size, err := shardfile.WriteAtomic(shardPath, c.schema, c.opts.Allocator, rec)
		rec.Release()
		if err != nil {
			return fmt.Errorf("shardcache: write shard %d: %w", p.Seq, err)
		}
		// The companion after the shard (it is derived from it; Open rebuilds it from a shard
		// that a crash left without one) and before the index batch (no entry ever names a
		// row that cannot be read in O(1)).
		if _, err := vecfile.Write(filepath.Join(c.shardD, shardfile.VecName(p.Seq)), p.Seq, c.opts.Dim, p.Keys, p.Emb[:len(p.Keys)*c.opts.Dim]); err != nil {
			return fmt.Errorf("shardcache: write companion of shard %d: %w", p.Seq, err)
		}
		if !c.opts.ReadParquet {
			vecfile.DropPageCache(shardPath)
		}
		// Known before its index entries exist, so a reader that finds an entry also finds
		// the shard.
		c.mu.Lock()
		c.shards[p.Seq] = struct{}{}
		c.mu.Unlock()
		m := indexrec.Marker{Rows: int64(len(p.Keys)), Bytes: size}
		if err := c.commitIndex(p.Seq, p.Keys, m); err != nil {
			return err
		}
		c.mu.Lock()
		c.sealed = c.sealed[1:]
		c.bytes += size
		for _, k := range p.Keys {
			delete(c.bad, k) // healed: the index now names the new row
		}
		c.mu.Unlock()
	}
}

// Flush makes every row added and manifest put before it durable: shards first, then their
// index entries, then the manifests.
func (c *Cache) Flush() error {
	if err := c.enter(); err != nil {
		return err
	}
	defer c.life.RUnlock()
	return c.flush()
}

func (c *Cache) flush() error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	if len(c.buf.Keys) > 0 {
		c.seal()
	}
	// Taken with the seal: a manifest put later may name rows that this flush does not write.
	pend := c.pendingDocs()
	c.mu.Unlock()
	if err := c.drain(); err != nil {
		return err
	}
	return c.flushManifests(pend)
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	s := Stats{Rows: c.rows, Shards: int64(len(c.shards)), Bytes: c.bytes, Buffered: int64(len(c.buf.Keys))}
	for _, p := range c.sealed {
		s.Buffered += int64(len(p.Keys))
	}
	s.Rebuilt, s.Broken = c.rebuilt, int64(len(c.broken))
	s.TableRebuilt = c.tableRebuilt
	s.Corrupt = c.corrupt.Load()
	c.mu.Unlock()
	s.Hits, s.Misses, s.ShardLoads = c.hits.Load(), c.misses.Load(), c.loads.Load()
	s.FileOpens = c.vecs.Opens()
	return s
}

// Close flushes and closes the index. Later calls return ErrClosed; a second Close is a no-op.
func (c *Cache) Close() error {
	c.life.Lock()
	defer c.life.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.flush()
	c.mu.Lock()
	c.lru = nil
	c.mu.Unlock()
	c.vecs.CloseAll()
	return errors.Join(err, c.tab.Close(), c.db.Close())
}
