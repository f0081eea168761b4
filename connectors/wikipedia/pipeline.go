package wikipedia

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	stdunicode "unicode"

	"github.com/dsnet/compress/bzip2"
	"github.com/klauspost/compress/gzip"
	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/transform"

	"github.com/reignpipe/reignpipe/connectors/textpolicy"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/exportxml"
	"github.com/reignpipe/reignpipe/schemas"
)

type compression int

const (
	compNone compression = iota
	compBzip2
	compGzip
)

type textEncoding int

const (
	encUTF8 textEncoding = iota
	encUTF16LE
	encUTF16BE
)

// sniffEncoding looks at the first decompressed bytes: a BOM, or "<" as UTF-16 without one.
func sniffEncoding(b []byte) (enc textEncoding, bom int) {
	switch {
	case len(b) >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF:
		return encUTF8, 3
	case len(b) >= 2 && b[0] == 0xFF && b[1] == 0xFE:
		return encUTF16LE, 2
	case len(b) >= 2 && b[0] == 0xFE && b[1] == 0xFF:
		return encUTF16BE, 2
	case len(b) >= 2 && b[0] == '<' && b[1] == 0:
		return encUTF16LE, 0
	case len(b) >= 2 && b[0] == 0 && b[1] == '<':
		return encUTF16BE, 0
	}
	return encUTF8, 0
}

func sniffCompression(b []byte) compression {
	switch {
	case len(b) >= 3 && string(b[:3]) == "BZh":
		return compBzip2
	case len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b:
		return compGzip
	}
	return compNone
}

// countingReader counts bytes read from the file, for BytesRead.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// decompress wraps r per the file's compression.
func decompress(r io.Reader, comp compression) (io.Reader, func(), error) {
	switch comp {
	case compBzip2:
		bz, err := bzip2.NewReader(r, nil)
		if err != nil {
			return nil, nil, err
		}
		return bz, func() { bz.Close() }, nil
	case compGzip:
		gz, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		return gz, func() { gz.Close() }, nil
	}
	return r, func() {}, nil
}

// decode skips the BOM (first segment only) and transcodes UTF-16 to UTF-8.
func decode(r io.Reader, enc textEncoding, bom int) (io.Reader, error) {
	if bom > 0 {
		if _, err := io.CopyN(io.Discard, r, int64(bom)); err != nil {
			return nil, fmt.Errorf("reading byte order mark: %w", err)
		}
	}
	switch enc {
	case encUTF16LE:
		return transform.NewReader(r, unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM).NewDecoder()), nil
	case encUTF16BE:
		return transform.NewReader(r, unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM).NewDecoder()), nil
	}
	return r, nil
}

// item is one scanned element, in file order. Documents leave the worker without ID and
// Source: the Source may come from <siteinfo>, which only Read sees in order.
type item struct {
	ordinal int64 // page number within the segment, from 1
	site    string
	isSite  bool
	doc     schemas.Document
	pageID  string
	title   string
	bad     error
	lost    bool // bad: the page's bz2 stream is damaged or missing
}

type batch struct {
	items   []item
	pages   int64
	skipped map[string]int64
	text    textpolicy.Counts
	err     error
}

// segRun is one segment's result stream, handed to Read in file order.
type segRun struct {
	seg  segment
	read atomic.Int64 // compressed bytes consumed so far
	ch   chan batch
}

const (
	batchItems = 64
	batchBytes = 8 << 20
)

