// Package jsonl reads documents from JSON Lines files, one object per line:
// {"id" or "_id": string or number, "title": string, "text": string, "version": optional}.
// "id" wins when a line has both. This is the BEIR corpus layout, and an easy format to
// produce from anything else; the BEIR loader (pipelines/quality/beir) reads corpus and
// queries lines with ParseLine too, so eval and a run over one file agree on every id.
package jsonl

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/textpolicy"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/schemas"
)

// Options configures Open.
type Options struct {
	// Path is a .jsonl file, optionally .gz or .zst compressed (detected from the content).
	Path string
	// Source prefixes document IDs; "" = the file's base name without extensions.
	Source string
	// KeepEmpty hands out documents whose text is blank (textpolicy.IsBlank) instead of
	// skipping them as "empty": an evaluation corpus is scored whole, and the reference embeds
	// an empty text as the one window [CLS][SEP].
	KeepEmpty bool
	// MaxLineBytes bounds one line (default 256 MiB): a longer one is consumed without being
	// held and handed out as a bad input, so a runaway line (a file without newlines, one
	// enormous document) costs the reader no more than this much memory.
	MaxLineBytes int
}

const defaultMaxLine = 256 << 20

var sourceName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func (o *Options) validate() error {
	if o.Path == "" {
		return errors.New("jsonl: Path is required")
	}
	if o.Source != "" && !sourceName.MatchString(o.Source) {
		return fmt.Errorf("jsonl: Source %q must match %s", o.Source, sourceName)
	}
	return nil
}

// defaultSource strips known extensions: "corpus.jsonl.gz" -> "corpus".
func defaultSource(path string) string {
	name := filepath.Base(path)
	for {
		ext := strings.ToLower(filepath.Ext(name))
		switch ext {
		case ".gz", ".zst", ".zstd", ".jsonl", ".json", ".ndjson", ".jsonlines":
			name = name[:len(name)-len(ext)]
			continue
		}
		break
	}
	// IDs are "source:id", so the source must not hold a colon or odd bytes.
	var b strings.Builder
	for _, c := range name {
		if c < 128 && sourceName.MatchString(string(c)) {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "jsonl"
	}
	return b.String()
}

// Reader is a connectors.Source over one JSONL file.
type Reader struct {
	path, base, source string
	keepEmpty          bool
	f                  objstore.File
	br                 *bufio.Reader
	closeDec           func()
	line               int64
	maxLine            int
	size               int64
	consumed           atomic.Int64

	tally   connectors.Tally
	scratch textpolicy.Counts // this line's counts; Read's goroutine only
	mu      sync.Mutex        // guards closed
	closed  bool
}

var _ connectors.Source = (*Reader)(nil)

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Open opens a local file and detects its compression.
func Open(opts Options) (*Reader, error) { return OpenIn(context.Background(), nil, opts) }

// OpenIn is Open for a path that may be an s3:// object, reached through st (nil: local
// only); ctx bounds the requests made while the object is read, until Close. The object is
// streamed, never copied to disk.
func OpenIn(ctx context.Context, st *objstore.Store, opts Options) (*Reader, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if st == nil {
		st = objstore.Local
	}
	f, err := st.Open(ctx, opts.Path)
	if err != nil {
		return nil, fmt.Errorf("jsonl: %w", err)
	}
	r := &Reader{path: opts.Path, base: objstore.Base(opts.Path), source: opts.Source, keepEmpty: opts.KeepEmpty, f: f,
		size: f.Size(), scratch: textpolicy.Counts{}, closeDec: func() {}, maxLine: opts.MaxLineBytes}
	if r.maxLine <= 0 {
		r.maxLine = defaultMaxLine
	}
	if r.source == "" {
		r.source = defaultSource(opts.Path)
	}
	raw := bufio.NewReaderSize(countingReader{f, &r.consumed}, 1<<16)
	magic, _ := raw.Peek(4)
	var src io.Reader = raw
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		gz, err := gzip.NewReader(raw)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("jsonl: %s: %w", r.base, err)
		}
		src, r.closeDec = gz, func() { gz.Close() }
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(raw, zstd.WithDecoderConcurrency(1))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("jsonl: %s: %w", r.base, err)
		}
		src, r.closeDec = zr, zr.Close
	}
	r.br = bufio.NewReaderSize(src, 1<<20)
	return r, nil
}

