// Package hashindex is the chunk cache's key -> (shard, row) table: a file of fixed 4 KiB pages,
// one bucket per page, the bucket chosen by the key's top bits. Window keys are already uniform
// 64-bit hashes, so the top bits spread them evenly and a lookup is one page read whatever the
// number of keys; a B-tree or LSM index (Pebble, before this) costs more block reads, and more
// cache misses, as the store grows.
//
// The table is derived data: shardcache can rebuild it from the shards at any time. What this
// package guarantees is that a damaged or half-written table is detected, never misread:
//
//   - page 0 is a header with a CRC32C; every bucket page carries a CRC32C of its own, checked on
//     every read, so a torn or flipped page is an error, not a wrong location;
//   - the header records a watermark, the highest shard sequence whose entries were written and
//     fsynced before the header was; entries of later shards may be missing or torn;
//   - the header's clean flag is set only by Close after everything is synced, and cleared (and
//     synced) by Open before anything is written, so Open after a crash knows to check every page.
//
// A bucket that fills doubles the table: bucket i splits into 2i and 2i+1 by the next key bit,
// so the copy is one sequential pass; it is written to a temp file, fsynced and renamed over the
// table, so a crash during it leaves the old table.
package hashindex

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

const (
	// PageSize is the unit of every read and write.
	PageSize = 4096
	// Slots is the number of entries a bucket page holds: a 16-byte page header (CRC, count)
	// and 16-byte entries (key, shard, row).
	Slots     = (PageSize - pageHead) / entrySize
	pageHead  = 16
	entrySize = 16
	// MaxBits bounds the table at 2^32 pages (16 TiB), far past any cache; it also keeps a
	// corrupt header from asking for an absurd file.
	MaxBits = 32

	magic   = "RPHASHIX"
	version = 1
	// headerLen is the part of page 0 the header uses; the CRC covers the bytes before it.
	headerLen = 48
)

// ErrCorrupt: the table failed a check (header, size or a page CRC). shardcache rebuilds it.
var ErrCorrupt = errors.New("hashindex: table is corrupt")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is page 0.
type header struct {
	Bits      uint32
	Clean     bool
	Watermark uint64 // highest shard seq whose entries are durable
	MaxSeq    uint64 // highest shard seq ever inserted: shardcache never reuses one a stale entry may name
	Entries   uint64 // entries at the last Commit; informational
}

func encodeHeader(h header) []byte {
	b := make([]byte, PageSize)
	copy(b, magic)
	binary.LittleEndian.PutUint32(b[8:], version)
	binary.LittleEndian.PutUint32(b[12:], h.Bits)
	if h.Clean {
		b[16] = 1
	}
	binary.LittleEndian.PutUint64(b[20:], h.Watermark)
	binary.LittleEndian.PutUint64(b[28:], h.MaxSeq)
	binary.LittleEndian.PutUint64(b[36:], h.Entries)
	binary.LittleEndian.PutUint32(b[44:], crc32.Checksum(b[:44], castagnoli))
	return b
}

