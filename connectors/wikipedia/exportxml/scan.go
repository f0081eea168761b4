// Package exportxml reads the XML of a MediaWiki export: a Scanner that hands out the <page>
// and <siteinfo> elements of a dump (or of one multistream piece) with bounded memory, the
// parser of one <page>, the XML entity decoding the export uses, and what the <siteinfo> head
// declares (dbname, namespace names). It knows nothing of compression, streams or documents:
// package wikipedia decompresses, cuts and converts around it.
package exportxml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/reignpipe/reignpipe/connectors/textpolicy"
)

// The export schema is regular: <siteinfo> and <page> elements sit directly under <mediawiki>,
// and page text has every '<' escaped. So the Scanner looks only for those two elements'
// start tags and their literal end tags, and parses each element on its own. A malformed page
// cannot hide the next one, and a multistream piece (which holds whole pages but no root
// element) scans like a whole file. encoding/xml is several times slower for this.

// The kinds of element Scanner.Next returns.
const (
	ElemPage = iota + 1
	ElemSiteinfo
	ElemBadPage // a <page> cut short by the next <page> start tag
	// ElemLargePage is a <page> longer than the Scanner's page bound, skipped without being
	// held: the bytes returned are its first HeadBytes (enough for its title and id) and
	// skippedBytes its length.
	ElemLargePage
)

// HeadBytes of a page too large to hold are kept to name it.
const HeadBytes = 64 << 10

// maxElement bounds one element's size: the largest real pages are a few MiB, and a missing
// </page> must not make the Scanner buffer the rest of a 100 GB dump.
const maxElement = 256 << 20

var (
	pageEnd     = []byte("</page>")
	siteinfoEnd = []byte("</siteinfo>")
	pageStart   = []byte("<page>")
)

// Scanner yields <page> and <siteinfo> elements from UTF-8 XML.
type Scanner struct {
	r          io.Reader
	buf        []byte
	start, end int // unread bytes are buf[start:end]
	eof        bool
	readErr    error
	// maxPage bounds a <page> held whole; a longer one is skipped (ElemLargePage).
	maxPage      int
	head         []byte
	skippedBytes int64
}

// NewScanner scans r; maxPage <= 0 holds pages up to maxElement.
func NewScanner(r io.Reader, maxPage int) *Scanner {
	if maxPage <= 0 || maxPage > maxElement {
		maxPage = maxElement
	}
	return &Scanner{r: r, buf: make([]byte, 1<<20), maxPage: maxPage}
}

// fill reads more input, compacting or growing the buffer; it reports false at end of input.
func (s *Scanner) fill() bool {
	if s.eof {
		return false
	}
	if s.start > 0 {
		n := copy(s.buf, s.buf[s.start:s.end])
		s.start, s.end = 0, n
	}
	if s.end == len(s.buf) {
		s.buf = append(s.buf, make([]byte, len(s.buf))...)
	}
	for {
		n, err := s.r.Read(s.buf[s.end:])
		s.end += n
		if err != nil {
			s.eof = true
			if err != io.EOF {
				s.readErr = err
			}
			return n > 0
		}
		if n > 0 {
			return true
		}
	}
}

