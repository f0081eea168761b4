package wikipedia

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/dsnet/compress/bzip2"

	"github.com/reignpipe/reignpipe/connectors/wikipedia/exportxml"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/multistream"
	"github.com/reignpipe/reignpipe/internal/objstore"
)

// A damaged bz2 stream costs only its own pages. A stream is decompressed whole before it is
// scanned, so a stream whose checksum fails hands out none of its text (bz2 checks a block's
// CRC only after its bytes came out, and those bytes may be garbage); a stream cut short by the
// end of the file hands out the pages of its complete blocks. With the index, its
// pages are dead-lettered by id and title. Without one, the stream's end is found by looking
// for the next stream header, and the loss is one dead letter naming the byte range and the
// pages it could identify; a file of one huge stream is read as it decompresses, and after a
// failure the reader resumes at the next stream header past the point of failure.

// maxStreamBuffer bounds the decompressed stream held before scanning. Wikimedia's streams
// hold 100 pages (a few MiB); a larger one is scanned as it decompresses, and damage late in
// it loses only the pages not yet handed out.
const maxStreamBuffer = 64 << 20

// wholeStreamSearch is how far past a stream's start the reader without an index looks for
// the next stream header. A multistream dump's streams are a few hundred KiB; a file of one
// huge stream has none there and is read as it decompresses.
var wholeStreamSearch int64 = 16 << 20 // a variable for tests of the other path

// stream scans one multistream segment.
func (s *segScan) stream(ctx context.Context, f objstore.File) error {
	return s.whole(ctx, f, s.run.seg.off, s.run.seg.end, s.run.seg.first)
}

// whole decompresses the stream(s) in [off, end) before scanning them.
func (s *segScan) whole(ctx context.Context, f objstore.File, off, end int64, first bool) error {
	if err := multistream.CheckStreamStart(f, off); err != nil {
		return s.lose(ctx, off, end, err, nil)
	}
	src := countingReader{io.NewSectionReader(f, off, end-off), &s.run.read}
	bz, err := bzip2.NewReader(src, nil)
	if err != nil {
		return err
	}
	defer bz.Close()
	bom := 0
	if first {
		bom = s.r.bom
	}
	text, err := decode(bz, s.r.enc, bom)
	if err != nil {
		return s.lose(ctx, off, end, err, nil)
	}
	head, err := readStream(text, end-off)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		// Cut short, not garbled: bz2 decodes a block only once all of it arrived and checks
		// its CRC before starting the next, so by the time it meets the cut every block it
		// handed out has passed. Keep those pages.
		partial, serr := s.scan(ctx, bytes.NewReader(head))
		if serr == nil {
			partial = nil
		} else if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.lose(ctx, off, end, err, partial)
	}
	if err != nil {
		// head may hold the garbled block: not to be trusted even to name a page.
		return s.lose(ctx, off, end, err, nil)
	}
	var in io.Reader = bytes.NewReader(head)
	if len(head) == maxStreamBuffer {
		in = io.MultiReader(in, text)
	}
	if partial, err := s.scan(ctx, in); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.lose(ctx, off, end, err, partial)
	}
	return s.flush(ctx)
}

// readStream decompresses up to maxStreamBuffer bytes, sized from the compressed length
// (Wikipedia text compresses about 4-5x) so that the buffer is rarely grown and copied.
func readStream(r io.Reader, compressed int64) ([]byte, error) {
	buf := make([]byte, 0, min(maxStreamBuffer, max(64<<10, 6*compressed)))
	for len(buf) < maxStreamBuffer {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), maxStreamBuffer)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// lose hands out what the segment yielded so far, then a dead letter for each page the index
