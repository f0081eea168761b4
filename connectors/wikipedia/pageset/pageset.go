// Package pageset keeps a set of wiki pages -- page id and revision id -- in a file sorted by
// page id, built and compared in bounded memory whatever its size: a Builder takes pages in
// any order and spills sorted runs of at most its budget, merged when it finishes; Diff and
// Union stream sets in id order. The wikipedia source keeps the articles of its last complete
// read of a dump this way (enwiki: about 7 million, 16 bytes each on disk), to delete
// downstream what a newer dump no longer has.
//
// A file is the magic "rpwpset1", a 4-byte big-endian label length, the label (the wiki's
// source name, so a set is never compared with another wiki's), then one 16-byte record per
// page: page id and revision id, big-endian, page ids strictly ascending. Every file is written
// through atomicfile, so a reader sees a whole set or the one before it.
package pageset

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
)

// Page is one member of a set. Rev 0 means the revision is not known (a page the read could
// not parse, kept so that a failure is never taken for an absence).
type Page struct{ ID, Rev uint64 }

const (
	magic     = "rpwpset1"
	recordLen = 16
	maxLabel  = 1 << 10
)

// Write writes the pages that next yields (ascending, unique ids) as the set file at path with
// label, atomically, and returns how many there were.
func Write(path, label string, next func() (Page, bool, error)) (int64, error) {
	var n int64
	err := atomicfile.WriteFunc(path, func(w io.Writer) error {
		if err := writeHeader(w, label); err != nil {
			return err
		}
		var rec [recordLen]byte
		var last uint64
		for {
			p, ok, err := next()
			if err != nil || !ok {
				return err
			}
			if n > 0 && p.ID <= last {
				return fmt.Errorf("pageset: page %d after %d: not ascending", p.ID, last)
			}
			last = p.ID
			binary.BigEndian.PutUint64(rec[:8], p.ID)
			binary.BigEndian.PutUint64(rec[8:], p.Rev)
			if _, err := w.Write(rec[:]); err != nil {
				return err
			}
			n++
		}
	})
	return n, err
}

