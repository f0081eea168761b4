// Package uspto reads USPTO full-text patent files (grants and applications, as published in
// the weekly bulk files) as a connectors.Source: a .xml file of concatenated documents, or the
// .zip archive it is published in. Parsing lives in the patentxml subpackage.
//
// Documents come out in file order (zip members in name order), which the runner relies on:
// it resumes by skipping the first N inputs.
package uspto

import (
	"archive/zip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/textpolicy"
	"github.com/reignpipe/reignpipe/connectors/uspto/patentxml"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/schemas"
)

// Source is the Document.Source of every document.
const Source = "uspto"

// Section names for Options.Sections.
const (
	SectionTitle       = "title"
	SectionAbstract    = "abstract"
	SectionClaims      = "claims"
	SectionDescription = "description"
)

// DefaultSections is the text layout when Options.Sections is empty.
var DefaultSections = []string{SectionTitle, SectionAbstract, SectionClaims, SectionDescription}

// Options configures Open.
type Options struct {
	// Path is a .xml file of concatenated documents or a .zip archive holding such files.
	Path string
	// Sections picks and orders the parts of Document.Text; empty = DefaultSections.
	Sections []string
	// MaxDocBytes bounds one document; 0 = DefaultMaxDocBytes. Longer ones are bad inputs.
	MaxDocBytes int64
}

func (o *Options) validate() error {
	if o.Path == "" {
		return errors.New("uspto: Path is required")
	}
	if o.MaxDocBytes < 0 {
		return fmt.Errorf("uspto: MaxDocBytes %d must not be negative", o.MaxDocBytes)
	}
	return ValidateSections(o.Sections)
}

// ValidateSections checks a section list: known names, no repeats, not empty.
func ValidateSections(sections []string) error {
	if sections == nil {
		return nil
	}
	if len(sections) == 0 {
		return errors.New("uspto: Sections is empty (leave it nil for the default)")
	}
	seen := map[string]bool{}
	for _, s := range sections {
		if !slices.Contains(DefaultSections, s) {
			return fmt.Errorf("uspto: unknown section %q (want some of %v)", s, DefaultSections)
		}
		if seen[s] {
			return fmt.Errorf("uspto: section %q given twice", s)
		}
		seen[s] = true
	}
	return nil
}

// Text joins the chosen sections with blank lines; lines within a section are joined by "\n".
// Empty sections (design grants have no abstract) are left out rather than leaving a gap.
func Text(p patentxml.Patent, sections []string) string {
	if sections == nil {
		sections = DefaultSections
	}
	var parts []string
	for _, s := range sections {
		var t string
		switch s {
		case SectionTitle:
			t = p.Title
		case SectionAbstract:
			t = strings.Join(p.Abstract, "\n")
		case SectionClaims:
			t = strings.Join(p.Claims, "\n")
		case SectionDescription:
			t = strings.Join(p.Description, "\n")
		}
		if t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, "\n\n")
}

// Reader is a connectors.Source over one file.
type Reader struct {
	opts     Options
	base     string
	f        objstore.File
	members  []*zip.File // nil for a plain .xml file
	nextMem  int
	cur      io.ReadCloser
	curName  string
	curSize  int64
	sp       *Splitter
	done     int64 // bytes of the members finished
	total    int64
	plainXML bool

	tally     connectors.Tally
	mu        sync.Mutex // guards bytesRead and closed
	bytesRead int64
	closed    bool
}

var _ connectors.Source = (*Reader)(nil)

// Open opens the file. A zip archive (detected from its content) is read member by member:
// every member whose name ends in .xml, in name order, each streamed. BytesTotal is then the
// members' uncompressed size, so that progress is measured in the same bytes as BytesRead.
func Open(opts Options) (*Reader, error) { return OpenIn(context.Background(), nil, opts) }

// OpenIn is Open for a path that may be an s3:// object, reached through st (nil: local only);
// ctx bounds the requests made while it is read, until Close. A zip object is read by ranged
// GETs (its directory, then each member), plain XML streamed: neither is copied to disk.
func OpenIn(ctx context.Context, st *objstore.Store, opts Options) (*Reader, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if st == nil {
		st = objstore.Local
	}
	f, err := st.Open(ctx, opts.Path)
	if err != nil {
		return nil, fmt.Errorf("uspto: %w", err)
	}
	r := &Reader{opts: opts, base: objstore.Base(opts.Path), f: f}
	magic := make([]byte, 4)
	n, _ := f.ReadAt(magic, 0)
	if n == 4 && string(magic) == "PK\x03\x04" {
		zr, err := zip.NewReader(f, f.Size())
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("uspto: %s: %w", r.base, err)
		}
		for _, m := range zr.File {
			if strings.HasSuffix(strings.ToLower(m.Name), ".xml") && !m.FileInfo().IsDir() {
				r.members = append(r.members, m)
				r.total += int64(m.UncompressedSize64)
			}
		}
		slices.SortFunc(r.members, func(a, b *zip.File) int { return strings.Compare(a.Name, b.Name) })
	} else {
		r.plainXML, r.total = true, f.Size()
	}
	return r, nil
}

func noAck(context.Context, error) error { return nil }

// openNext starts the next input; false when there is none.
func (r *Reader) openNext() (bool, error) {
	if r.plainXML {
		if r.nextMem > 0 {
			return false, nil
		}
		r.nextMem++
		r.cur, r.curName, r.curSize = io.NopCloser(r.f), r.base, r.total
	} else {
		if r.nextMem >= len(r.members) {
			return false, nil
		}
		m := r.members[r.nextMem]
		r.nextMem++
		rc, err := m.Open()
		if err != nil {
			return false, fmt.Errorf("uspto: %s:%s: %w", r.base, m.Name, err)
		}
		r.cur, r.curName, r.curSize = rc, r.base+":"+m.Name, int64(m.UncompressedSize64)
	}
	r.sp = NewSplitter(r.cur, r.opts.MaxDocBytes)
	return true, nil
}

