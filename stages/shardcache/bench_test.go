package shardcache

import (
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
)

// BenchmarkGetHit reads consecutive keys of flushed shards: each hit is an index Get and one
// read of the row from the shard's companion (ops/bench/store measures this at scale).
func BenchmarkGetHit(b *testing.B) {
	o := testOpts(b, b.TempDir(), nil)
	o.Dim, o.RowsPerShard, o.ReadCacheShards = 384, 8192, 8
	c := mustOpen(b, o)
	defer c.Close()
	rows := testRows(4*8192, o.Dim, 1)
	for _, r := range rows {
		if _, err := c.Add(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
	c = mustOpen(b, o)
	defer c.Close()
	dst := make([]float32, o.Dim)
	// One untimed pass warms the index cache and opens the four companions; the timed loop is
	// the steady state of reading a document's consecutive windows.
	for _, r := range rows {
		if ok, err := c.Get(r.Key, dst); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ok, err := c.Get(rows[i%len(rows)].Key, dst); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkContainsMiss is the cold-run case: an unknown key goes through the in-memory
// buffers, the LRU and then the index's bloom filters.
func BenchmarkContainsMiss(b *testing.B) {
	o := testOpts(b, b.TempDir(), nil)
	c := mustOpen(b, o)
	defer c.Close()
	for _, r := range testRows(1000, o.Dim, 1) {
		if _, err := c.Add(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ok, err := c.Contains(uint64(i) | 1<<62); ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkDecodeShard is the cost of a read-cache miss on the ReadParquet path, and of
// rebuilding a companion: one 8192-row, dim-384 shard.
func BenchmarkDecodeShard(b *testing.B) {
	dir := b.TempDir()
	o := testOpts(b, dir, nil)
	o.Dim, o.RowsPerShard = 384, 8192
	c := mustOpen(b, o)
	for _, r := range testRows(8192, o.Dim, 1) {
		if _, err := c.Add(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
	sp := shardfile.Space{Fingerprint: o.Fingerprint, Dim: o.Dim, K: o.K, S: o.S}
	path := filepath.Join(dir, "shards", shardfile.Name(1))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := shardfile.Read(path, sp, memory.DefaultAllocator); err != nil {
			b.Fatal(err)
		}
	}
}
