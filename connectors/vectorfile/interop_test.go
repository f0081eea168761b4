package vectorfile

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/reignpipe/reignpipe/internal/parquetoracle"
	"github.com/reignpipe/reignpipe/schemas"
)

// TestParquetInterop: pyarrow and DuckDB (via ops/oracles/read_parquet.py) read a part exactly
// as written, bit for bit, with a non-null fixed_size_list vector column.
func TestParquetInterop(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	s, err := NewParquet(ParquetOptions{Dir: dir, Dim: testDim, BatchRows: 4, Allocator: alloc,
		Metadata: map[string]string{schemas.MetaGNFingerprint: "fp@1", schemas.MetaK: "510", schemas.MetaS: "256"}})
	if err != nil {
		t.Fatal(err)
	}
	want := testVectors(10, "42")
	for _, v := range want {
		if err := s.Write(context.Background(), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := parquetoracle.Read(t, filepath.Join(dir, "part-00000001.parquet"))
	for _, reader := range []string{"pyarrow", "duckdb"} {
		t.Run(reader, func(t *testing.T) {
			side := res[reader]
			if side.NumRows != len(want) {
				t.Fatalf("rows = %d, want %d", side.NumRows, len(want))
			}
			for k, v := range map[string]string{schemas.MetaSchemaVersion: "2", schemas.MetaDim: "6", schemas.MetaGNFingerprint: "fp@1", schemas.MetaK: "510", schemas.MetaS: "256"} {
				if side.Metadata[k] != v {
					t.Errorf("metadata %s = %q, want %q", k, side.Metadata[k], v)
				}
			}
			for name, n := range side.NullCounts {
				if n != 0 {
					t.Errorf("column %s has %d nulls", name, n)
				}
			}
			if side.ItemNullCounts["vector"] != 0 {
				t.Errorf("vector items: %d nulls", side.ItemNullCounts["vector"])
			}
			ids, titles, versions := parquetoracle.Column[string](t, side, "doc_id"), parquetoracle.Column[string](t, side, "title"), parquetoracle.Column[string](t, side, "version")
			nChunks, nTokens := parquetoracle.Column[int](t, side, "n_chunks"), parquetoracle.Column[int](t, side, "n_tokens")
			hashes, vecs := parquetoracle.Column[uint64](t, side, "content_hash"), parquetoracle.Column[[]uint32](t, side, "vector")
			spaces, sources := parquetoracle.Column[string](t, side, "space"), parquetoracle.Column[string](t, side, "source")
			for i, w := range want {
				if ids[i] != w.DocID || titles[i] != w.Title || versions[i] != w.Version || nChunks[i] != w.NChunks ||
					nTokens[i] != w.NTokens || hashes[i] != w.ContentHash || spaces[i] != w.Space || sources[i] != w.Source {
					t.Fatalf("row %d differs from %+v", i, w)
				}
				if len(vecs[i]) != testDim {
					t.Fatalf("row %d: %d dims", i, len(vecs[i]))
				}
				for j, bits := range vecs[i] {
					if bits != math.Float32bits(w.Vector[j]) {
						t.Fatalf("row %d vector[%d] bits %08x, want %08x", i, j, bits, math.Float32bits(w.Vector[j]))
					}
				}
			}
		})
	}
	if got, want := res["pyarrow"].Schema["vector"], "fixed_size_list<element: float not null>[6]"; got != want {
		t.Errorf("pyarrow vector type = %q, want %q", got, want)
	}
	if got := res["pyarrow"].Schema["content_hash"]; got != "uint64" {
		t.Errorf("pyarrow content_hash type = %q", got)
	}
	if got := res["duckdb"].Types["content_hash"]; got != "UBIGINT" {
		t.Errorf("duckdb content_hash type = %q", got)
	}
	if p, d := res["pyarrow"].Schema["deleted"], res["duckdb"].Types["deleted"]; p != "bool" || d != "BOOLEAN" {
		t.Errorf("deleted column: pyarrow %q, duckdb %q; want bool, BOOLEAN", p, d)
	}
	for _, reader := range []string{"pyarrow", "duckdb"} {
		for i, gone := range parquetoracle.Column[bool](t, res[reader], "deleted") {
			if gone {
				t.Errorf("%s: row %d of vectors only reads as deleted", reader, i)
			}
		}
	}
}
