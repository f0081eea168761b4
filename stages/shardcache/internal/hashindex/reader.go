package hashindex

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Reader looks keys up in a table that another process may be writing (the cache's writer):
// it opens the file read-only, takes no lock and never writes, so the writer is neither
// blocked nor slowed. What it can meet, and what it does:
//
//   - a page the writer is rewriting while it is read: the page CRC fails, the read is retried
//     (a few times, briefly) and, if the page keeps failing, reported as ErrCorrupt;
//   - a doubling or a rebuild: the writer renames a new, complete table over the path, and the
//     file this Reader holds stops changing. Refresh notices (the path names another file) and
//     reopens, which is why callers refresh when a key is not found.
//
// Entries the writer inserted but has not committed yet are visible too: the cache writes a
// shard's rows (the companion) before its table entries, so every entry names a row that can
// already be read, durable or not.
type Reader struct {
	path string

	mu   sync.RWMutex
	f    *os.File
	info os.FileInfo
	bits uint32
}

// tornRetries bounds the re-reads of a page (or header) whose CRC fails while a writer may be
// rewriting it; tornWait is the pause between them.
const (
	tornRetries = 5
	tornWait    = 200 * time.Microsecond
)

// OpenReader opens the table at path read-only. A missing file is os.ErrNotExist.
func OpenReader(path string) (*Reader, error) {
	r := &Reader{path: path}
	f, info, bits, err := openRO(path)
	if err != nil {
		return nil, err
	}
	r.f, r.info, r.bits = f, info, bits
	return r, nil
}

func openRO(path string) (*os.File, os.FileInfo, uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("hashindex: %w", err)
	}
	fail := func(err error) (*os.File, os.FileInfo, uint32, error) {
		_ = f.Close()
		return nil, nil, 0, err
	}
	info, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("hashindex: %w", err))
	}
	hb := make([]byte, PageSize)
	var h header
	for try := 0; ; try++ {
		if _, err := f.ReadAt(hb, 0); err != nil {
			if errors.Is(err, io.EOF) {
				return fail(fmt.Errorf("%w: truncated header", ErrCorrupt))
			}
			return fail(fmt.Errorf("hashindex: %w", err))
		}
		if h, err = decodeHeader(hb); err == nil {
			break
		} else if try == tornRetries {
			return fail(err)
		}
		time.Sleep(tornWait) // the writer's Commit may be rewriting the header
	}
	if want := pageOffset(uint64(1) << h.Bits); info.Size() != want {
		return fail(fmt.Errorf("%w: %d bytes, %d buckets need %d", ErrCorrupt, info.Size(), uint64(1)<<h.Bits, want))
	}
	return f, info, h.Bits, nil
}

// Refresh reopens the table when its path names another file than the one held (the writer
// doubled or rebuilt it), and reports whether it did. Its cost is one stat when nothing changed.
func (r *Reader) Refresh() (bool, error) {
	st, err := os.Stat(r.path)
	if err != nil {
		return false, fmt.Errorf("hashindex: %w", err)
	}
	r.mu.RLock()
	closed, same := r.f == nil, r.f != nil && os.SameFile(st, r.info)
	r.mu.RUnlock()
	if closed {
		return false, errClosed
	}
	if same {
		return false, nil
	}
	f, info, bits, err := openRO(r.path)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	old := r.f
	if old == nil { // closed meanwhile
		r.mu.Unlock()
		_ = f.Close()
		return false, errClosed
	}
	r.f, r.info, r.bits = f, info, bits
	r.mu.Unlock()
	_ = old.Close()
	return true, nil
}

// Lookup returns where key lives, as Table.Lookup does.
func (r *Reader) Lookup(key uint64) (shard uint64, row int32, ok bool, err error) {
	buf := pagePool.Get().(*[PageSize]byte)
	defer pagePool.Put(buf)
	for try := 0; ; try++ {
		r.mu.RLock()
		if r.f == nil {
			r.mu.RUnlock()
			return 0, 0, false, errClosed
		}
		b := bucketOf(key, r.bits)
		_, rerr := r.f.ReadAt(buf[:], pageOffset(b))
		r.mu.RUnlock()
		if rerr != nil {
			return 0, 0, false, fmt.Errorf("hashindex: page %d: %w", b, rerr)
		}
		n, cerr := checkPage(buf[:])
		if cerr != nil {
			if try == tornRetries {
				return 0, 0, false, fmt.Errorf("page %d: %w", b, cerr)
			}
			time.Sleep(tornWait)
			continue
		}
		if s, rw, found := findEntry(buf[:], n, key); found {
			return s, rw, true, nil
		}
		return 0, 0, false, nil
	}
}

// Close releases the file.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
