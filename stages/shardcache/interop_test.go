package shardcache

import (
	"math"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/reignpipe/reignpipe/internal/parquetoracle"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
)

// TestInteropPyArrowDuckDB writes a shard from Go and demands that pyarrow and DuckDB read back
// exactly the rows written, bit for bit, with a non-null fixed_size_list embedding column.
func TestInteropPyArrowDuckDB(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	o := testOpts(t, dir, alloc)
	o.RowsPerShard = 100
	rows := testRows(37, testDim, 0xFFFF_FFFF_0000_0001) // keys above 2^63 too
	c := mustOpen(t, o)
	for _, r := range rows {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	res := parquetoracle.Read(t, filepath.Join(dir, "shards", shardfile.Name(1)))
	wantMeta := map[string]string{
		schemas.MetaSchemaVersion: "1", schemas.MetaGNFingerprint: o.Fingerprint,
		schemas.MetaK: strconv.Itoa(o.K), schemas.MetaS: strconv.Itoa(o.S), schemas.MetaDim: strconv.Itoa(testDim),
	}
	for _, reader := range []string{"pyarrow", "duckdb"} {
		t.Run(reader, func(t *testing.T) {
			side, ok := res[reader]
			if !ok {
				t.Fatalf("no %s output", reader)
			}
			if side.NumRows != len(rows) {
				t.Fatalf("rows = %d, want %d", side.NumRows, len(rows))
			}
			for k, v := range wantMeta {
				if side.Metadata[k] != v {
					t.Errorf("metadata %s = %q, want %q", k, side.Metadata[k], v)
				}
			}
			for name, n := range side.NullCounts {
				if n != 0 {
					t.Errorf("column %s has %d nulls", name, n)
				}
			}
			if side.ItemNullCounts["embedding"] != 0 {
				t.Errorf("embedding items: %d nulls", side.ItemNullCounts["embedding"])
			}
			keys := parquetoracle.Column[uint64](t, side, "key")
			docs := parquetoracle.Column[string](t, side, "doc_id")
			idx := parquetoracle.Column[int32](t, side, "chunk_index")
			ntok := parquetoracle.Column[int32](t, side, "n_tokens")
			emb := parquetoracle.Column[[]uint32](t, side, "embedding")
			if len(keys) != len(rows) || len(docs) != len(rows) || len(idx) != len(rows) || len(ntok) != len(rows) || len(emb) != len(rows) {
				t.Fatalf("column lengths differ from %d rows", len(rows))
			}
			for i, r := range rows {
				if keys[i] != r.Key || docs[i] != r.DocID || idx[i] != r.ChunkIndex || ntok[i] != r.NTokens {
					t.Fatalf("row %d = %x %s %d %d, want %+v", i, keys[i], docs[i], idx[i], ntok[i], r)
				}
				if len(emb[i]) != testDim {
					t.Fatalf("row %d embedding has %d items", i, len(emb[i]))
				}
				for j, bits := range emb[i] {
					if bits != math.Float32bits(r.Embedding[j]) {
						t.Fatalf("row %d embedding[%d] bits %08x, want %08x", i, j, bits, math.Float32bits(r.Embedding[j]))
					}
				}
			}
		})
	}
	if got, want := res["pyarrow"].Schema["embedding"], "fixed_size_list<element: float not null>[8]"; got != want {
		t.Errorf("pyarrow embedding type = %q, want %q", got, want)
	}
	for name, want := range map[string]string{"key": "uint64", "doc_id": "string", "chunk_index": "int32", "n_tokens": "int32"} {
		if got := res["pyarrow"].Schema[name]; got != want {
			t.Errorf("pyarrow %s type = %q, want %q", name, got, want)
		}
	}
	if got := res["duckdb"].Types["embedding"]; got != "FLOAT[8]" && got != "FLOAT[]" {
		t.Errorf("duckdb embedding type = %q", got)
	}
	t.Logf("duckdb types: %v", res["duckdb"].Types)
}
