package wikipedia

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

// segment is a byte range of the dump that decompresses on its own: one bz2 stream (or, for
// the last one, the final page stream and the closing stream) of a multistream dump, or the
// whole file otherwise.
type segment struct {
	off, end int64
	first    bool    // holds the start of the document (BOM, <siteinfo>)
	missing  []int64 // index offsets of streams past the end of a truncated file
}

// indexPath finds the index beside a multistream dump: "x-multistream.xml.bz2" has
// "x-multistream-index.txt.bz2" (or an uncompressed .txt).
func indexPath(dump string) string {
	base, ok := strings.CutSuffix(dump, ".xml.bz2")
	if !ok {
		return ""
	}
	for _, cand := range []string{base + "-index.txt.bz2", base + "-index.txt"} {
		if st, err := os.Stat(cand); err == nil && st.Mode().IsRegular() {
			return cand
		}
	}
	return ""
}

// readIndex reads the distinct stream offsets of a multistream index file.
func readIndex(path string) ([]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
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
	offs, err := parseIndex(r)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", path, err)
	}
	return offs, nil
}

// parseIndex reads "offset:pageid:title" lines and returns the distinct offsets, sorted.
// Titles may hold colons, so only the first two fields are split off. Offsets past the end of
// the dump are kept: they are the streams a truncated download lost, and their pages are
// reported lost rather than silently missing.
func parseIndex(r io.Reader) ([]int64, error) {
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

// indexEntry is one page the index places in a stream.
type indexEntry struct{ id, title string }

// lookupIndex reads the index again for the pages of the streams at offs. The reader keeps
// only offsets in memory (a full index's titles run to gigabytes), so the pages of a lost
// stream are looked up when it is lost, once per loss.
func lookupIndex(path string, offs []int64) (map[int64][]indexEntry, error) {
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
	got := map[int64][]indexEntry{}
	br := bufio.NewReaderSize(r, 1<<16)
	for {
		b, err := br.ReadSlice('\n')
		if err != nil && err != io.EOF {
			return got, fmt.Errorf("index %s: %w", path, err)
		}
		if b = bytes.TrimRight(b, "\r\n"); len(b) > 0 {
			if off, id, title, perr := splitIndexLine(b); perr == nil && want[off] {
				got[off] = append(got[off], indexEntry{id, title})
			}
		}
		if err == io.EOF {
			return got, nil
		}
	}
}

// segmentsFor splits a dump of size bytes at the index offsets. The bytes before the first
// offset are the stream holding <mediawiki> and <siteinfo>. Offsets at or past size make one
// last segment of streams the file lacks.
func segmentsFor(offs []int64, size int64) []segment {
	segs := make([]segment, 0, len(offs)+2)
	if offs[0] > 0 {
		segs = append(segs, segment{off: 0, end: offs[0]})
	}
	for i, o := range offs {
		if o >= size {
			segs = append(segs, segment{off: size, end: size, missing: offs[i:]})
			break
		}
		end := size
		if i+1 < len(offs) {
			end = min(offs[i+1], size)
		}
		segs = append(segs, segment{off: o, end: end})
	}
	segs[0].first = true
	return segs
}

// checkStreamStart tells a mismatched index early: its offsets must start bz2 streams.
func checkStreamStart(f io.ReaderAt, off int64) error {
	var magic [3]byte
	if _, err := f.ReadAt(magic[:], off); err != nil || string(magic[:]) != "BZh" {
		return fmt.Errorf("offset %d does not start a bz2 stream (index of another dump?)", off)
	}
	return nil
}
