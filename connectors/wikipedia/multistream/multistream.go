// Package multistream reads the offset index of a Wikimedia multistream bz2 dump and finds
// bz2 stream boundaries in the dump itself, for reading it in parallel and for resuming after
// a damaged stream.
package multistream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/dsnet/compress/bzip2"
)

// IndexPath finds the index beside a multistream dump: "x-multistream.xml.bz2" has
// "x-multistream-index.txt.bz2" (or an uncompressed .txt).
func IndexPath(dump string) string {
	return IndexPathWith(dump, func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && st.Mode().IsRegular()
	})
}

// IndexPathWith is IndexPath with exists telling whether a candidate is there (an object in a
// bucket).
func IndexPathWith(dump string, exists func(string) bool) string {
	base, ok := strings.CutSuffix(dump, ".xml.bz2")
	if !ok {
		return ""
	}
	for _, cand := range []string{base + "-index.txt.bz2", base + "-index.txt"} {
		if exists(cand) {
			return cand
		}
	}
	return ""
}

// ReadIndex reads the distinct stream offsets of a multistream index file.
func ReadIndex(path string) ([]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadIndexFrom(path, f)
}

// ReadIndexFrom is ReadIndex of an index read from f (an object in a bucket); path names it
// in errors.
func ReadIndexFrom(path string, f io.Reader) ([]int64, error) {
	var r io.Reader = bufio.NewReaderSize(f, 1<<16)
	magic, _ := r.(*bufio.Reader).Peek(3)
	if string(magic) == "BZh" {
		bz, err := bzip2.NewReader(r, nil)
		if err != nil {
			return nil, fmt.Errorf("index %s: %w", path, err)
		}
		defer bz.Close()
		r = bz
	}
	offs, err := ParseIndex(r)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", path, err)
	}
	return offs, nil
}

// ParseIndex reads "offset:pageid:title" lines and returns the distinct offsets, sorted.
// Titles may hold colons, so only the first two fields are split off. Offsets past the end of
// the dump are kept: they are the streams a truncated download lost, and their pages are
// reported lost rather than silently missing.
func ParseIndex(r io.Reader) ([]int64, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var offs []int64
	sorted := true
	for line := 1; ; line++ {
		b, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return nil, fmt.Errorf("line %d: longer than %d bytes", line, br.Size())
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		b = bytes.TrimRight(b, "\r\n")
		if len(b) > 0 {
			off, perr := parseIndexLine(b)
			if perr != nil {
				return nil, fmt.Errorf("line %d: %w", line, perr)
			}
			if n := len(offs); n == 0 || offs[n-1] != off {
				if n > 0 && off < offs[n-1] {
					sorted = false
				}
				offs = append(offs, off)
			}
		}
		if err == io.EOF {
			break
		}
	}
	if len(offs) == 0 {
		return nil, errors.New("no entries")
	}
	if !sorted {
		slices.Sort(offs)
		offs = slices.Compact(offs)
	}
	return offs, nil
}

func parseIndexLine(b []byte) (int64, error) {
	off, _, _, err := splitIndexLine(b)
	return off, err
}

func splitIndexLine(b []byte) (off int64, id, title string, err error) {
	offS, rest, ok := bytes.Cut(b, []byte(":"))
	if !ok {
		return 0, "", "", errors.New("want offset:pageid:title")
	}
	idS, titleB, ok := bytes.Cut(rest, []byte(":"))
	if !ok {
		return 0, "", "", errors.New("want offset:pageid:title")
	}
	off, err = strconv.ParseInt(string(offS), 10, 64)
	if err != nil || off < 0 {
		return 0, "", "", fmt.Errorf("bad offset %q", offS)
	}
	if _, err := strconv.ParseUint(string(idS), 10, 64); err != nil {
		return 0, "", "", fmt.Errorf("bad page id %q", idS)
	}
	return off, string(idS), string(titleB), nil
}

// Entry is one page the index places in a stream.
type Entry struct{ ID, Title string }