func decodeHeader(b []byte) (header, error) {
	if len(b) < headerLen || string(b[:8]) != magic {
		return header{}, fmt.Errorf("%w: bad header", ErrCorrupt)
	}
	if crc32.Checksum(b[:44], castagnoli) != binary.LittleEndian.Uint32(b[44:]) {
		return header{}, fmt.Errorf("%w: header checksum", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != version {
		return header{}, fmt.Errorf("%w: version %d", ErrCorrupt, v)
	}
	h := header{
		Bits:      binary.LittleEndian.Uint32(b[12:]),
		Clean:     b[16] == 1,
		Watermark: binary.LittleEndian.Uint64(b[20:]),
		MaxSeq:    binary.LittleEndian.Uint64(b[28:]),
		Entries:   binary.LittleEndian.Uint64(b[36:]),
	}
	if h.Bits > MaxBits || b[16] > 1 {
		return header{}, fmt.Errorf("%w: bad header fields", ErrCorrupt)
	}
	return h, nil
}

// Entry is one key's location.
type Entry struct {
	Key   uint64
	Shard uint32
	Row   uint32
}

// page is a decoded bucket. An all-zero page is a valid empty bucket, so a new table is a
// sparse file.
type page struct {
	n  int
	es [Slots]Entry
}

func decodePage(b []byte, p *page) error {
	if len(b) != PageSize {
		return fmt.Errorf("%w: short page", ErrCorrupt)
	}
	n, err := checkPage(b)
	if err != nil {
		return err
	}
	p.n = n
	for i := 0; i < n; i++ {
		e := b[pageHead+i*entrySize:]
		p.es[i] = Entry{Key: binary.LittleEndian.Uint64(e), Shard: binary.LittleEndian.Uint32(e[8:]), Row: binary.LittleEndian.Uint32(e[12:])}
	}
	return nil
}

// checkPage validates a page and returns its entry count. The CRC covers the count and the
// used slots only: a lookup pays for the entries it may scan, not for the empty rest of the
// page (what lies past the count is never read).
func checkPage(b []byte) (int, error) {
	sum := binary.LittleEndian.Uint32(b)
	n := int(binary.LittleEndian.Uint16(b[4:]))
	if n > Slots {
		if sum == 0 && allZero(b) {
			return 0, nil
		}
		return 0, fmt.Errorf("%w: page count %d", ErrCorrupt, n)
	}
	if sum != crc32.Checksum(b[4:pageHead+n*entrySize], castagnoli) {
		if sum == 0 && allZero(b) {
			return 0, nil
		}
		return 0, fmt.Errorf("%w: page checksum", ErrCorrupt)
	}
	return n, nil
}

func encodePage(b []byte, p *page) {
	clear(b)
	binary.LittleEndian.PutUint16(b[4:], uint16(p.n))
	for i := 0; i < p.n; i++ {
		e := b[pageHead+i*entrySize:]
		binary.LittleEndian.PutUint64(e, p.es[i].Key)
		binary.LittleEndian.PutUint32(e[8:], p.es[i].Shard)
		binary.LittleEndian.PutUint32(e[12:], p.es[i].Row)
	}
	binary.LittleEndian.PutUint32(b, crc32.Checksum(b[4:pageHead+p.n*entrySize], castagnoli))
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// Table is safe for concurrent use: lookups share a read lock; writes take it exclusively.
type Table struct {
	mu      sync.RWMutex
	path    string
	f       *os.File
	h       header
	entries int64
	// damaged is set when a read meets a bad page, so Close leaves the table unclean and the
	// next Open checks every page (and shardcache rebuilds the table).
	damaged bool
	closed  bool
}

func bucketOf(key uint64, bits uint32) uint64 {
	if bits == 0 {
		return 0
	}
	return key >> (64 - bits)
}

func pageOffset(b uint64) int64 { return int64(b+1) * PageSize }

// Create writes an empty table of 2^bits buckets at path (temp file, fsync, rename, dir fsync)
// and opens it.
func Create(path string, bits int) (*Table, error) {
	if bits < 0 || bits > MaxBits {
		return nil, fmt.Errorf("hashindex: bits %d out of range", bits)
	}
	if err := writeFresh(path, header{Bits: uint32(bits)}, nil); err != nil {
		return nil, err
	}
	return Open(path)
}

// writeFresh writes a table of h.Bits buckets, filling it with fill (which writes pages through
// the given file) before the header, then makes it path atomically.
func writeFresh(path string, h header, fill func(f *os.File) error) (err error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("hashindex: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Truncate(pageOffset(uint64(1) << h.Bits)); err != nil {
		return fmt.Errorf("hashindex: %w", err)
	}
	if fill != nil {
		if err := fill(f); err != nil {
			return err
		}
	}
	h.Clean = true
	if _, err := f.WriteAt(encodeHeader(h), 0); err != nil {
		return fmt.Errorf("hashindex: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("hashindex: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("hashindex: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("hashindex: %w", err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("hashindex: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("hashindex: sync %s: %w", dir, err)
	}
	return nil
}

// Open opens the table at path. A missing file is os.ErrNotExist; a bad header or size, or
// (after an unclean close) any bad page, is ErrCorrupt. Open leaves the table marked unclean
// on disk until Close.
func Open(path string) (*Table, error) {
	_ = os.Remove(path + ".tmp") // a doubling or rebuild a crash interrupted
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("hashindex: %w", err)
	}
	t, err := open(f, path)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return t, nil
}

func open(f *os.File, path string) (*Table, error) {
	hb := make([]byte, PageSize)
	if _, err := f.ReadAt(hb, 0); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: truncated header", ErrCorrupt)
		}
		return nil, fmt.Errorf("hashindex: %w", err)
	}
	h, err := decodeHeader(hb)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("hashindex: %w", err)
	}
	if want := pageOffset(uint64(1) << h.Bits); st.Size() != want {
		return nil, fmt.Errorf("%w: %d bytes, %d buckets need %d", ErrCorrupt, st.Size(), uint64(1)<<h.Bits, want)
	}
	t := &Table{path: path, f: f, h: h, entries: int64(h.Entries)}
	if !h.Clean {
		// Pages written after the last Commit may be torn; only a full check tells.
		n, err := t.count()
		if err != nil {
			return nil, err
		}
		t.entries = n
	}
	t.h.Clean = false
	if err := t.writeHeader(); err != nil {
		return nil, err
	}
	return t, nil
}

// count reads every page, checking its CRC, and returns the number of entries.
func (t *Table) count() (int64, error) {
	var n int64
	err := t.scan(func(p *page) error { n += int64(p.n); return nil })
	return n, err
}

func (t *Table) writeHeader() error {
	t.h.Entries = uint64(t.entries)
	if _, err := t.f.WriteAt(encodeHeader(t.h), 0); err != nil {
		return fmt.Errorf("hashindex: %w", err)
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("hashindex: %w", err)
	}
	return nil
}

// Watermark is the highest shard sequence whose entries are durable.
func (t *Table) Watermark() uint64 { t.mu.RLock(); defer t.mu.RUnlock(); return t.h.Watermark }

// MaxSeq is the highest shard sequence ever inserted.
func (t *Table) MaxSeq() uint64 { t.mu.RLock(); defer t.mu.RUnlock(); return t.h.MaxSeq }

// Bits is log2 of the bucket count.
func (t *Table) Bits() int { t.mu.RLock(); defer t.mu.RUnlock(); return int(t.h.Bits) }

// Len is the number of entries.
func (t *Table) Len() int64 { t.mu.RLock(); defer t.mu.RUnlock(); return t.entries }

var errClosed = errors.New("hashindex: table is closed")

func (t *Table) readPage(b uint64, buf []byte, p *page) error {
	if _, err := t.f.ReadAt(buf, pageOffset(b)); err != nil {
		return fmt.Errorf("hashindex: page %d: %w", b, err)
	}
	if err := decodePage(buf, p); err != nil {
		return fmt.Errorf("page %d: %w", b, err)
	}
	return nil
}

// pagePool spares the hot path a 4 KiB allocation per lookup: the buffer escapes through
// ReadAt, and the garbage cost more than the read.
var pagePool = sync.Pool{New: func() any { return new([PageSize]byte) }}

// Lookup returns where key lives.
func (t *Table) Lookup(key uint64) (shard uint64, row int32, ok bool, err error) {
	buf := pagePool.Get().(*[PageSize]byte)
	defer pagePool.Put(buf)
	t.mu.RLock()
	if t.closed {
		t.mu.RUnlock()
		return 0, 0, false, errClosed
	}
	b := bucketOf(key, t.h.Bits)
	_, rerr := t.f.ReadAt(buf[:], pageOffset(b))
	t.mu.RUnlock()
	if rerr != nil {
		return 0, 0, false, fmt.Errorf("hashindex: page %d: %w", b, rerr)
	}
	// Only the matching entry is decoded: a lookup is the hot path of every cache hit.
	n, err := checkPage(buf[:])
	if err != nil {
		t.mu.Lock()
		t.damaged = true
		t.mu.Unlock()
		return 0, 0, false, fmt.Errorf("page %d: %w; reopening the cache rebuilds the table", b, err)
	}
	shard, row, ok = findEntry(buf[:], n, key)
	return shard, row, ok, nil
}

// findEntry scans the n entries of a checked page for key.
func findEntry(b []byte, n int, key uint64) (shard uint64, row int32, ok bool) {
	for i := 0; i < n; i++ {
		e := b[pageHead+i*entrySize:]
		if binary.LittleEndian.Uint64(e) == key {
			return uint64(binary.LittleEndian.Uint32(e[8:])), int32(binary.LittleEndian.Uint32(e[12:])), true
		}
	}
	return 0, 0, false
}

// Insert records that keys[i] is row i of shard seq. An existing key is replaced only by a
// higher shard sequence: a key is in two shards only when a damaged row was re-added, and the
// newer shard holds the good row, so replaying shards in any order gives the same table.
// Entries are durable after the next Commit.
func (t *Table) Insert(seq uint64, keys []uint64) error {
	if seq > 1<<32-1 {
		return fmt.Errorf("hashindex: shard sequence %d does not fit", seq)
	}
	es := make([]Entry, len(keys))
	for i, k := range keys {
		es[i] = Entry{Key: k, Shard: uint32(seq), Row: uint32(i)}
	}
	return t.InsertEntries(es)
}

// InsertEntries is Insert for entries of any shards; es is reordered.
func (t *Table) InsertEntries(es []Entry) error {
	if len(es) == 0 {
		return nil
	}
	// Sorting by key groups entries by bucket (the key's top bits), so each page is read and
	// written once per call however many of es fall in it.
	slices.SortFunc(es, func(a, b Entry) int {
		if a.Key != b.Key {
			if a.Key < b.Key {
				return -1
			}
			return 1
		}
		return int(int64(a.Shard) - int64(b.Shard))
	})
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errClosed
	}
	for _, e := range es {
		t.h.MaxSeq = max(t.h.MaxSeq, uint64(e.Shard))
	}
	for {
		full, err := t.apply(es, upsert)
		if err != nil {
			return err
		}
		if !full {
			return nil
		}
		// Upserts are idempotent, so after doubling the whole batch is simply applied again.
		if err := t.grow(); err != nil {
			return err
		}
	}
}

