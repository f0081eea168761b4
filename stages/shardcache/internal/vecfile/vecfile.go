// Package vecfile is the companion file of a chunk shard: the shard's keys and embeddings,
// uncompressed and fixed-width, so one row is one pread at a computed offset. shardcache owns
// the names, the write ordering and recovery; this package owns the format and its checks.
package vecfile

import (
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
)

// Companion file of a shard: the same rows' keys and embeddings, uncompressed and fixed-width,
// so that a hit is one pread of one row whatever order the hits come in. The Parquet shard stays
// the file of record (other tools read it; a lost companion is rebuilt from it).
//
//	header (32 bytes): magic "RPVEC\0\0\1", seq u64, dim u32, rows u32, reserved u32,
//	                   CRC32C of bytes 0..27 (u32)
//	row (16 + 4*dim bytes, at 32 + row*stride): key u64, CRC32C of key bytes ++ embedding bytes
//	                   (u32), zero u32, embedding dim x float32
//
// Everything little-endian. The row CRC turns a flipped bit into an error instead of a wrong
// vector; the key in the row catches an index entry that names the wrong row or shard.
const (
	magic      = "RPVEC\x00\x00\x01"
	HeaderSize = 32
	RowHeader  = 16
)

// ErrCorrupt: a companion file (or the row read from it) failed its checks. Deleting the
// companion makes the next Open rebuild it from the Parquet shard.
var ErrCorrupt = errors.New("corrupt companion file")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func Stride(dim int) int64 { return RowHeader + 4*int64(dim) }

func Size(rows int64, dim int) int64 { return HeaderSize + rows*Stride(dim) }

func EncodeHeader(seq uint64, dim, rows int) []byte {
	b := make([]byte, HeaderSize)
	copy(b, magic)
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint32(b[16:], uint32(dim))
	binary.LittleEndian.PutUint32(b[20:], uint32(rows))
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
	return b
}

// encodeRow fills b (one stride) with key and emb.
func encodeRow(b []byte, key uint64, emb []float32) {
	binary.LittleEndian.PutUint64(b[0:], key)
	binary.LittleEndian.PutUint32(b[12:], 0)
	p := b[RowHeader:]
	for i, f := range emb {
		binary.LittleEndian.PutUint32(p[4*i:], math.Float32bits(f))
	}
	crc := crc32.Update(crc32.Checksum(b[:8], castagnoli), castagnoli, p)
	binary.LittleEndian.PutUint32(b[8:], crc)
}

// Write writes the companion of shard seq the same way shards are written (temp name,
// fsync, rename, fsync dir), so a crash leaves a complete companion or a *.tmp that Open
// removes. emb holds len(keys)*dim floats.
func Write(path string, seq uint64, dim int, keys []uint64, emb []float32) (int64, error) {
	if len(emb) != len(keys)*dim || len(keys) > math.MaxUint32 {
		return 0, fmt.Errorf("companion %s: %d floats for %d rows of dim %d", path, len(emb), len(keys), dim)
	}
	return atomicfile.WriteAt(path, path+".tmp", func(w io.Writer) error {
		if _, err := w.Write(EncodeHeader(seq, dim, len(keys))); err != nil {
			return err
		}
		row := make([]byte, Stride(dim))
		for i, k := range keys {
			encodeRow(row, k, emb[i*dim:(i+1)*dim])
			if _, err := w.Write(row); err != nil {
				return err
			}
		}
		return nil
	})
}

// DropPageCache tells the kernel that path's pages will not be read soon. Written shards are
// read again only to rebuild a lost companion, so their pages are better spent on companions;
// failure is harmless and ignored.
func DropPageCache(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	_ = f.Close()
}

// File is an open companion. refs counts readers so that eviction from the LRU closes the
// file only after the last read on it returns.
type File struct {
	f    *os.File
	seq  uint64
	rows int64
	refs int
	dead bool
	elem *list.Element
}

// Pool bounds open companion files with an LRU: a 10^7-window store has over a thousand
// shards and a process should not hold a descriptor for each.
type Pool struct {
	pathOf  func(seq uint64) string
	dim     int
	max     int
	stride  int64
	scratch sync.Pool

	mu    sync.Mutex
	open  map[uint64]*File
	order *list.List // front = most recently used
	opens atomic.Int64
}

// DefaultOpen is how many companions a pool keeps open when not told: a quarter of the
// process's descriptor limit (Go raises the soft limit to the hard one at start), at least 64
// and at most 4096. A random hit on a file that is not open costs an open, a header read and a
// close; at 10^7 windows (1,953 shards) with 64 open files that was 21% of the read CPU
// (ops/bench/results/store-2026-12-01b.md). 4096 descriptors cover 3.3*10^7 windows at the
// default shard size, and cost the kernel about 1 KiB each.
func DefaultOpen() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 64
	}
	return int(min(max(lim.Cur/4, 64), 4096))
}