// Next returns the next element's kind and bytes (valid until the next call), io.EOF at the
// end, or an error for input that cannot be read or resynchronised.
func (s *Scanner) Next() (int, []byte, error) {
	for {
		i := bytes.IndexByte(s.buf[s.start:s.end], '<')
		if i < 0 {
			s.start = s.end
			if !s.fill() {
				return 0, nil, s.endErr()
			}
			continue
		}
		p := s.start + i
		// The longest start tag looked at is "<siteinfo>".
		for s.end-p < 10 && !s.eof {
			s.start = p
			s.fill()
			p = s.start
		}
		head := s.buf[p:s.end]
		var kind int
		var endTag []byte
		switch {
		case isStartTag(head, "page"):
			kind, endTag = ElemPage, pageEnd
		case isStartTag(head, "siteinfo"):
			kind, endTag = ElemSiteinfo, siteinfoEnd
		default:
			s.start = p + 1
			continue
		}
		s.start = p
		searched := 1
		for {
			j := bytes.Index(s.buf[s.start+searched:s.end], endTag)
			if j >= 0 {
				elemEnd := s.start + searched + j + len(endTag)
				elem := s.buf[s.start:elemEnd]
				if kind == ElemPage {
					// A page start tag inside means the page lost its end: report what came
					// before and resume at the inner page.
					if k := bytes.Index(elem[1:], pageStart); k >= 0 {
						elem = elem[:k+1]
						s.start += k + 1
						return ElemBadPage, elem, nil
					}
				}
				if kind == ElemPage && len(elem) > s.maxPage {
					// Already read whole (it fit the buffer): refused all the same.
					s.head = append(s.head[:0], elem[:min(HeadBytes, len(elem))]...)
					s.skippedBytes = int64(len(elem))
					s.start = elemEnd
					return ElemLargePage, s.head, nil
				}
				s.start = elemEnd
				return kind, elem, nil
			}
			searched = max(1, s.end-s.start-len(endTag))
			if kind == ElemPage && s.end-s.start > s.maxPage {
				return s.skipPage()
			}
			if s.end-s.start > maxElement {
				return 0, nil, fmt.Errorf("element at input byte offset ~%d exceeds %d MiB without its end tag", s.start, maxElement>>20)
			}
			if !s.fill() {
				if err := s.endErr(); err != io.EOF {
					return 0, nil, err
				}
				return 0, nil, fmt.Errorf("input ends inside a <%s> element (truncated file?)", bytes.TrimLeft(endTag, "</"))
			}
		}
	}
}

// skipPage reads past a <page> that started at s.start and is already longer than maxPage,
// keeping only its head and a few bytes to find a tag split across reads. It ends at the page's
// end tag or at the next page's start tag (a page that lost its end), so memory stays at the
// buffer's size whatever the page's length.
func (s *Scanner) skipPage() (int, []byte, error) {
	// A short page that lost its end tag, with the next page already read, is a bad page,
	// as the unbounded path reports it, not a large one.
	if k := bytes.Index(s.buf[s.start+1:s.end], pageStart); k >= 0 && k+1 <= s.maxPage {
		elem := s.buf[s.start : s.start+1+k]
		s.start += 1 + k
		return ElemBadPage, elem, nil
	}
	s.head = append(s.head[:0], s.buf[s.start:s.start+min(HeadBytes, s.end-s.start)]...)
	s.skippedBytes = 0
	keep := len(pageStart) // a tag cut by the end of the buffer is found on the next pass
	from := s.start + 1
	for {
		window := s.buf[from:s.end]
		endAt, nextAt := bytes.Index(window, pageEnd), bytes.Index(window, pageStart)
		switch {
		case endAt >= 0 && (nextAt < 0 || endAt < nextAt):
			return s.skipped(from + endAt + len(pageEnd))
		case nextAt >= 0:
			return s.skipped(from + nextAt)
		}
		if s.end-from > keep {
			s.skippedBytes += int64(s.end - keep - s.start)
			s.start = s.end - keep
		}
		if !s.fill() {
			if err := s.endErr(); err != io.EOF {
				return 0, nil, err
			}
			return 0, nil, errors.New("input ends inside a <page> element (truncated file?)")
		}
		from = s.start
	}
}

// skipped ends a skip at stop, the head cut to the page's own bytes.
func (s *Scanner) skipped(stop int) (int, []byte, error) {
	s.skippedBytes += int64(stop - s.start)
	s.start = stop
	if int64(len(s.head)) > s.skippedBytes {
		s.head = s.head[:s.skippedBytes]
	}
	return ElemLargePage, s.head, nil
}

// PageHead finds the title and page id in the head of a page too large to parse whole (the
// page's own <id> comes before its revision's).
func PageHead(b []byte) (title, id string) {
	own := b
	if r := bytes.Index(b, []byte("<revision")); r >= 0 {
		own = b[:r]
	}
	return xmlField(b, "title"), xmlField(own, "id")
}

