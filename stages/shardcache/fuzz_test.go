package shardcache

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
)

// FuzzReadShard feeds mutated shard files to the reader: it must return an error or rows, never
// panic or leak Arrow memory.
func FuzzReadShard(f *testing.F) {
	dir := f.TempDir()
	o := testOpts(f, dir, nil)
	c := mustOpen(f, o)
	for _, r := range testRows(5, testDim, 1) {
		if _, err := c.Add(r); err != nil {
			f.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, "shards", shardfile.Name(1)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, 0, byte(0))
	f.Add(good, len(good)-9, byte(0x40))
	f.Add(good[:len(good)/2], 3, byte(1))
	f.Add([]byte("PAR1PAR1"), 0, byte(0))
	sp := shardfile.Space{Fingerprint: o.Fingerprint, Dim: o.Dim, K: o.K, S: o.S}
	f.Fuzz(func(t *testing.T, data []byte, at int, flip byte) {
		data = append([]byte(nil), data...)
		if len(data) > 0 {
			if at < 0 {
				at = -at
			}
			data[at%len(data)] ^= flip
		}
		path := filepath.Join(t.TempDir(), shardfile.Name(1))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
		d, err := shardfile.Read(path, sp, alloc)
		if err == nil && (len(d.Emb) != len(d.Keys)*testDim) {
			t.Fatalf("inconsistent shard decoded: %d keys, %d floats", len(d.Keys), len(d.Emb))
		}
		if err == nil {
			alloc.AssertSize(t, 0)
		}
	})
}