// Lookup reads the index again for the pages of the streams at offs. The reader keeps
// only offsets in memory (a full index's titles run to gigabytes), so the pages of a lost
// stream are looked up when it is lost, once per loss.
func Lookup(path string, offs []int64) (map[int64][]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = bufio.NewReaderSize(f, 1<<16)
	if magic, _ := r.(*bufio.Reader).Peek(3); string(magic) == "BZh" {
		bz, err := bzip2.NewReader(r, nil)
		if err != nil {
			return nil, fmt.Errorf("index %s: %w", path, err)
		}
		defer bz.Close()
		r = bz
	}
	want := make(map[int64]bool, len(offs))
	for _, o := range offs {
		want[o] = true
	}
	got := map[int64][]Entry{}
	br := bufio.NewReaderSize(r, 1<<16)
	for {
		b, err := br.ReadSlice('\n')
		if err != nil && err != io.EOF {
			return got, fmt.Errorf("index %s: %w", path, err)
		}
		if b = bytes.TrimRight(b, "\r\n"); len(b) > 0 {
			if off, id, title, perr := splitIndexLine(b); perr == nil && want[off] {
				got[off] = append(got[off], Entry{ID: id, Title: title})
			}
		}
		if err == io.EOF {
			return got, nil
		}
	}
}

// CheckStreamStart tells a mismatched index early: its offsets must start bz2 streams.
func CheckStreamStart(f io.ReaderAt, off int64) error {
	var magic [3]byte
	if _, err := f.ReadAt(magic[:], off); err != nil || string(magic[:]) != "BZh" {
		return fmt.Errorf("offset %d does not start a bz2 stream (index of another dump?)", off)
	}
	return nil
}

// streamHeader is a bz2 stream's start: "BZh", the block size digit, then the magic of its
// first block (0x314159265359) or, for an empty stream, of its end (0x177245385090).
var (
	BlockMagic = []byte{0x31, 0x41, 0x59, 0x26, 0x53, 0x59}
	EOSMagic   = []byte{0x17, 0x72, 0x45, 0x38, 0x50, 0x90}
)

const HeaderLen = 10

func IsStreamHeader(b []byte) bool {
	return len(b) >= HeaderLen && string(b[:3]) == "BZh" && b[3] >= '1' && b[3] <= '9' &&
		(bytes.Equal(b[4:10], BlockMagic) || bytes.Equal(b[4:10], EOSMagic))
}

// NextStreamHeader finds the first stream header at or after from and before end.
func NextStreamHeader(f io.ReaderAt, from, end int64) (int64, bool, error) {
	buf := make([]byte, 1<<20)
	for off := from; off < end; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
		if err != nil && err != io.EOF {
			return 0, false, err
		}
		if n == 0 {
			break
		}
		w := buf[:n]
		for i := 0; ; {
			j := bytes.Index(w[i:], []byte("BZh"))
			if j < 0 {
				break
			}
			p := i + j
			if p+HeaderLen > len(w) {
				if off+int64(n) < end {
					break // read again from p so the header is whole
				}
				return 0, false, nil
			}
			if IsStreamHeader(w[p:]) {
				return off + int64(p), true, nil
			}
			i = p + 1
		}
		if n < HeaderLen || off+int64(n) >= end {
			break
		}
		off += int64(n - HeaderLen + 1)
	}
	return 0, false, nil
}

// PrevStreamHeader finds the last stream header at or after from and before at, searching
// backwards, so that a loss can name where its stream began.
func PrevStreamHeader(f io.ReaderAt, from, at int64) int64 {
	const win = 1 << 20
	for hi := at; hi > from; {
		lo := max(from, hi-win)
		buf := make([]byte, min(hi+HeaderLen, at+HeaderLen)-lo)
		n, _ := f.ReadAt(buf, lo)
		buf = buf[:n]
		for i := min(int64(len(buf)), hi-lo+HeaderLen) - 1; i >= 0; i-- {
			if lo+i < at && IsStreamHeader(buf[i:]) {
				return lo + i
			}
		}
		hi = lo
	}
	return from
}