func noAck(context.Context, error) error { return nil }

var errTooLong = errors.New("line too long")

// readLine returns the next line without its newline. A line over r.maxLine is consumed and
// reported as errTooLong so that the run can go on with the next one.
func (r *Reader) readLine() ([]byte, error) {
	maxLine := r.maxLine
	var long []byte
	tooLong := false
	for {
		frag, err := r.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if !tooLong {
				if len(long)+len(frag) > maxLine {
					tooLong, long = true, nil
				} else {
					long = append(long, frag...)
				}
			}
			continue
		}
		if tooLong {
			if err != nil && err != io.EOF {
				return nil, err
			}
			return nil, errTooLong
		}
		if long != nil {
			frag = append(long, frag...)
		}
		if len(frag) > maxLine+1 { // +1: the newline
			return nil, errTooLong
		}
		if err == io.EOF && len(frag) > 0 {
			return frag, nil
		}
		if err != nil {
			return nil, err
		}
		return frag[:len(frag)-1], nil
	}
}

// Read returns the next document; bad lines come back as *connectors.BadInputError.
func (r *Reader) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	for {
		if err := ctx.Err(); err != nil {
			return schemas.Document{}, nil, err
		}
		if r.isClosed() {
			return schemas.Document{}, nil, errors.New("jsonl: reader closed")
		}
		line, err := r.readLine()
		if err == io.EOF {
			return schemas.Document{}, nil, io.EOF
		}
		r.line++
		pos := fmt.Sprintf("%s line %d", r.base, r.line)
		if err == errTooLong {
			return schemas.Document{}, noAck, &connectors.BadInputError{Position: pos,
				Reason: fmt.Errorf("line longer than %d bytes, the bound on one line (skipped without reading it into memory)", r.maxLine)}
		}
		if err != nil {
			return schemas.Document{}, nil, fmt.Errorf("jsonl: %s: %w", pos, err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		// Invalid UTF-8 is repaired before JSON sees it (encoding/json would replace each
		// byte, uncounted); control characters escaped in the JSON are stripped after.
		line = textpolicy.CleanBytes(line, r.scratch)
		rec, err := ParseLine(line)
		if err != nil {
			r.countText()
			id := ""
			if rec.ID != "" {
				id = r.source + ":" + rec.ID
			}
			return schemas.Document{}, noAck, &connectors.BadInputError{DocID: id, Position: pos, Reason: err}
		}
		if rec.Deleted { // no text to clean, and never "empty"
			r.countText()
			r.tally.Read()
			return schemas.Document{ID: r.source + ":" + rec.ID, Source: r.source, Version: rec.Version, Position: pos, Deleted: true}, noAck, nil
		}
		rec.Text, rec.Title = textpolicy.Clean(rec.Text, r.scratch), textpolicy.Clean(rec.Title, r.scratch)
		r.countText()
		if !r.keepEmpty && textpolicy.IsBlank(rec.Text) {
			r.tally.Skip("empty")
			continue
		}
		r.tally.Read()
		return schemas.Document{
			ID: r.source + ":" + rec.ID, Source: r.source, Version: rec.Version,
			Title: rec.Title, Text: rec.Text,
		}, noAck, nil
	}
}

func (r *Reader) countText() { r.tally.Text(r.scratch) }

func (r *Reader) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Stats may be called from any goroutine.
func (r *Reader) Stats() connectors.SourceStats {
	return r.tally.Stats(r.consumed.Load(), r.size)
}

// Close releases the file. Read must not be running concurrently.
func (r *Reader) Close(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.closeDec()
	return r.f.Close()
}