// Delete removes keys; absent ones are ignored. Durable after the next Commit.
func (t *Table) Delete(keys []uint64) error {
	es := make([]Entry, len(keys))
	for i, k := range keys {
		es[i].Key = k
	}
	slices.SortFunc(es, func(a, b Entry) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errClosed
	}
	_, err := t.apply(es, remove)
	return err
}

// upsert and remove edit one page with one entry; upsert reports false when the page is full.
func upsert(p *page, e Entry) (delta int, ok bool) {
	for i := 0; i < p.n; i++ {
		if p.es[i].Key == e.Key {
			if e.Shard >= p.es[i].Shard {
				p.es[i] = e
			}
			return 0, true
		}
	}
	if p.n == Slots {
		return 0, false
	}
	p.es[p.n] = e
	p.n++
	return 1, true
}

func remove(p *page, e Entry) (int, bool) {
	for i := 0; i < p.n; i++ {
		if p.es[i].Key == e.Key {
			p.n--
			p.es[i] = p.es[p.n]
			return -1, true
		}
	}
	return 0, true
}

// apply edits the pages of es (sorted by key) one bucket at a time; t.mu must be held. It stops
// and reports full when a bucket has no room; pages already written stay written.
func (t *Table) apply(es []Entry, edit func(*page, Entry) (int, bool)) (full bool, err error) {
	buf := make([]byte, PageSize)
	var p page
	for s := 0; s < len(es); {
		b := bucketOf(es[s].Key, t.h.Bits)
		e := s + 1
		for e < len(es) && bucketOf(es[e].Key, t.h.Bits) == b {
			e++
		}
		if err := t.readPage(b, buf, &p); errors.Is(err, ErrCorrupt) {
			// A damaged page loses its entries (lookups of them become misses, which the cache
			// re-embeds on demand) instead of failing every write to its bucket. The table
			// stays marked damaged, so the next Open checks every page and rebuilds it from
			// the shards, which restores them.
			t.damaged = true
			p.n = 0
		} else if err != nil {
			return false, err
		}
		delta := 0
		for _, x := range es[s:e] {
			d, ok := edit(&p, x)
			if !ok {
				return true, nil
			}
			delta += d
		}
		encodePage(buf, &p)
		if _, err := t.f.WriteAt(buf, pageOffset(b)); err != nil {
			return false, fmt.Errorf("hashindex: %w", err)
		}
		t.entries += int64(delta)
		s = e
	}
	return false, nil
}