// puts in the stream at [off, end) that was not met. Without an index, or for a stream the
// index names no page of (the one holding <siteinfo>), the loss is one dead letter for the
// byte range; partial is what was decompressed of it, to name the pages it held.
func (s *segScan) lose(ctx context.Context, off, end int64, cause error, partial []byte) error {
	if err := s.flush(ctx); err != nil {
		return err
	}
	var lost []multistream.Entry
	var lerr error
	if s.r.index != "" {
		var byIdx map[int64][]multistream.Entry
		byIdx, lerr = multistream.Lookup(s.r.index, []int64{off})
		for _, e := range byIdx[off] {
			if !s.seen[e.ID] {
				lost = append(lost, e)
			}
		}
	}
	s.run.read.Store(end - s.run.seg.off)
	truncated := end == s.r.size && errors.Is(cause, io.ErrUnexpectedEOF)
	err := lossError(s.r.base, off, end, lost, partial, truncated, cause)
	switch {
	case lerr != nil:
		err = fmt.Errorf("%w (and its pages could not be listed: %v)", err, lerr)
	case s.r.index == "" && s.lastID != "":
		err = fmt.Errorf("%w; the last page read before it was %q (id %s)", err, s.lastTitle, s.lastID)
	}
	return s.loseAll(ctx, lost, partial, err)
}

// loseMissing reports the pages of the streams a truncated file lacks.
func (s *segScan) loseMissing(ctx context.Context) error {
	offs := s.run.seg.missing
	byIdx, lerr := multistream.Lookup(s.r.index, offs)
	if lerr != nil {
		return lerr
	}
	for _, off := range offs {
		lost := byIdx[off]
		cause := fmt.Errorf("the file ends at byte %d, before this stream", s.r.size)
		if err := s.loseAll(ctx, lost, nil, lossError(s.r.base, off, -1, lost, nil, true, cause)); err != nil {
			return err
		}
	}
	return s.flush(ctx)
}

func (s *segScan) loseAll(ctx context.Context, lost []multistream.Entry, partial []byte, err error) error {
	if len(lost) == 0 {
		id, title := identify(partial)
		lost = []multistream.Entry{{ID: id, Title: title}}
	}
	for _, e := range lost {
		s.ordinal++
		s.cur.pages++
		if aerr := s.add(item{ordinal: s.ordinal, pageID: e.ID, title: e.Title, bad: err, lost: true}); aerr != nil {
			return aerr
		}
	}
	return s.flush(ctx)
}

// lossError names the lost stream's byte range (end < 0: past the end of the file), its
// first and last page as far as known, and whether the file was cut short.
func lossError(base string, off, end int64, lost []multistream.Entry, partial []byte, truncated bool, cause error) error {
	var b strings.Builder
	if end < 0 {
		fmt.Fprintf(&b, "bz2 stream at byte %d of %s", off, base)
	} else {
		fmt.Fprintf(&b, "bz2 stream at bytes %d-%d of %s", off, end, base)
	}
	switch {
	case len(lost) > 0:
		fmt.Fprintf(&b, " (pages %s %q to %s %q, %d lost)", lost[0].ID, lost[0].Title, lost[len(lost)-1].ID, lost[len(lost)-1].Title, len(lost))
	default:
		id, title := identify(partial)
		lastID, lastTitle := identifyLast(partial)
		switch {
		case id == "" && title == "":
			b.WriteString(" (no page identified)")
		case lastID != id:
			fmt.Fprintf(&b, " (pages %s %q to at least %s %q)", id, title, lastID, lastTitle)
		default:
			fmt.Fprintf(&b, " (from page %s %q on; later pages unknown)", id, title)
		}
	}
	switch {
	case end < 0:
		b.WriteString(" is missing: the file is truncated")
	case truncated:
		b.WriteString(" is truncated: the file ends inside it")
	default:
		b.WriteString(" is damaged")
	}
	return fmt.Errorf("%s: %w", b.String(), cause)
}

// pageStart is the start tag exportxml.Scanner looks for.
var pageStart = []byte("<page>")

