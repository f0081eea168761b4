// Package parquetoracle runs ops/oracles/read_parquet.py, which reads a Parquet file with
// pyarrow and with DuckDB, so interop tests of every file kind we write assert against readers
// we did not write.
package parquetoracle

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// Side is one reader's view of the file ("pyarrow" or "duckdb" in Read's result).
type Side struct {
	NumRows        int                        `json:"num_rows"`
	Schema         map[string]string          `json:"schema"`
	Types          map[string]string          `json:"types"`
	Metadata       map[string]string          `json:"metadata"`
	NullCounts     map[string]int             `json:"null_counts"`
	ItemNullCounts map[string]int             `json:"item_null_counts"`
	Columns        map[string]json.RawMessage `json:"columns"`
}

// Read runs the oracle on path; the test skips (fails under REIGNPIPE_STRICT=1) without pyarrow
// and duckdb.
func Read(t testing.TB, path string) map[string]Side {
	t.Helper()
	py := testenv.Python(t, "pyarrow", "duckdb", "numpy")
	script := filepath.Join(testenv.Root(), "ops", "oracles", "read_parquet.py")
	out, err := exec.Command(py, script, path).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s: %v\n%s", script, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var res map[string]Side
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("oracle output: %v\n%s", err, out)
	}
	return res
}

// Column decodes one column of a reader's view.
func Column[T any](t testing.TB, side Side, name string) []T {
	t.Helper()
	var v []T
	if err := json.Unmarshal(side.Columns[name], &v); err != nil {
		t.Fatalf("column %s: %v", name, err)
	}
	return v
}
