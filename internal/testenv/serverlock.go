package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// ServerLock is one flock per test process on a file named after a test server (the Kafka
// broker, the PostgreSQL server), plus the bookkeeping that lets the process's own tests share
// it. Every package's tests share the one server and `go test ./...` runs packages at once, so a
// test that takes the server down holds it exclusively and waits for the tests using it, which
// hold it shared. A subtest may take the lock exclusively while its parents hold it shared: they
// are waiting for it in t.Run.
type ServerLock struct {
	kind    string
	mu      sync.Mutex
	changed *sync.Cond
	f       *os.File
	held    int            // flock mode held on f: 0, LOCK_SH or LOCK_EX
	holders map[string]int // test name -> mode it asked for
}

// NewServerLock is the lock of one kind of server ("kafka", "pg"); its files are named after it.
func NewServerLock(kind string) *ServerLock {
	l := &ServerLock{kind: kind, holders: map[string]int{}}
	l.changed = sync.NewCond(&l.mu)
	return l
}

// Acquire holds the lock of the server at key in mode (syscall.LOCK_SH or LOCK_EX) until the
// test ends; a test that holds it already in a mode at least as strong keeps it.
func (l *ServerLock) Acquire(t testing.TB, key string, mode int) {
	t.Helper()
	name := t.Name()
	l.mu.Lock()
	defer l.mu.Unlock()
	cur, had := l.holders[name]
	if cur >= mode {
		return
	}
	for !l.compatible(name, mode) {
		l.changed.Wait()
	}
	if l.f == nil {
		f, err := l.open(key)
		if err != nil {
			t.Fatalf("%s test lock: %v", l.kind, err)
		}
		l.f = f
	}
	l.holders[name] = mode
	if err := l.sync(); err != nil {
		if had {
			l.holders[name] = cur
		} else {
			delete(l.holders, name)
		}
		t.Fatalf("%s test lock: locking the server: %v", l.kind, err)
	}
	if !had {
		t.Cleanup(func() { l.release(t, name) })
	}
}

func (l *ServerLock) release(t testing.TB, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.holders, name)
	if err := l.sync(); err != nil {
		t.Errorf("%s test lock: unlocking the server: %v", l.kind, err)
	}
	l.changed.Broadcast()
}

// compatible: nobody but the test's own parents may hold the lock when it wants it
// exclusively, and nobody else may hold it exclusively when it wants to share it.
func (l *ServerLock) compatible(name string, mode int) bool {
	for h, m := range l.holders {
		if h == name || strings.HasPrefix(name, h+"/") {
			continue
		}
		if mode == syscall.LOCK_EX || m == syscall.LOCK_EX {
			return false
		}
	}
	return true
}

// sync makes the flock match the strongest mode any test of this process holds.
func (l *ServerLock) sync() error {
	want := 0
	for _, m := range l.holders {
		if m == syscall.LOCK_EX || want == 0 {
			want = m
		}
	}
	if want == l.held {
		return nil
	}
	op := want
	if want == 0 {
		op = syscall.LOCK_UN
	}
	for {
		err := syscall.Flock(int(l.f.Fd()), op)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		l.held = want
		return nil
	}
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

func (l *ServerLock) open(key string) (*os.File, error) {
	// Per user: another user's file in a sticky /tmp may not be openable.
	name := fmt.Sprintf("reignpipe-%s-tests-%d-%s.lock", l.kind, os.Getuid(), unsafeFileChars.ReplaceAllString(key, "_"))
	return os.OpenFile(filepath.Join(os.TempDir(), name), os.O_RDONLY|os.O_CREATE, 0o644)
}