// process decompresses, scans and converts one segment, sending batches on run.ch. It owns
// and waits for the read-ahead goroutine it may start.
func (r *Reader) process(ctx context.Context, run *segRun) {
	send := func(b batch) bool {
		select {
		case run.ch <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if err := r.scanSegment(ctx, run, send); err != nil && ctx.Err() == nil {
		send(batch{err: fmt.Errorf("wikipedia: %s bytes %d-%d: %w", r.base, run.seg.off, run.seg.end, err)})
	}
}

func (r *Reader) scanSegment(ctx context.Context, run *segRun, send func(batch) bool) error {
	s := &segScan{r: r, run: run, send: send, cur: newBatch(), seen: map[string]bool{}}
	if run.seg.missing != nil {
		return s.loseMissing(ctx)
	}
	f, err := r.opts.Store.Open(ctx, r.opts.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	switch {
	case r.multistream:
		return s.stream(ctx, f)
	case r.comp == compBzip2:
		return s.resyncing(ctx, f)
	}
	var src io.Reader = countingReader{io.NewSectionReader(f, run.seg.off, run.seg.end-run.seg.off), &run.read}
	dec, closeDec, err := decompress(src, r.comp)
	if err != nil {
		return err
	}
	defer closeDec()
	if r.comp != compNone {
		ra := newReadahead(ctx, dec)
		defer ra.stop()
		dec = ra
	}
	text, err := decode(dec, r.enc, r.bom)
	if err != nil {
		return err
	}
	if _, err := s.scan(ctx, text); err != nil {
		// Hand out what came before the failure, then the failure.
		if ferr := s.flush(ctx); ferr != nil {
			return ferr
		}
		return err
	}
	return s.flush(ctx)
}

func newBatch() batch { return batch{skipped: map[string]int64{}, text: textpolicy.Counts{}} }

// segScan is one segment's scan state: the batch being filled, page ordinals, and (for
// multistream) the ids of the pages met, so that a lost stream reports only the others.
type segScan struct {
	r                 *Reader
	run               *segRun
	send              func(batch) bool
	cur               batch
	size              int
	ordinal           int64
	seen              map[string]bool
	lastTitle, lastID string // the last page met, for errors
}

func (s *segScan) flush(ctx context.Context) error {
	if len(s.cur.items) > 0 || s.cur.pages > 0 {
		if !s.send(s.cur) {
			return ctx.Err()
		}
	}
	s.cur, s.size = newBatch(), 0
	return nil
}

func (s *segScan) add(it item) error {
	s.cur.items = append(s.cur.items, it)
	s.size += len(it.doc.Text)
	if len(s.cur.items) >= batchItems || s.size >= batchBytes {
		return s.flush(s.r.ctx)
	}
	return nil
}

// scan hands out the elements of text. On an error it returns the bytes the scanner held
// unread (the start of the page it could not finish), for the error to name that page.
func (s *segScan) scan(ctx context.Context, text io.Reader) ([]byte, error) {
	sc := exportxml.NewScanner(text, s.r.opts.MaxPageBytes)
	for {
		kind, elem, err := sc.Next()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return sc.Pending(), err
		}
		switch kind {
		case exportxml.ElemSiteinfo:
			err = s.add(item{isSite: true, site: exportxml.DBName(elem)})
		case exportxml.ElemBadPage:
			s.ordinal++
			s.cur.pages++
			err = s.add(item{ordinal: s.ordinal, bad: errors.New("<page> not closed before the next <page>")})
		case exportxml.ElemLargePage:
			s.ordinal++
			s.cur.pages++
			title, id := exportxml.PageHead(elem)
			if id != "" {
				s.seen[id] = true // not lost: refused
				s.lastTitle, s.lastID = title, id
			}
			err = s.add(item{ordinal: s.ordinal, title: title, pageID: id,
				bad: fmt.Errorf("page of %d bytes is over the bound of %d (twice source.max_doc_bytes); skipped without being held", sc.Skipped(), sc.MaxPage())})
		case exportxml.ElemPage:
			s.ordinal++
			s.cur.pages++
			it, skip := s.r.convert(elem, s.cur.text)
			if it.pageID != "" {
				s.seen[it.pageID] = true
				s.lastTitle, s.lastID = it.title, it.pageID
			}
			if skip != "" {
				s.cur.skipped[skip]++
				continue
			}
			it.ordinal = s.ordinal
			err = s.add(it)
		}
		if err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// convert turns a page element into an item, or names the reason it is skipped. The text
// policy is applied to the title and text, and what it changed is added to counts.
func (r *Reader) convert(elem []byte, counts textpolicy.Counts) (item, string) {
	p, err := exportxml.ParsePage(elem)
	p.Title = strings.TrimSpace(textpolicy.Clean(p.Title, counts))
	it := item{pageID: p.ID, title: p.Title}
	if err != nil {
		it.bad = err
		return it, ""
	}
	ns, nsErr := strconv.Atoi(p.NS)
	switch {
	case p.Title == "":
		it.bad = errors.New("page has no <title>")
	case p.ID == "" || !isDigits(p.ID):
		it.bad, it.pageID = fmt.Errorf("page has no numeric <id> (%q)", p.ID), ""
	case nsErr != nil:
		it.bad = fmt.Errorf("page has no numeric <ns> (%q)", p.NS)
	}
	if it.bad != nil {
		return it, ""
	}
	if !r.namespaces[ns] {
		return it, "namespace"
	}
	if p.Redirect || isRedirectText(p.Text) {
		return it, "redirect"
	}
	switch {
	case !p.HasRevision:
		it.bad = errors.New("page has no <revision>")
	case p.RevID == "" || !isDigits(p.RevID):
		it.bad = fmt.Errorf("revision has no numeric <id> (%q)", p.RevID)
	case !p.HasText:
		it.bad = errors.New("revision has no <text> (deleted?)")
	}
	if it.bad != nil {
		return it, ""
	}
	p.Text = textpolicy.Clean(p.Text, counts)
	if textpolicy.IsBlank(p.Text) {
		return it, "empty"
	}
	text := r.names.Plain(p.Text)
	if !hasWord(text) {
		// Only markup (templates, categories, files) was there: nothing to embed.
		return it, "markup_only"
	}
	it.doc = schemas.Document{
		Version: p.RevID,
		Title:   p.Title,
		Text:    text,
		Meta:    map[string]string{"ns": p.NS, "timestamp": p.Timestamp, "revision_id": p.RevID},
	}
	return it, ""
}

// hasWord reports whether s holds a letter or a digit: text made only of punctuation, spaces
// and invisible characters is what cleaning leaves of markup, not content.
func hasWord(s string) bool {
	for _, c := range s {
		if stdunicode.IsLetter(c) || stdunicode.IsDigit(c) {
			return true
		}
	}
	return false
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// isRedirectText catches redirects in dumps that predate the <redirect> element.
func isRedirectText(t string) bool {
	t = strings.TrimLeft(t, " \t\n")
	return len(t) >= 9 && strings.EqualFold(t[:9], "#REDIRECT")
}

// readahead decompresses into a few chunks ahead of the scanner, on its own goroutine.
type readahead struct {
	full   chan []byte
	free   chan []byte
	cur    []byte
	held   []byte
	err    error // set before full is closed
	cancel context.CancelFunc
	done   chan struct{}
}

func newReadahead(ctx context.Context, src io.Reader) *readahead {
	ctx, cancel := context.WithCancel(ctx)
	ra := &readahead{full: make(chan []byte, 4), free: make(chan []byte, 4), cancel: cancel, done: make(chan struct{})}
	for range 4 {
		ra.free <- make([]byte, 1<<20)
	}
	go func() {
		defer close(ra.done)
		defer close(ra.full)
		for {
			var buf []byte
			select {
			case buf = <-ra.free:
			case <-ctx.Done():
				ra.err = ctx.Err()
				return
			}
			buf = buf[:cap(buf)]
			n := 0
			var err error
			for n < len(buf) && err == nil {
				var m int
				m, err = src.Read(buf[n:])
				n += m
			}
			if n > 0 {
				select {
				case ra.full <- buf[:n]:
				case <-ctx.Done():
					ra.err = ctx.Err()
					return
				}
			}
			if err != nil {
				ra.err = err
				return
			}
		}
	}()
	return ra
}

func (ra *readahead) Read(p []byte) (int, error) {
	for len(ra.cur) == 0 {
		if ra.held != nil {
			ra.free <- ra.held
			ra.held = nil
		}
		b, ok := <-ra.full
		if !ok {
			return 0, ra.err
		}
		ra.cur, ra.held = b, b
	}
	n := copy(p, ra.cur)
	ra.cur = ra.cur[n:]
	return n, nil
}

// stop ends the goroutine and waits for it.
func (ra *readahead) stop() {
	ra.cancel()
	<-ra.done
}
