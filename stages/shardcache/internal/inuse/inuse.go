// Package inuse names the process that holds a chunk cache's index lock, so that a second
// process that cannot open the cache says who has it and what to do.
package inuse

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Error is a cache another process has open: its index is locked (one writer at a time),
// so this one cannot open it. The message says so in a user's terms -- which directory, which
// process when it can tell, what to do -- since "resource temporarily unavailable" says none of it.
type Error struct {
	Dir     string
	PID     int    // the process holding the lock; 0 when it cannot be told
	Command string // its command line, when readable
	Err     error  // the lock's own error
}

func (e *Error) Error() string {
	who := "another reignpipe process"
	if e.PID > 0 {
		who += fmt.Sprintf(" (pid %d", e.PID)
		if e.Command != "" {
			who += ": " + e.Command
		}
		who += ")"
	}
	return fmt.Sprintf("the chunk cache at %s is in use by %s -- a running pipeline, stage or materialize: "+
		"wait for it to finish or stop it (Ctrl-C stops a run after committing), or give this command another cache.dir "+
		"(search and serve read a cache in use without waiting)", e.Dir, who)
}

func (e *Error) Unwrap() error { return e.Err }

// Wrap turns the lock error of the cache at dir into an *Error when another process holds the
// lock (the kernel's EWOULDBLOCK, EAGAIN on Linux); other errors are returned as they are.
func Wrap(dir string, err error) error {
	if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EAGAIN) {
		return err
	}
	e := &Error{Dir: dir, Err: err}
	e.PID = lockHolder(filepath.Join(dir, "index", "LOCK"))
	if e.PID > 0 {
		e.Command = commandLine(e.PID)
	}
	return e
}

// lockHolder asks the kernel which process holds the write lock on the index's LOCK file
// (Pebble takes a POSIX record lock on it); 0 when it cannot tell.
func lockHolder(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil || lk.Type == unix.F_UNLCK {
		return 0
	}
	return int(lk.Pid)
}

// commandLine is a process's command line as ps shows it, "" when it cannot be read.
func commandLine(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return ""
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(args) > 0 {
		args[0] = filepath.Base(args[0])
	}
	s := strings.Join(args, " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