func xmlField(b []byte, name string) string {
	open, end := []byte("<"+name+">"), []byte("</"+name+">")
	i := bytes.Index(b, open)
	if i < 0 {
		return ""
	}
	j := bytes.Index(b[i+len(open):], end)
	if j < 0 {
		return ""
	}
	return string(b[i+len(open) : i+len(open)+j])
}

// Pending returns the bytes read but not yet handed out.
func (s *Scanner) Pending() []byte { return s.buf[s.start:s.end] }

// Skipped is the length of the last ElemLargePage: the bytes skipped without being held.
func (s *Scanner) Skipped() int64 { return s.skippedBytes }

// MaxPage is the bound on a <page> held whole.
func (s *Scanner) MaxPage() int { return s.maxPage }

func (s *Scanner) endErr() error {
	if s.readErr != nil {
		return s.readErr
	}
	return io.EOF
}

func isStartTag(b []byte, name string) bool {
	if len(b) < len(name)+2 || b[0] != '<' || string(b[1:1+len(name)]) != name {
		return false
	}
	c := b[1+len(name)]
	return c == '>' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// Page holds the fields of a <page> as found; empty strings are absent fields.
type Page struct {
	Title, NS, ID, RevID, Timestamp, Text string
	Redirect, HasRevision, HasText        bool
}

// ParsePage reads one <page> element. It tracks the element path so that <id> of <page>, of
// <revision> and of <contributor> are told apart.
func ParsePage(b []byte) (Page, error) {
	var p Page
	var stack []string
	var contentStart int
	for pos := 0; pos < len(b); {
		i := bytes.IndexByte(b[pos:], '<')
		if i < 0 {
			break
		}
		lt := pos + i
		rest := b[lt:]
		switch {
		case bytes.HasPrefix(rest, []byte("<!--")):
			j := bytes.Index(rest, []byte("-->"))
			if j < 0 {
				return p, errors.New("unterminated comment")
			}
			pos = lt + j + 3
			continue
		case bytes.HasPrefix(rest, []byte("<![CDATA[")):
			j := bytes.Index(rest, []byte("]]>"))
			if j < 0 {
				return p, errors.New("unterminated CDATA section")
			}
			pos = lt + j + 3
			continue
		case bytes.HasPrefix(rest, []byte("<?")):
			j := bytes.Index(rest, []byte("?>"))
			if j < 0 {
				return p, errors.New("unterminated processing instruction")
			}
			pos = lt + j + 2
			continue
		}
		name, attrs, closing, self, n, err := parseTag(rest)
		if err != nil {
			return p, err
		}
		pos = lt + n
		if closing {
			if len(stack) == 0 || stack[len(stack)-1] != name {
				return p, fmt.Errorf("unexpected </%s>", name)
			}
			if err := p.set(stack, b[contentStart:lt]); err != nil {
				return p, err
			}
			stack = stack[:len(stack)-1]
			continue
		}
		stack = append(stack, name)
		p.start(stack, attrs)
		if self {
			stack = stack[:len(stack)-1]
		}
		contentStart = pos
	}
	if len(stack) != 0 {
		return p, fmt.Errorf("unclosed <%s>", stack[len(stack)-1])
	}
	return p, nil
}

func pathIs(stack []string, path ...string) bool {
	if len(stack) != len(path) {
		return false
	}
	for i := range path {
		if stack[i] != path[i] {
			return false
		}
	}
	return true
}

func (p *Page) start(stack []string, attrs []byte) {
	switch {
	case pathIs(stack, "page", "redirect"):
		p.Redirect = true
	case pathIs(stack, "page", "revision"):
		p.HasRevision = true
	case pathIs(stack, "page", "revision", "text"):
		// <text deleted="deleted"/> has no content; HasText stays false for it.
		p.HasText = !bytes.Contains(attrs, []byte("deleted="))
	}
}

// set stores the content of the element that just closed. Leaf elements of the schema hold
// no markup, so raw is their whole escaped text.
func (p *Page) set(stack []string, raw []byte) error {
	var dst *string
	switch {
	case pathIs(stack, "page", "title"):
		p.Title = strings.TrimSpace(unescapeRaw(raw)) // the text policy is applied, and counted, by convert
		return nil
	case pathIs(stack, "page", "ns"):
		dst = &p.NS
	case pathIs(stack, "page", "id"):
		dst = &p.ID
	case pathIs(stack, "page", "revision", "id"):
		dst = &p.RevID
	case pathIs(stack, "page", "revision", "timestamp"):
		dst = &p.Timestamp
	case pathIs(stack, "page", "revision", "text"):
		p.Text = unescapeRaw(raw)
		return nil
	default:
		return nil
	}
	*dst = strings.TrimSpace(Unescape(raw))
	return nil
}

// parseTag parses a start or end tag at b[0] == '<'.
func parseTag(b []byte) (name string, attrs []byte, closing, self bool, n int, err error) {
	i := 1
	if i < len(b) && b[i] == '/' {
		closing = true
		i++
	}
	start := i
	for i < len(b) && !isSpace(b[i]) && b[i] != '>' && b[i] != '/' {
		i++
	}
	if i == start {
		return "", nil, false, false, 0, errors.New("malformed tag")
	}
	name = string(b[start:i])
	attrStart := i
	var quote byte
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '<':
			return "", nil, false, false, 0, fmt.Errorf("malformed tag <%s", name)
		case c == '>':
			self = b[i-1] == '/'
			return name, b[attrStart:i], closing, self && !closing, i + 1, nil
		}
	}
	return "", nil, false, false, 0, fmt.Errorf("unterminated tag <%s", name)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Unescape is unescapeRaw with the text policy applied (uncounted), for fields other than the
