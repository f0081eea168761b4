package uspto

import (
	"bytes"
	"fmt"
	"io"
)

// DefaultMaxDocBytes bounds one document; the largest real grant is a few MiB.
const DefaultMaxDocBytes = 64 << 20

const readChunk = 1 << 20

// TooLargeError reports a document longer than the limit; its bytes were skipped.
type TooLargeError struct {
	Offset int64
	Size   int64
	Max    int64
	Head   []byte // the first bytes, to name the document
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("document of %d bytes is over the %d-byte limit", e.Size, e.Max)
}

// Splitter cuts a stream of concatenated XML documents (the weekly "ICE" files) at each XML
// declaration, holding at most one document (plus one read chunk) in memory.
//
// Bytes before the first declaration form a document of their own when they are not blank:
// some published single-document files have no declaration at all.
type Splitter struct {
	r   io.Reader
	max int64
	buf []byte // unconsumed bytes; buf[0] is at stream offset off
	off int64
	eof bool
	err error
}

// NewSplitter reads from r; maxDoc <= 0 means DefaultMaxDocBytes.
func NewSplitter(r io.Reader, maxDoc int64) *Splitter {
	if maxDoc <= 0 {
		maxDoc = DefaultMaxDocBytes
	}
	return &Splitter{r: r, max: maxDoc}
}

// Offset is the stream position reached: the end of the last document returned.
func (s *Splitter) Offset() int64 { return s.off }

// declAt reports whether b starts an XML declaration. "<?xml-stylesheet" and other
// processing instructions whose name merely begins with "xml" do not count.
func declAt(b []byte, i int) bool {
	return len(b)-i >= 6 && string(b[i:i+5]) == "<?xml" && (b[i+5] == ' ' || b[i+5] == '\t' || b[i+5] == '\r' || b[i+5] == '\n')
}

// nextDecl returns the index of the first declaration in b at or after from, or -1; a
// declaration cut off by the end of b is not found until more bytes arrive.
func nextDecl(b []byte, from int) int {
	for from < len(b) {
		k := bytes.Index(b[from:], []byte("<?xml"))
		if k < 0 {
			return -1
		}
		if declAt(b, from+k) {
			return from + k
		}
		from += k + 1
	}
	return -1
}

func (s *Splitter) fill() {
	if s.eof {
		return
	}
	if cap(s.buf)-len(s.buf) < readChunk {
		nb := make([]byte, len(s.buf), max(2*len(s.buf), len(s.buf)+readChunk))
		copy(nb, s.buf)
		s.buf = nb
	}
	n, err := s.r.Read(s.buf[len(s.buf):cap(s.buf)])
	s.buf = s.buf[:len(s.buf)+n]
	if err == io.EOF {
		s.eof = true
	} else if err != nil {
		s.err, s.eof = err, true
	}
}

// Next returns the next document and its byte offset in the stream. The bytes are valid until
// the following call. A document over the limit comes back as a *TooLargeError (the stream
// stays usable); io.EOF ends the stream; other errors come from the reader.
func (s *Splitter) Next() ([]byte, int64, error) {
	for {
		if len(s.buf) == 0 {
			if s.err != nil {
				return nil, s.off, s.err
			}
			if s.eof {
				return nil, s.off, io.EOF
			}
			s.buf = s.buf[:0]
			s.fill()
			continue
		}
		start := s.off
		end, scanned := -1, 1
		var tooLarge *TooLargeError
		for {
			if end = nextDecl(s.buf, scanned); end >= 0 {
				break
			}
			if s.eof {
				end = len(s.buf)
				break
			}
			scanned = max(1, len(s.buf)-5)
			if tooLarge == nil && int64(len(s.buf)) > s.max {
				tooLarge = &TooLargeError{Offset: start, Max: s.max, Head: bytes.Clone(s.buf[:min(len(s.buf), 64<<10)])}
			}
			if tooLarge != nil && len(s.buf) > 6 {
				// keep the tail only: it may hold the start of the next declaration
				drop := len(s.buf) - 6
				tooLarge.Size += int64(drop)
				s.off += int64(drop)
				s.buf = append(s.buf[:0], s.buf[drop:]...)
				scanned = 0
			}
			s.fill()
		}
		doc := s.buf[:end]
		s.buf = s.buf[end:]
		s.off += int64(end)
		if tooLarge != nil {
			tooLarge.Size += int64(end)
			return nil, start, tooLarge
		}
		if int64(len(doc)) > s.max {
			return nil, start, &TooLargeError{Offset: start, Size: int64(len(doc)), Max: s.max, Head: bytes.Clone(doc[:min(len(doc), 64<<10)])}
		}
		if start == 0 && !declAt(doc, 0) && len(bytes.TrimSpace(doc)) == 0 {
			continue // blank preamble before the first declaration
		}
		return doc, start, nil
	}
}
