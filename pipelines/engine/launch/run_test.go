package launch

import (
	"os"
	"path/filepath"
	"testing"
)

// --from-scratch empties the vector outputs but keeps their folders, which may be mount points.
func TestClearDirKeepsTheFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vectors")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"part-00000001.parquet", ".part-00000002.jsonl.sha256", "sub/x"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := ClearDir(dir); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("after ClearDir: %v, %v", ents, err)
	}
	if err := ClearDir(filepath.Join(dir, "missing")); err != nil {
		t.Fatalf("ClearDir of a missing folder: %v", err)
	}
}
