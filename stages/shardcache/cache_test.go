package shardcache

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/indexrec"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
)

const testDim = 8

func testOpts(t testing.TB, dir string, alloc memory.Allocator) Options {
	t.Helper()
	return Options{Dir: dir, Fingerprint: "gn-test@abc123", Dim: testDim, K: 510, S: 256, RowsPerShard: 16, ReadCacheShards: 2, Allocator: alloc}
}

// testRows are deterministic and include awkward floats (-0, subnormal, extremes) so bit
// exactness is really tested.
func testRows(n, dim int, base uint64) []Row {
	special := []float32{float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, math.MaxFloat32, -1e-38, 1.0 / 3}
	rows := make([]Row, n)
	for i := range rows {
		emb := make([]float32, dim)
		for j := range emb {
			emb[j] = float32(i)*0.001 - float32(j)*1.25 + 0.1
		}
		emb[i%dim] = special[i%len(special)]
		k := base + uint64(i)*0x9E3779B97F4A7C15
		rows[i] = Row{Key: k, DocID: fmt.Sprintf("doc:%d", i/5), ChunkIndex: int32(i % 5), NTokens: int32(100 + i), Embedding: emb}
	}
	return rows
}

func mustOpen(t testing.TB, o Options) *Cache {
	t.Helper()
	c, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return c
}

func checkGet(t *testing.T, c *Cache, rows []Row) {
	t.Helper()
	dst := make([]float32, testDim)
	for _, r := range rows {
		ok, err := c.Get(r.Key, dst)
		if err != nil || !ok {
			t.Fatalf("Get(%x) = %v, %v", r.Key, ok, err)
		}
		for j := range dst {
			if math.Float32bits(dst[j]) != math.Float32bits(r.Embedding[j]) {
				t.Fatalf("Get(%x)[%d] = %v, want %v", r.Key, j, dst[j], r.Embedding[j])
			}
		}
		if ok, err := c.Contains(r.Key); !ok || err != nil {
			t.Fatalf("Contains(%x) = %v, %v", r.Key, ok, err)
		}
	}
}

func TestOpenValidates(t *testing.T) {
	dir := t.TempDir()
	good := testOpts(t, dir, nil)
	tests := []struct {
		name string
		edit func(*Options)
	}{
		{"no dir", func(o *Options) { o.Dir = "" }},
		{"no fingerprint", func(o *Options) { o.Fingerprint = "" }},
		{"zero dim", func(o *Options) { o.Dim = 0 }},
		{"negative K", func(o *Options) { o.K = -1 }},
		{"zero S", func(o *Options) { o.S = 0 }},
		{"negative rows", func(o *Options) { o.RowsPerShard = -1 }},
		{"negative read cache", func(o *Options) { o.ReadCacheShards = -3 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			if c, err := Open(o); err == nil {
				c.Close()
				t.Fatal("Open accepted bad options")
			}
		})
	}
}