// title and text.
func Unescape(b []byte) string { return textpolicy.Clean(unescapeRaw(b), nil) }

// unescapeRaw decodes the XML entities the export uses (&lt; &gt; &amp; &quot; &apos; and
// numeric references) and CDATA sections. Unknown entities are kept as written. Invalid UTF-8
// and control bytes are left for the text policy, which counts what it repairs.
func unescapeRaw(b []byte) string {
	if bytes.IndexByte(b, '&') < 0 && bytes.IndexByte(b, '<') < 0 {
		return string(b)
	}
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		i := bytes.IndexAny(b, "&<")
		if i < 0 {
			out = append(out, b...)
			break
		}
		out = append(out, b[:i]...)
		b = b[i:]
		if b[0] == '<' {
			if bytes.HasPrefix(b, []byte("<![CDATA[")) {
				if j := bytes.Index(b, []byte("]]>")); j >= 0 {
					out = append(out, b[9:j]...)
					b = b[j+3:]
					continue
				}
			}
			out = append(out, '<')
			b = b[1:]
			continue
		}
		semi := bytes.IndexByte(b[:min(len(b), 12)], ';')
		if semi < 0 {
			out = append(out, '&')
			b = b[1:]
			continue
		}
		if r, ok := entity(b[1:semi]); ok {
			out = utf8.AppendRune(out, r)
			b = b[semi+1:]
			continue
		}
		out = append(out, '&')
		b = b[1:]
	}
	return string(out)
}

func entity(name []byte) (rune, bool) {
	switch string(name) {
	case "lt":
		return '<', true
	case "gt":
		return '>', true
	case "amp":
		return '&', true
	case "quot":
		return '"', true
	case "apos":
		return '\'', true
	}
	if len(name) < 2 || name[0] != '#' {
		return 0, false
	}
	base, digits := 10, name[1:]
	if digits[0] == 'x' || digits[0] == 'X' {
		base, digits = 16, digits[1:]
	}
	v, err := strconv.ParseUint(string(digits), base, 32)
	if err != nil {
		return 0, false
	}
	if !utf8.ValidRune(rune(v)) || v == 0 {
		return utf8.RuneError, true
	}
	return rune(v), true
}

// DBName extracts <dbname> from a <siteinfo> element.
func DBName(b []byte) string {
	i := bytes.Index(b, []byte("<dbname>"))
	if i < 0 {
		return ""
	}
	rest := b[i+len("<dbname>"):]
	j := bytes.Index(rest, []byte("</dbname>"))
	if j < 0 {
		return ""
	}
	return strings.TrimSpace(Unescape(rest[:j]))
}