// grow doubles the bucket count; t.mu must be held. The new table is complete and synced
// before it replaces the old one, so its header can carry the old watermark unchanged.
func (t *Table) grow() error {
	if t.h.Bits >= MaxBits {
		return fmt.Errorf("hashindex: table cannot grow past 2^%d buckets", MaxBits)
	}
	nb := t.h.Bits + 1
	old := uint64(1) << t.h.Bits
	in, out := make([]byte, PageSize), make([]byte, PageSize)
	var p, lo, hi page
	err := writeFresh(t.path, header{Bits: nb, Watermark: t.h.Watermark, MaxSeq: t.h.MaxSeq, Entries: uint64(t.entries)}, func(f *os.File) error {
		for b := uint64(0); b < old; b++ {
			if err := t.readPage(b, in, &p); err != nil {
				t.damaged = true
				return err
			}
			lo.n, hi.n = 0, 0
			for _, e := range p.es[:p.n] {
				if bucketOf(e.Key, nb)&1 == 0 {
					lo.es[lo.n] = e
					lo.n++
				} else {
					hi.es[hi.n] = e
					hi.n++
				}
			}
			for i, q := range []*page{&lo, &hi} {
				if q.n == 0 {
					continue // left sparse: an all-zero page is an empty bucket
				}
				encodePage(out, q)
				if _, err := f.WriteAt(out, pageOffset(2*b+uint64(i))); err != nil {
					return fmt.Errorf("hashindex: %w", err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(t.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("hashindex: reopen after doubling: %w", err)
	}
	_ = t.f.Close()
	t.f = f
	t.h.Bits = nb
	t.h.Clean = false
	return t.writeHeader()
}

// Commit makes every insert and delete so far durable, then records watermark (if higher
// than the current one) in the header: data before header, each fsynced.
func (t *Table) Commit(watermark uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errClosed
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("hashindex: %w", err)
	}
	t.h.Watermark = max(t.h.Watermark, watermark)
	return t.writeHeader()
}

// Scan calls fn for every entry, page by page, holding the read lock; fn must not call back
// into the table.
func (t *Table) Scan(fn func(Entry) error) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return errClosed
	}
	return t.scan(func(p *page) error {
		for _, e := range p.es[:p.n] {
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	})
}

// scan reads every page in file order, in chunks so the whole table is never in memory.
func (t *Table) scan(fn func(*page) error) error {
	const chunk = 64
	buf := make([]byte, chunk*PageSize)
	var p page
	n := uint64(1) << t.h.Bits
	for b := uint64(0); b < n; b += chunk {
		m := min(chunk, n-b)
		if _, err := t.f.ReadAt(buf[:m*PageSize], pageOffset(b)); err != nil {
			return fmt.Errorf("hashindex: %w", err)
		}
		for i := uint64(0); i < m; i++ {
			if err := decodePage(buf[i*PageSize:(i+1)*PageSize], &p); err != nil {
				return fmt.Errorf("page %d: %w", b+i, err)
			}
			if err := fn(&p); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close syncs the table and marks it clean, or, when a read met a damaged page, marks it for
// a full replay by the next Open.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	err := t.f.Sync()
	if err == nil {
		if t.damaged {
			// Entries of a damaged page were dropped: watermark 0 makes the next Open replay
			// every shard's keys, which puts them back (inserts are idempotent, the newer
			// shard wins), and unclean makes it check every page first.
			t.h.Watermark, t.h.Clean = 0, false
		} else {
			t.h.Clean = true
		}
		if err = t.writeHeader(); err == nil && t.damaged {
			err = t.f.Sync()
		}
	}
	return errors.Join(err, t.f.Close())
}

// MarkDamaged records that the table failed a check its caller made (a Scan that met a bad
// page): Close then leaves it for a full check and replay, as after a damaged Lookup.
func (t *Table) MarkDamaged() {
	t.mu.Lock()
	t.damaged = true
	t.mu.Unlock()
}

// Abandon closes the file without syncing or marking it clean: what a crash leaves, for tests
// and for a table about to be rebuilt.
func (t *Table) Abandon() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	return t.f.Close()
}
