package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFuncAllOrNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "f.txt")
	if err := Write(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFunc(path, func(w io.Writer) error {
		io.WriteString(w, "half of the new content")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WriteFunc error %v, want boom", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("after a failed fill the file holds %q, want the old content", b)
	}
	if err := WriteFunc(path, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("file holds %q, want new", b)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
}

// A write killed before its rename leaves a temp; the next write of the same path removes it,
// and leaves other files' temps (even of a name it prefixes), the temp of another live process
// writing the same path, and unrelated files alone.
func TestWriteRemovesStaleTempsOfItsPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.checkpoint.json")
	// A pid that cannot be running: above the kernel's pid_max limit (2^22).
	dead := ".tmp-p.checkpoint.json-99999999-123"
	live := fmt.Sprintf(".tmp-p.checkpoint.json-%d-456", os.Getppid()) // another live writer
	stale := []string{".tmp-p.checkpoint.json-123456", ".tmp-p.checkpoint.json-9", dead}
	kept := []string{".tmp-p.checkpoint.json-x-1", ".tmp-q.json-77", "p.checkpoint.json.bak", live}
	for _, n := range append(append([]string{}, stale...), kept...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("torn"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := Write(path, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for _, n := range stale {
		if _, err := os.Stat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale temp %s still there (%v)", n, err)
		}
	}
	for _, n := range kept {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s was removed: %v", n, err)
		}
	}
}
