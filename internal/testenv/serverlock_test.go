package testenv

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// otherProcess reports whether a separate open of the lock file, standing for another test
// process, can take it in the given mode right now.
func otherProcess(t *testing.T, l *ServerLock, addr string, mode int) bool {
	t.Helper()
	f, err := l.open(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), mode|syscall.LOCK_NB)
	if err == syscall.EWOULDBLOCK {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func testLock(t *testing.T) (*ServerLock, string) {
	l := NewServerLock("test")
	addr := fmt.Sprintf("lock-%d-%s", os.Getpid(), t.Name())
	f, err := l.open(addr)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { os.Remove(f.Name()) })
	return l, addr
}

func TestLockAcrossProcesses(t *testing.T) {
	l, addr := testLock(t)
	t.Run("shared", func(t *testing.T) {
		l.Acquire(t, addr, syscall.LOCK_SH)
		if !otherProcess(t, l, addr, syscall.LOCK_SH) || otherProcess(t, l, addr, syscall.LOCK_EX) {
			t.Fatal("while shared here, another process must share the lock but not own it")
		}
		// A subtest takes over from its parent, which waits for it in t.Run.
		t.Run("exclusive", func(t *testing.T) {
			l.Acquire(t, addr, syscall.LOCK_EX)
			if otherProcess(t, l, addr, syscall.LOCK_SH) {
				t.Fatal("while exclusive here, another process shared the lock")
			}
		})
		if !otherProcess(t, l, addr, syscall.LOCK_SH) || otherProcess(t, l, addr, syscall.LOCK_EX) {
			t.Fatal("after the subtest, the parent must hold the lock shared again")
		}
	})
	if !otherProcess(t, l, addr, syscall.LOCK_EX) {
		t.Fatal("the lock is still held after the tests that took it ended")
	}
}

func TestLockWaitsForSiblings(t *testing.T) {
	l, addr := testLock(t)
	held, waiting := make(chan struct{}), make(chan struct{})
	var released atomic.Bool
	t.Run("group", func(t *testing.T) {
		t.Run("user", func(t *testing.T) {
			t.Parallel()
			l.Acquire(t, addr, syscall.LOCK_SH)
			close(held)
			<-waiting
			time.Sleep(100 * time.Millisecond)
			released.Store(true)
		})
		t.Run("disruptor", func(t *testing.T) {
			t.Parallel()
			<-held
			close(waiting)
			l.Acquire(t, addr, syscall.LOCK_EX)
			if !released.Load() {
				t.Fatal("exclusive lock granted while a sibling test held it shared")
			}
		})
	})
}