func TestRoundTripAndRestart(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	rows := testRows(53, testDim, 1) // 3 full shards of 16 + a partial one
	c := mustOpen(t, testOpts(t, dir, alloc))
	for _, r := range rows {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	checkGet(t, c, rows) // mix of shard and buffer hits
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil { // nothing pending: no empty shard
		t.Fatal(err)
	}
	checkGet(t, c, rows)
	st := c.Stats()
	if st.Rows != 53 || st.Shards != 4 || st.Buffered != 0 || st.Bytes <= 0 || st.Hits != 106 {
		t.Errorf("stats = %+v", st)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(rows[0].Key, make([]float32, testDim)); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	c = mustOpen(t, testOpts(t, dir, alloc))
	defer c.Close()
	checkGet(t, c, rows)
	if st := c.Stats(); st.Rows != 53 || st.Shards != 4 {
		t.Errorf("stats after reopen = %+v", st)
	}
	for _, k := range []uint64{0, 12345, math.MaxUint64} {
		if ok, err := c.Get(k, make([]float32, testDim)); ok || err != nil {
			t.Errorf("Get(unknown %x) = %v, %v", k, ok, err)
		}
		if ok, err := c.Contains(k); ok || err != nil {
			t.Errorf("Contains(unknown %x) = %v, %v", k, ok, err)
		}
	}
	if _, err := c.Get(rows[0].Key, make([]float32, testDim+1)); err == nil {
		t.Error("Get accepted a dst of the wrong length")
	}
	if _, err := c.Add(Row{Key: 7, Embedding: make([]float32, 3)}); err == nil {
		t.Error("Add accepted an embedding of the wrong length")
	}
	// New shards continue the sequence instead of overwriting.
	more := testRows(5, testDim, 99)
	for _, r := range more {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "shards", "shard-00000005.parquet")); err != nil {
		t.Errorf("fifth shard: %v", err)
	}
	checkGet(t, c, append(rows, more...))
}

func TestSpaceMismatchRefused(t *testing.T) {
	dir := t.TempDir()
	base := testOpts(t, dir, nil)
	c := mustOpen(t, base)
	if _, err := c.Add(testRows(1, testDim, 1)[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(*Options)
	}{
		{"fingerprint", func(o *Options) { o.Fingerprint = "gn-other@def" }},
		{"dim", func(o *Options) { o.Dim = 16 }},
		{"K", func(o *Options) { o.K = 256 }},
		{"S", func(o *Options) { o.S = 128 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			c, err := Open(o)
			if err == nil {
				c.Close()
				t.Fatal("Open accepted a different space")
			}
			if !errors.Is(err, ErrSpaceMismatch) || !strings.Contains(err.Error(), "another GN space") {
				t.Errorf("error = %v", err)
			}
		})
	}
	// Without the index the shards' own metadata still refuses the foreign space.
	if err := os.RemoveAll(filepath.Join(dir, "index")); err != nil {
		t.Fatal(err)
	}
	o := base
	o.Fingerprint = "gn-other@def"
	if c, err := Open(o); !errors.Is(err, ErrSpaceMismatch) {
		if c != nil {
			c.Close()
		}
		t.Errorf("Open with index gone, other fingerprint: %v", err)
	}
}

func TestDuplicateKeys(t *testing.T) {
	dir := t.TempDir()
	c := mustOpen(t, testOpts(t, dir, nil))
	defer c.Close()
	rows := testRows(10, testDim, 5)
	for _, r := range rows {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	// Same keys, other embeddings: buffered duplicates are ignored...
	for _, r := range rows {
		d := r
		d.Embedding = make([]float32, testDim)
		if _, err := c.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	// ...and so are flushed ones.
	for _, r := range rows {
		d := r
		d.Embedding = make([]float32, testDim)
		if _, err := c.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.Rows != 10 || st.Buffered != 0 {
		t.Errorf("stats = %+v", st)
	}
	checkGet(t, c, rows)
}

// TestCrashRecovery simulates a crash after a shard's rename and before its index batch by
// deleting the shard's index entries and marker, and leaves a temp file behind.
func TestCrashRecovery(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	rows := testRows(40, testDim, 3)
	c := mustOpen(t, testOpts(t, dir, alloc))
	for _, r := range rows {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(filepath.Join(dir, "index"), &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	for _, r := range rows[16:32] { // shard 2
		k := indexrec.KeyOf(r.Key)
		_ = b.Delete(k[:], nil)
	}
	sk := indexrec.ShardKeyOf(2)
	_ = b.Delete(sk[:], nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "shards", "shard-00000004.parquet.tmp")
	if err := os.WriteFile(tmp, []byte("half a shard"), 0o644); err != nil {
		t.Fatal(err)
	}

	c = mustOpen(t, testOpts(t, dir, alloc))
	defer c.Close()
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("temp file survived Open: %v", err)
	}
	checkGet(t, c, rows)
	if st := c.Stats(); st.Rows != 40 || st.Shards != 3 {
		t.Errorf("stats = %+v", st)
	}
	// The next shard must not reuse sequence 4 of the torn temp file's name clash.
	if _, err := c.Add(testRows(1, testDim, 77)[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "shards", "shard-00000004.parquet")); err != nil {
		t.Errorf("shard 4: %v", err)
	}
}

func TestCorruptShardErrors(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(t, dir, nil)
	c := mustOpen(t, o)
	rows := testRows(16, testDim, 11)
	for _, r := range rows {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "shards", shardfile.Name(1))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(data) / 3; i < len(data)/3+64 && i < len(data); i++ {
		data[i] ^= 0xA5
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Hits read the companion, so the shard is read only when its companion has to be rebuilt:
	// without one, a corrupt shard must turn into errors, not vectors, and not stop Open.
	if err := os.Remove(filepath.Join(dir, "shards", shardfile.VecName(1))); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, o)
	defer c.Close()
	if _, err := c.Get(rows[0].Key, make([]float32, testDim)); err == nil {
		t.Fatal("Get from a corrupt shard returned no error")
	}
	if st := c.Stats(); st.Broken != 1 || st.Rebuilt != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestConcurrentAddGet(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	c := mustOpen(t, testOpts(t, t.TempDir(), alloc))
	rows := testRows(400, testDim, 21)
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			dst := make([]float32, testDim)
			for i := w; i < len(rows); i += 2 { // workers overlap, so keys are added twice
				if _, err := c.Add(rows[i]); err != nil {
					errc <- err
					return
				}
				if ok, err := c.Get(rows[i].Key, dst); err != nil || !ok || dst[1] != rows[i].Embedding[1] {
					errc <- fmt.Errorf("Get(%d) = %v, %v", i, ok, err)
					return
				}
				if i%97 == 0 {
					if err := c.Flush(); err != nil {
						errc <- err
						return
					}
				}
				j := (i * 7) % (i + 1)
				if _, err := c.Get(rows[j].Key, dst); err != nil {
					errc <- err
					return
				}
				_ = c.Stats()
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Rows != int64(len(rows)) {
		t.Errorf("rows = %d, want %d (duplicates must be no-ops)", st.Rows, len(rows))
	}
	checkGet(t, c, rows)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestManifests(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(t, dir, nil)
	c := mustOpen(t, o)
	want := map[string]Manifest{}
	for i := 0; i < 50; i++ {
		m := Manifest{DocID: fmt.Sprintf("enwiki:%d", i), Version: fmt.Sprint(1000 + i), ContentHash: uint64(i) * 0xDEADBEEFCAFE,
			Keys: []uint64{uint64(i), math.MaxUint64 - uint64(i)}, Title: fmt.Sprint("Title ", i), Source: "enwiki", NTokens: 7 * i}
		if err := c.PutManifest(m); err != nil {
			t.Fatal(err)
		}
		m.Fingerprint, m.K, m.S = o.Fingerprint, o.K, o.S
		want[m.DocID] = m
	}
	bad := []Manifest{{DocID: ""}, {DocID: "x", Fingerprint: "other"}, {DocID: "x", K: 3}}
	for _, m := range bad {
		if err := c.PutManifest(m); err == nil {
			t.Errorf("PutManifest(%+v) accepted", m)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	// A newer version replaces the old one; this one is unflushed while scanned.
	upd := want["enwiki:7"]
	upd.Version, upd.Keys = "2000", nil
	if err := c.PutManifest(upd); err != nil {
		t.Fatal(err)
	}
	upd.Keys = []uint64{}
	want["enwiki:7"] = upd
	extra := Manifest{DocID: "zz:1", Version: "1", Fingerprint: o.Fingerprint, K: o.K, S: o.S, Keys: []uint64{}}
	if err := c.PutManifest(extra); err != nil {
		t.Fatal(err)
	}
	want[extra.DocID] = extra

	check := func(c *Cache) {
		t.Helper()
		got := map[string]Manifest{}
		if err := c.ScanManifests(func(m Manifest) error { got[m.DocID] = m; return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("scanned %d manifests, want %d", len(got), len(want))
		}
		for id, w := range want {
			g := got[id]
			if len(g.Keys) == 0 {
				g.Keys = []uint64{}
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("manifest %s = %+v, want %+v", id, g, w)
			}
			m, ok, err := c.Manifest(id)
			if len(m.Keys) == 0 {
				m.Keys = []uint64{}
			}
			if !ok || err != nil || !reflect.DeepEqual(m, w) {
				t.Errorf("Manifest(%s) = %+v, %v, %v", id, m, ok, err)
			}
		}
		if _, ok, err := c.Manifest("missing"); ok || err != nil {
			t.Errorf("Manifest(missing) = %v, %v", ok, err)
		}
		stop := errors.New("stop")
		if err := c.ScanManifests(func(Manifest) error { return stop }); !errors.Is(err, stop) {
			t.Errorf("ScanManifests did not pass fn's error: %v", err)
		}
	}
	check(c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, o)
	defer c.Close()
	check(c)
}
