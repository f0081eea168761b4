package vectorfile

import (
	"context"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/schemas"
)

type oracleSide struct {
	NumRows        int                        `json:"num_rows"`
	Schema         map[string]string          `json:"schema"`
	Types          map[string]string          `json:"types"`
	Metadata       map[string]string          `json:"metadata"`
	NullCounts     map[string]int             `json:"null_counts"`
	ItemNullCounts map[string]int             `json:"item_null_counts"`
	Columns        map[string]json.RawMessage `json:"columns"`
}

func col[T any](t *testing.T, side oracleSide, name string) []T {
	t.Helper()
	var v []T
	if err := json.Unmarshal(side.Columns[name], &v); err != nil {
		t.Fatalf("column %s: %v", name, err)
	}
	return v
}

// TestParquetInterop: pyarrow and DuckDB (via ops/oracles/read_parquet.py) read a part exactly
// as written, bit for bit, with a non-null fixed_size_list vector column.
func TestParquetInterop(t *testing.T) {
	py := testenv.Python(t, "pyarrow", "duckdb", "numpy")
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
	out, err := exec.Command(py, filepath.Join(testenv.Root(), "ops", "oracles", "read_parquet.py"),
		filepath.Join(dir, "part-00000001.parquet")).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("oracle: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var res map[string]oracleSide
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	for _, reader := range []string{"pyarrow", "duckdb"} {
		t.Run(reader, func(t *testing.T) {
			side := res[reader]
			if side.NumRows != len(want) {
				t.Fatalf("rows = %d, want %d", side.NumRows, len(want))
			}
			for k, v := range map[string]string{schemas.MetaSchemaVersion: "1", schemas.MetaDim: "6", schemas.MetaGNFingerprint: "fp@1", schemas.MetaK: "510", schemas.MetaS: "256"} {
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
			ids, titles, versions := col[string](t, side, "doc_id"), col[string](t, side, "title"), col[string](t, side, "version")
			nChunks, nTokens := col[int](t, side, "n_chunks"), col[int](t, side, "n_tokens")
			hashes, vecs := col[uint64](t, side, "content_hash"), col[[]uint32](t, side, "vector")
			spaces, sources := col[string](t, side, "space"), col[string](t, side, "source")
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
}
