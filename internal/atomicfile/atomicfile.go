// Package atomicfile writes small files (checkpoints, state, summaries) so that a reader sees
// either the old content or the new, never a torn write: temp file, fsync, rename, dir fsync.
//
// Temp files are hidden (.tmp-<name>-<random>), so directory readers such as pyarrow's dataset
// discovery skip them. A process killed mid-write leaves one behind; the next write of the same
// path removes it, so they do not pile up. That assumes what the package's callers already
// need for the rename to mean anything: one writer per path at a time.
package atomicfile

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Write makes data visible at path only when complete.
func Write(path string, data []byte) error {
	return WriteFunc(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFunc is Write for content too large to hold in memory: fill streams it, buffered, into
// the temporary file; an error from fill leaves path untouched.
func WriteFunc(path string, fill func(io.Writer) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	removeStale(dir, filepath.Base(path))
	f, err := os.CreateTemp(dir, tempPrefix(filepath.Base(path))+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := fill(bw); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

func tempPrefix(base string) string { return ".tmp-" + base + "-" }

// removeStale deletes the temps an interrupted write of base left in dir. Only names CreateTemp
// makes for exactly this base match: a digit suffix, so "a" never claims "a-b"'s temps.
func removeStale(dir, base string) {
	prefix := tempPrefix(base)
	matches, _ := filepath.Glob(filepath.Join(dir, globEscape(prefix)+"*"))
	for _, m := range matches {
		suffix := strings.TrimPrefix(filepath.Base(m), prefix)
		if suffix != "" && strings.Trim(suffix, "0123456789") == "" {
			_ = os.Remove(m)
		}
	}
}

func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`)
	return r.Replace(s)
}