// identify finds the title and page id at the start of a partly read <page>.
func identify(partial []byte) (id, title string) {
	p := bytes.Index(partial, pageStart)
	if p < 0 {
		return "", ""
	}
	partial = partial[p:]
	field := func(name string) string {
		i := bytes.Index(partial, []byte("<"+name+">"))
		if i < 0 {
			return ""
		}
		rest := partial[i+len(name)+2:]
		j := bytes.Index(rest, []byte("</"+name+">"))
		if j < 0 || j > 1024 {
			return ""
		}
		return strings.TrimSpace(exportxml.Unescape(rest[:j]))
	}
	id = field("id")
	if !isDigits(id) {
		id = ""
	}
	return id, field("title")
}

// identifyLast finds the title and page id of the last page begun in partial.
func identifyLast(partial []byte) (id, title string) {
	p := bytes.LastIndex(partial, pageStart)
	if p < 0 {
		return "", ""
	}
	return identify(partial[p:])
}

// streamErr marks an error of the decompressor, as opposed to one of the XML scanner.
type streamErr struct{ err error }

func (e *streamErr) Error() string { return e.err.Error() }
func (e *streamErr) Unwrap() error { return e.err }

type markErrors struct{ r io.Reader }

func (m markErrors) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	if err != nil && err != io.EOF {
		err = &streamErr{err}
	}
	return n, err
}

// resyncing reads a bz2 dump without an index front to back, one stream at a time where it
// can find where each ends.
func (s *segScan) resyncing(ctx context.Context, f objstore.File) error {
	seg := s.run.seg
	for start := seg.off; start < seg.end; {
		first := start == seg.off && seg.first
		limit := min(seg.end, start+wholeStreamSearch)
		next, found, err := multistream.NextStreamHeader(f, start+1, limit)
		switch {
		case err != nil:
			return err
		case found:
		case limit == seg.end:
			next = seg.end // the last stream
		default:
			// No stream ends within reach: read the rest as it decompresses.
			if next, found, err = s.streamFrom(ctx, f, start, first); err != nil || !found {
				return err
			}
			start = next
			continue
		}
		if err := s.whole(ctx, f, start, next, first); err != nil {
			return err
		}
		start = next
	}
	return nil
}

// streamFrom reads from start to the end as it decompresses. When decompression fails, the
// pages handed out so far stand, the loss is one dead letter, and it returns the next stream
// header past the point of failure (none in a file of one stream: the rest is lost).
func (s *segScan) streamFrom(ctx context.Context, f objstore.File, start int64, first bool) (int64, bool, error) {
	seg := s.run.seg
	// The bz2 reader takes a bufio.Reader as it is, so its InputOffset is exact: the next
	// stream cannot start before it.
	br := bufio.NewReaderSize(countingReader{io.NewSectionReader(f, start, seg.end-start), &s.run.read}, 1<<16)
	bz, err := bzip2.NewReader(br, nil)
	if err != nil {
		return 0, false, err
	}
	ra := newReadahead(ctx, markErrors{bz})
	bom := 0
	if first {
		bom = s.r.bom
	}
	var partial []byte
	text, err := decode(ra, s.r.enc, bom)
	if err == nil {
		partial, err = s.scan(ctx, text)
	}
	ra.stop()
	failAt := start + bz.InputOffset
	bz.Close()
	var se *streamErr
	switch {
	case err == nil:
		return 0, false, s.flush(ctx)
	case ctx.Err() != nil:
		return 0, false, ctx.Err()
	case !errors.As(err, &se):
		if ferr := s.flush(ctx); ferr != nil {
			return 0, false, ferr
		}
		return 0, false, err
	}
	next, found, serr := multistream.NextStreamHeader(f, max(failAt, start+1), seg.end)
	if serr != nil {
		return 0, false, serr
	}
	end := seg.end
	if found {
		end = next
	}
	from := multistream.PrevStreamHeader(f, start, failAt)
	if !errors.Is(se.err, io.ErrUnexpectedEOF) {
		partial = nil // what the scanner held may come from the garbled block
	}
	if err := s.lose(ctx, from, end, se.err, partial); err != nil {
		return 0, false, err
	}
	return next, found, nil
}
