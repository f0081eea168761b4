// Package atomicfile writes small files (checkpoints, state, summaries) so that a reader sees
// either the old content or the new, never a torn write: temp file, fsync, rename, dir fsync.
//
// Temp files are hidden (.tmp-<name>-<pid>-<random>), so directory readers such as pyarrow's
// dataset discovery skip them. A process killed mid-write leaves one behind; the next write of
// the same path removes the temps of processes that no longer run, so they do not pile up,
// while a temp of another live process writing the same path (two stage workers sharing a
// state folder) is left alone.
package atomicfile

import (
	"bufio"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	f, err := os.CreateTemp(dir, tempPrefix(filepath.Base(path))+strconv.Itoa(os.Getpid())+"-*")
	if err != nil {
		return err
	}
	_, err = finish(f, path, fill)
	return err
}

// WriteAt is WriteFunc with the temp file named by the caller, for writers whose crash
// leftovers are part of their own recovery (shardcache removes shards/*.tmp when it opens):
// fill streams into tmp, which is fsynced and renamed to path, and the folder fsynced. It
// returns the file's size; on any error tmp is removed and path is untouched.
func WriteAt(path, tmp string, fill func(io.Writer) error) (int64, error) {
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	return finish(f, path, fill)
}

// finish fills the open temp f, makes it durable and renames it to path.
func finish(f *os.File, path string, fill func(io.Writer) error) (int64, error) {
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	// A bufio.Writer also hides f's Close from fill (the Parquet writer would close the file
	// before it is fsynced).
	bw := bufio.NewWriterSize(f, 1<<20)
	err := fill(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	var size int64
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil {
			size = st.Size()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return size, Rename(tmp, path)
}

// Rename moves a complete file from to path and makes the move durable (the folder is
// fsynced): after a crash path holds either its old content or from's, and the move is not
// lost. Both must be in the same folder.
func Rename(from, path string) error {
	if err := os.Rename(from, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

func tempPrefix(base string) string { return ".tmp-" + base + "-" }

// removeStale deletes the temps that interrupted writes of base left in dir: those of processes
// that are gone, and those of the format before the pid was in the name. Only names this
// package makes for exactly this base match (digits after the prefix), so "a" never claims
// "a-b"'s temps.
func removeStale(dir, base string) {
	prefix := tempPrefix(base)
	matches, _ := filepath.Glob(filepath.Join(dir, globEscape(prefix)+"*"))
	for _, m := range matches {
		suffix := strings.TrimPrefix(filepath.Base(m), prefix)
		pid, rnd, withPid := strings.Cut(suffix, "-")
		if !allDigits(pid) || (withPid && !allDigits(rnd)) {
			continue
		}
		if withPid {
			if n, err := strconv.Atoi(pid); err == nil && alive(n) {
				continue
			}
		}
		_ = os.Remove(m)
	}
}

func allDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// alive reports whether process pid exists (EPERM: it does, as another user).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`)
	return r.Replace(s)
}