func writeHeader(w io.Writer, label string) error {
	if len(label) > maxLabel {
		return fmt.Errorf("pageset: label of %d bytes", len(label))
	}
	var h [len(magic) + 4]byte
	copy(h[:], magic)
	binary.BigEndian.PutUint32(h[len(magic):], uint32(len(label)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := io.WriteString(w, label)
	return err
}

// Reader streams a set file in page id order.
type Reader struct {
	f     *os.File // nil for a set read from memory
	br    *bufio.Reader
	path  string
	label string
	n     int64 // records read
	last  uint64
}

// Open opens the set file at path; a missing file is an error satisfying
// errors.Is(err, fs.ErrNotExist).
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	r, err := newReader(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.f = f
	return r, nil
}

// newReader reads a set of size bytes from src, named path in errors.
func newReader(src io.Reader, size int64, path string) (*Reader, error) {
	r := &Reader{br: bufio.NewReaderSize(src, 1<<16), path: path}
	if err := r.header(size); err != nil {
		return nil, fmt.Errorf("pageset: %s is not a page set (%v); remove it to start over", path, err)
	}
	return r, nil
}

func (r *Reader) header(size int64) error {
	var h [len(magic) + 4]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		return err
	}
	if string(h[:len(magic)]) != magic {
		return errors.New("bad magic")
	}
	n := binary.BigEndian.Uint32(h[len(magic):])
	if n > maxLabel {
		return fmt.Errorf("label of %d bytes", n)
	}
	label := make([]byte, n)
	if _, err := io.ReadFull(r.br, label); err != nil {
		return err
	}
	r.label = string(label)
	if body := size - int64(len(h)) - int64(n); body%recordLen != 0 {
		return fmt.Errorf("%d bytes of records, not a multiple of %d", body, recordLen)
	}
	return nil
}

// Label is the label the set was written with.
func (r *Reader) Label() string { return r.label }

// Next returns the next page; ok is false at the end.
func (r *Reader) Next() (p Page, ok bool, err error) {
	var rec [recordLen]byte
	if _, err := io.ReadFull(r.br, rec[:]); err == io.EOF {
		return Page{}, false, nil
	} else if err != nil {
		return Page{}, false, fmt.Errorf("pageset: reading %s: %w", r.path, err)
	}
	p = Page{ID: binary.BigEndian.Uint64(rec[:8]), Rev: binary.BigEndian.Uint64(rec[8:])}
	if r.n > 0 && p.ID <= r.last {
		return Page{}, false, fmt.Errorf("pageset: %s is corrupt: page %d after %d; remove it to start over", r.path, p.ID, r.last)
	}
	r.n++
	r.last = p.ID
	return p, true, nil
}

// Close releases the file.
func (r *Reader) Close() error {
	if r.f == nil {
		return nil
	}
	return r.f.Close()
}

// source is a stream of pages in ascending id order.
type source interface {
	Next() (Page, bool, error)
}

// merged yields the union of sources in id order, an id in several once, with the highest
// revision any of them has.
type merged struct {
	h   mergeHeap
	err error
}

type head struct {
	p   Page
	src source
}

type mergeHeap []head

func (h mergeHeap) Len() int           { return len(h) }
func (h mergeHeap) Less(i, j int) bool { return h[i].p.ID < h[j].p.ID }
func (h mergeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)        { *h = append(*h, x.(head)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func merge(srcs ...source) (*merged, error) {
	m := &merged{}
	for _, s := range srcs {
		p, ok, err := s.Next()
		if err != nil {
			return nil, err
		}
		if ok {
			m.h = append(m.h, head{p, s})
		}
	}
	heap.Init(&m.h)
	return m, nil
}

func (m *merged) Next() (Page, bool, error) {
	if len(m.h) == 0 {
		return Page{}, false, nil
	}
	out := m.h[0].p
	for len(m.h) > 0 && m.h[0].p.ID == out.ID {
		out.Rev = max(out.Rev, m.h[0].p.Rev)
		p, ok, err := m.h[0].src.Next()
		switch {
		case err != nil:
			return Page{}, false, err
		case ok:
			m.h[0].p = p
			heap.Fix(&m.h, 0)
		default:
			heap.Pop(&m.h)
		}
	}
	return out, true, nil
}

// openAll opens the set files of paths, leaving out those that do not exist.
func openAll(paths []string) ([]*Reader, error) {
	var rs []*Reader
	for _, p := range paths {
		r, err := Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			closeAll(rs)
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

func closeAll(rs []*Reader) {
	for _, r := range rs {
		r.Close()
	}
}

// Union writes the union of the sets at in (those that exist) to out with label: each page
// once, at the highest revision any of them has. out may be one of in.
func Union(out, label string, in ...string) (int64, error) {
	rs, err := openAll(in)
	if err != nil {
		return 0, err
	}
	// The inputs stay open while out is renamed over one of them: the rename replaces the
	// name, not the file being read.
	defer closeAll(rs)
	srcs := make([]source, len(rs))
	for i, r := range rs {
		srcs[i] = r
	}
	m, err := merge(srcs...)
	if err != nil {
		return 0, err
	}
	return Write(out, label, m.Next)
}

// Diff yields the pages of one set that another lacks, in id order.
type Diff struct {
	old, new *Reader
	np       Page
	nok      bool
}

// NewDiff compares the set at old with the one at new.
func NewDiff(old, new string) (*Diff, error) {
	o, err := Open(old)
	if err != nil {
		return nil, err
	}
	n, err := Open(new)
	if err != nil {
		o.Close()
		return nil, err
	}
	d := &Diff{old: o, new: n}
	if d.np, d.nok, err = n.Next(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Next returns the next page of old that new lacks, with old's revision; ok is false at the
// end.
func (d *Diff) Next() (Page, bool, error) {
	for {
		p, ok, err := d.old.Next()
		if err != nil || !ok {
			return Page{}, false, err
		}
		for d.nok && d.np.ID < p.ID {
			if d.np, d.nok, err = d.new.Next(); err != nil {
				return Page{}, false, err
			}
		}
		if !d.nok || d.np.ID != p.ID {
			return p, true, nil
		}
	}
}

// Close releases both files.
func (d *Diff) Close() error { return errors.Join(d.old.Close(), d.new.Close()) }

// Builder collects pages in any order, holding at most max of them in memory: a full buffer
// is sorted and spilled as a run file beside the set it builds, and Finish merges the runs.
type Builder struct {
	path string // the set being built; runs are path.spill-<n>
	max  int
	buf  []Page
	runs []string
}

// NewBuilder builds the set to be written at path, spilling every max pages.
func NewBuilder(path string, max int) *Builder {
	return &Builder{path: path, max: max, buf: make([]Page, 0, min(max, 1<<12))}
}

// Add adds a page; adding an id twice keeps its highest revision.
func (b *Builder) Add(p Page) error {
	b.buf = append(b.buf, p)
	if len(b.buf) >= b.max {
		return b.spill()
	}
	return nil
}

// sorted sorts the buffer and folds repeated ids into one, at their highest revision.
func (b *Builder) sorted() []Page {
	slices.SortFunc(b.buf, func(x, y Page) int { return cmp.Compare(x.ID, y.ID) })
	out := b.buf[:0]
	for _, p := range b.buf {
		if n := len(out); n > 0 && out[n-1].ID == p.ID {
			out[n-1].Rev = max(out[n-1].Rev, p.Rev)
			continue
		}
		out = append(out, p)
	}
	return out
}

func (b *Builder) spill() error {
	run := b.path + ".spill-" + strconv.Itoa(len(b.runs))
	if _, err := Write(run, "", (&slice{pages: b.sorted()}).Next); err != nil {
		return fmt.Errorf("pageset: spilling to %s: %w", run, err)
	}
	b.runs = append(b.runs, run)
	b.buf = b.buf[:0]
	return nil
}

// Finish writes the set with label and removes the runs; it returns how many pages it has.
func (b *Builder) Finish(label string) (int64, error) {
	defer b.Remove()
	rs, err := openAll(b.runs)
	if err != nil {
		return 0, err
	}
	defer closeAll(rs)
	srcs := []source{&slice{pages: b.sorted()}}
	for _, r := range rs {
		srcs = append(srcs, r)
	}
	m, err := merge(srcs...)
	if err != nil {
		return 0, err
	}
	return Write(b.path, label, m.Next)
}

// Remove deletes the runs spilled so far.
func (b *Builder) Remove() {
	for _, r := range b.runs {
		os.Remove(r)
	}
	b.runs, b.buf = nil, b.buf[:0]
}

// RemoveSpills deletes the runs an interrupted build of the set at path left behind.
func RemoveSpills(path string) error {
	entries, err := os.ReadDir(filepath.Dir(path))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	prefix := filepath.Base(path) + ".spill-"
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if err := os.Remove(filepath.Join(filepath.Dir(path), e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// slice is a source over sorted pages in memory.
type slice struct{ pages []Page }

func (s *slice) Next() (Page, bool, error) {
	if len(s.pages) == 0 {
		return Page{}, false, nil
	}
	p := s.pages[0]
	s.pages = s.pages[1:]
	return p, true, nil
}