func (r *Reader) finishMember() {
	r.cur.Close()
	r.done += r.curSize
	r.cur, r.sp = nil, nil
}

// Read returns the next patent. Sequence listings and other non-patent documents are skipped
// and counted; documents that cannot be parsed come back as *connectors.BadInputError.
func (r *Reader) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	for {
		if err := ctx.Err(); err != nil {
			return schemas.Document{}, nil, err
		}
		if r.isClosed() {
			return schemas.Document{}, nil, errors.New("uspto: reader closed")
		}
		if r.sp == nil {
			ok, err := r.openNext()
			if err != nil {
				return schemas.Document{}, nil, err
			}
			if !ok {
				return schemas.Document{}, nil, io.EOF
			}
		}
		data, off, err := r.sp.Next()
		r.mu.Lock()
		r.bytesRead = r.done + r.sp.Offset()
		r.mu.Unlock()
		if err == io.EOF {
			r.finishMember()
			continue
		}
		pos := r.curName + " offset " + strconv.FormatInt(off, 10)
		var tooLarge *TooLargeError
		if errors.As(err, &tooLarge) {
			p, _ := patentxml.ParseDocument(tooLarge.Head)
			return schemas.Document{}, noAck, &connectors.BadInputError{DocID: docID(p), Position: pos, Reason: err}
		}
		if err != nil {
			return schemas.Document{}, nil, fmt.Errorf("uspto: %s: %w", pos, err)
		}
		counts := textpolicy.Counts{}
		doc, skip, err := DecodeXMLCounted(data, r.opts.Sections, counts)
		warnNoTitle := counts[textpolicy.NoTitle] > 0
		r.tally.Text(counts)
		if skip != "" {
			r.skip(skip)
			continue
		}
		if err != nil {
			return schemas.Document{}, noAck, &connectors.BadInputError{DocID: doc.ID, Position: pos, Reason: err}
		}
		doc.Meta["file"], doc.Meta["offset"] = r.curName, strconv.FormatInt(off, 10)
		if warnNoTitle {
			slog.Warn("uspto: patent has no readable title; read under its id", "doc", doc.ID, "position", pos)
		}
		r.tally.Read()
		return doc, noAck, nil
	}
}

// DecodeXML turns one patent XML document (any of the supported DTDs) into a Document with the
// given sections as its text. Non-patent documents (sequence listings...) and patents without
// text come back with a skip reason instead; a document that does not parse comes back with an
// error and, when it was readable, its id. Used by the file reader and for feeds that arrive as
// one XML document per Kafka message.
func DecodeXML(data []byte, sections []string) (doc schemas.Document, skip string, err error) {
	return DecodeXMLCounted(data, sections, nil)
}

// DecodeXMLCounted is DecodeXML that adds to c what the text policy changed: the raw
// document is cleaned before it is parsed (a NUL inside <invention-title> would otherwise cut
// the title), and a patent left without a readable title is counted as no_title.
func DecodeXMLCounted(data []byte, sections []string, c textpolicy.Counts) (doc schemas.Document, skip string, err error) {
	data = textpolicy.CleanBytes(data, c)
	p, err := patentxml.ParseDocument(data)
	var notPatent *patentxml.NotPatentError
	if errors.As(err, &notPatent) {
		return doc, notPatent.Reason(), nil
	}
	if err != nil {
		return schemas.Document{ID: docID(p)}, "", err
	}
	text := Text(p, sections)
	if textpolicy.IsBlank(text) {
		return doc, "empty", nil
	}
	if strings.TrimSpace(p.Title) == "" && c != nil {
		c[textpolicy.NoTitle]++
	}
	return schemas.Document{
		ID:      docID(p),
		Source:  Source,
		Version: Version(p),
		Title:   p.Title,
		Text:    text,
		Meta: map[string]string{
			"kind": p.Kind, "country": p.Country, "doc_number": p.DocNumber,
			"publication_date": p.PublicationDate, "application_number": p.ApplicationNumber,
			"filing_date": p.FilingDate, "cpc": strings.Join(p.CPC, "; "),
			"ipc": strings.Join(p.IPC, "; "), "dtd_version": p.DTDVersion,
			"doc_type": p.DocType,
		},
	}, "", nil
}

func docID(p patentxml.Patent) string {
	if p.DocID == "" {
		return ""
	}
	return Source + ":" + p.DocID
}

// Version is the publication date followed by the kind code, e.g. "20070925B2". A corrected
// republication of the same document number (A9 for a corrected application, B9 for a
// corrected grant) carries a later publication date, or the same date and a later kind, so the
// newer text sorts last as a string.
func Version(p patentxml.Patent) string { return p.PublicationDate + p.Kind }

func (r *Reader) skip(reason string) {
	r.tally.Skip(reason)
}

func (r *Reader) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Stats may be called from any goroutine.
func (r *Reader) Stats() connectors.SourceStats {
	r.mu.Lock()
	read := r.bytesRead
	r.mu.Unlock()
	return r.tally.Stats(read, r.total)
}

// Close releases the file. Read must not be running concurrently.
func (r *Reader) Close(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	if r.cur != nil && !r.plainXML {
		r.cur.Close()
	}
	return r.f.Close()
}