// Opens counts companion files opened so far.
func (v *Pool) Opens() int64 { return v.opens.Load() }

func NewPool(pathOf func(seq uint64) string, dim, max int) *Pool {
	v := &Pool{pathOf: pathOf, dim: dim, max: max, stride: Stride(dim), open: map[uint64]*File{}, order: list.New()}
	v.scratch.New = func() any { b := make([]byte, v.stride); return &b }
	return v
}

func (v *Pool) Acquire(seq uint64) (*File, error) {
	v.mu.Lock()
	if f, ok := v.open[seq]; ok {
		f.refs++
		v.order.MoveToFront(f.elem)
		v.mu.Unlock()
		return f, nil
	}
	v.mu.Unlock()
	// Opened outside the lock so a slow open does not stall hits on other shards; a racing
	// open of the same file is closed again below.
	nf, err := v.openFile(seq)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if f, ok := v.open[seq]; ok {
		_ = nf.f.Close()
		f.refs++
		v.order.MoveToFront(f.elem)
		return f, nil
	}
	nf.refs = 1
	nf.elem = v.order.PushFront(nf)
	v.open[seq] = nf
	for v.order.Len() > v.max {
		old := v.order.Back().Value.(*File)
		v.order.Remove(old.elem)
		delete(v.open, old.seq)
		old.dead = true
		if old.refs == 0 {
			_ = old.f.Close()
		}
	}
	return nf, nil
}

func (v *Pool) Release(f *File) {
	v.mu.Lock()
	f.refs--
	closeIt := f.dead && f.refs == 0
	v.mu.Unlock()
	if closeIt {
		_ = f.f.Close()
	}
}

// openFile opens and checks a companion's header and size; rows are checked per read.
func (v *Pool) openFile(seq uint64) (*File, error) {
	path := v.pathOf(seq)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	rows, err := checkHeader(f, seq, v.dim)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	v.opens.Add(1)
	return &File{f: f, seq: seq, rows: rows}, nil
}

// checkHeader validates the header of an open companion against the shard it belongs to and
// the file's size, and returns its row count.
func checkHeader(f *os.File, seq uint64, dim int) (int64, error) {
	h := make([]byte, HeaderSize)
	if _, err := f.ReadAt(h, 0); err != nil {
		return 0, fmt.Errorf("header: %v", err)
	}
	switch {
	case string(h[:8]) != magic:
		return 0, errors.New("bad magic")
	case binary.LittleEndian.Uint32(h[28:]) != crc32.Checksum(h[:28], castagnoli):
		return 0, errors.New("header checksum mismatch")
	case binary.LittleEndian.Uint64(h[8:]) != seq:
		return 0, fmt.Errorf("header names shard %d", binary.LittleEndian.Uint64(h[8:]))
	case int(binary.LittleEndian.Uint32(h[16:])) != dim:
		return 0, fmt.Errorf("dim %d, cache has %d", binary.LittleEndian.Uint32(h[16:]), dim)
	}
	rows := int64(binary.LittleEndian.Uint32(h[20:]))
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Size() != Size(rows, dim) {
		return 0, fmt.Errorf("%d bytes, want %d for %d rows", st.Size(), Size(rows, dim), rows)
	}
	return rows, nil
}

// read copies row's embedding into dst after checking that the row holds key and its CRC.
func (v *Pool) Read(f *File, row int32, key uint64, dst []float32) error {
	if row < 0 || int64(row) >= f.rows {
		return fmt.Errorf("%w: shard %d has %d rows, index names row %d", ErrCorrupt, f.seq, f.rows, row)
	}
	bp := v.scratch.Get().(*[]byte)
	defer v.scratch.Put(bp)
	b := *bp
	if _, err := f.f.ReadAt(b, HeaderSize+int64(row)*v.stride); err != nil {
		return fmt.Errorf("companion of shard %d: %w", f.seq, err)
	}
	p := b[RowHeader:]
	if crc32.Update(crc32.Checksum(b[:8], castagnoli), castagnoli, p) != binary.LittleEndian.Uint32(b[8:]) {
		return fmt.Errorf("%w: shard %d row %d: checksum mismatch", ErrCorrupt, f.seq, row)
	}
	if got := binary.LittleEndian.Uint64(b); got != key {
		return fmt.Errorf("%w: index says key %016x is at shard %d row %d, the companion has %016x", ErrCorrupt, key, f.seq, row, got)
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
	}
	return nil
}

func (v *Pool) CloseAll() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for seq, f := range v.open {
		f.dead = true
		if f.refs == 0 {
			_ = f.f.Close()
		}
		delete(v.open, seq)
	}
	v.order.Init()
}
