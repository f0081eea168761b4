package vectorfile

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// A part left half-written by a crash must not break readers we did not write: pyarrow reads
// the directory as a dataset and DuckDB globs it, and both see only the committed part.
func TestCrashLeftTempIsInvisibleToPyarrowAndDuckDB(t *testing.T) {
	py := testenv.Python(t, "pyarrow", "duckdb")
	dir := t.TempDir()
	ctx := context.Background()
	s := sinkCases[0].open(t, dir, nil).(*ParquetSink)
	for _, v := range testVectors(5, "1") {
		if err := s.Write(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, v := range testVectors(7, "2") {
		if err := s.Write(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.part.w.Flush()
	// Crash: the open part stays as it is on disk.
	_ = s.fw.Close()
	_ = s.part.f.Close()
	s.b.Release()
	if tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmps) != 1 {
		t.Fatalf("temp files = %v, want the crashed part", tmps)
	}
	script := `import sys, pyarrow.parquet as pq, duckdb
d = sys.argv[1]
print(pq.read_table(d).num_rows, duckdb.sql("select count(*) from read_parquet('" + d + "/*.parquet')").fetchall()[0][0])`
	out, err := exec.Command(py, "-c", script, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("readers fail on a directory with a crash-left temp: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "5 5" {
		t.Fatalf("pyarrow, duckdb rows = %s, want 5 5", got)
	}
}
