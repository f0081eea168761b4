// Package wikipedia reads MediaWiki XML export dumps (pages-articles, plain, bz2 or
// multistream bz2 with its index) as a connectors.Source of plain-text articles.
//
// With a multistream index the dump is cut at the index's stream offsets and the pieces are
// decompressed, scanned and converted on Workers goroutines; results are handed out in file
// order, so a run's document order never depends on scheduling and a resumed run can skip
// what was acked. Without an index the file is read front to back, with decompression on its
// own goroutine.
//
// A damaged or truncated bz2 stream is not the end of a run: its pages come out of Read as
// bad inputs (dead letters) and reading goes on with the next stream (see streams.go and
// README.md).
//
// What lives where: this package opens, decompresses and cuts the dump and turns pages into
// documents (wikipedia.go, pipeline.go, streams.go); the XML itself -- finding <page> and
// <siteinfo> elements, parsing a page, entities, the declared namespaces -- is exportxml; the
// multistream index and bz2 stream boundaries are multistream; wikitext to plain text is
// wikitext.
package wikipedia

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"runtime"
	"strings"
	"sync"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/exportxml"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/multistream"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitext"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/schemas"
)

// Options configures Open.
type Options struct {
	// Path is the dump: .xml, .xml.bz2 (one or concatenated streams) or a multistream .xml.bz2.
	Path string
	// Index is the multistream index (.txt or .txt.bz2). "" looks for
	// "<name>-index.txt.bz2" beside "<name>.xml.bz2" and reads sequentially when there is none.
	Index string
	// Sequential ignores any index and reads the dump front to back.
	Sequential bool
	// Source prefixes document IDs. "" takes <siteinfo><dbname>, else the file name's leading
	// "[a-z]+wiki", else "wiki".
	Source string
	// Workers bounds parallel stream decompression for multistream dumps (0 = runtime.NumCPU()).
	Workers int
	// Namespaces lists the namespaces to emit (nil = [0], articles).
	Namespaces []int
	// MaxPageBytes bounds a <page> element held in memory; a longer page is a bad input,
	// skipped without being held (0 = 256 MiB, the most there is).
	MaxPageBytes int
	// Store opens Path and Index where they are s3:// objects (nil: local files only). A
	// multistream dump in a bucket is read by ranged GETs, each stream on its own (retried
	// on its own), Workers at a time; nothing is copied to disk.
	Store *objstore.Store
	// DeleteMissing hands out, once the whole dump was read without losing a stream, a
	// deletion record for every article of the last complete read that this dump no longer
	// has (see sync.go). The articles are kept at ArticlesPath, which it requires.
	DeleteMissing bool
	ArticlesPath  string
}

var sourceName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func (o *Options) validate() error {
	if o.Path == "" {
		return errors.New("wikipedia: Path is required")
	}
	if o.Workers < 0 {
		return fmt.Errorf("wikipedia: Workers must be >= 0, got %d", o.Workers)
	}
	if o.MaxPageBytes < 0 {
		return fmt.Errorf("wikipedia: MaxPageBytes must be >= 0, got %d", o.MaxPageBytes)
	}
	if o.Source != "" && !sourceName.MatchString(o.Source) {
		return fmt.Errorf("wikipedia: Source %q must match %s", o.Source, sourceName)
	}
	if o.DeleteMissing && o.ArticlesPath == "" {
		return errors.New("wikipedia: DeleteMissing needs ArticlesPath, where the articles of the last complete read are kept")
	}
	if o.Sequential && o.Index != "" {
		return errors.New("wikipedia: Index and Sequential are exclusive")
	}
	return nil
}

// Reader is a connectors.Source over one dump.
type Reader struct {
	opts        Options
	base        string // file name, for positions in errors
	size        int64
	comp        compression
	enc         textEncoding
	bom         int
	multistream bool
	index       string // the multistream index, when read
	segs        []segment
	namespaces  map[int]bool
	names       *wikitext.Namespaces // the dump's namespace names, from <siteinfo>
	head        []byte               // the file's first bytes, and the text's first element
	root        string
	fileSource  string // from the file name, used when neither Options nor <siteinfo> names one

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	order  chan *segRun

	// Read's state; Read is called from one goroutine at a time.
	cur      *segRun
	pending  []item
	segBase  int64 // pages in segments before cur
	curPages int64 // pages in cur's batches so far
	source   string
	err      error
	sync     *syncer // with DeleteMissing

	mu        sync.Mutex // guards the counters Stats reports
	read      int64
	skipped   map[string]int64
	text      map[string]int64 // text policy counts
	doneBytes int64
}

var _ connectors.Source = (*Reader)(nil)

var leadingWiki = regexp.MustCompile(`^[a-z]+wiki`)

// Open checks the dump (and index) and starts reading it.
func Open(opts Options) (*Reader, error) { return OpenIn(context.Background(), opts) }

// OpenIn is Open with ctx bounding what opening reads (the dump's head, the index), for a
// dump in a bucket.
func OpenIn(ctx context.Context, opts Options) (*Reader, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Store == nil {
		opts.Store = objstore.Local
	}
	st, err := opts.Store.Stat(ctx, opts.Path)
	if err != nil {
		return nil, fmt.Errorf("wikipedia: %w", err)
	}
	r := &Reader{
		opts:       opts,
		base:       objstore.Base(opts.Path),
		size:       st.Size,
		namespaces: map[int]bool{},
		skipped:    map[string]int64{},
		text:       map[string]int64{},
		source:     opts.Source,
		fileSource: "wiki",
	}
	if m := leadingWiki.FindString(r.base); m != "" {
		r.fileSource = m
	}
	ns := opts.Namespaces
	if len(ns) == 0 {
		ns = []int{0}
	}
	for _, n := range ns {
		r.namespaces[n] = true
	}
	workers := opts.Workers
	if workers == 0 {
		workers = runtime.NumCPU()
	}
	if err := r.sniff(ctx); err != nil {
		return nil, err
	}
	r.segs = []segment{{off: 0, end: r.size, first: true}}
	idx := opts.Index
	if idx == "" && !opts.Sequential {
		idx = multistream.IndexPathWith(opts.Path, func(p string) bool {
			_, err := opts.Store.Stat(ctx, p)
			return err == nil
		})
	}
	if idx != "" {
		if r.comp != compBzip2 {
			return nil, fmt.Errorf("wikipedia: index %s given but %s is not bz2", idx, r.base)
		}
		offs, err := r.readIndex(ctx, idx)
		if err != nil {
			return nil, fmt.Errorf("wikipedia: %w", err)
		}
		if err := r.checkFirstStream(ctx, offs[0]); err != nil {
			return nil, fmt.Errorf("wikipedia: index %s: %w", idx, err)
		}
		r.segs, r.multistream, r.index = segmentsFor(offs, r.size), true, idx
	} else {
		workers = 1
	}
	if opts.DeleteMissing {
		if r.sync, err = newSyncer(opts.ArticlesPath); err != nil {
			return nil, err
		}
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.order = make(chan *segRun, workers)
	r.wg.Add(1)
	go r.dispatch(workers)
	return r, nil
}

func (r *Reader) readIndex(ctx context.Context, idx string) ([]int64, error) {
	f, err := r.opts.Store.Open(ctx, idx)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return multistream.ReadIndexFrom(idx, f)
}

func (r *Reader) checkFirstStream(ctx context.Context, off int64) error {
	f, err := r.opts.Store.Open(ctx, r.opts.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	return multistream.CheckStreamStart(f, off)
}

// sniff reads the first bytes to learn the compression and the text encoding.
func (r *Reader) sniff(ctx context.Context) error {
	f, err := r.opts.Store.Open(ctx, r.opts.Path)
	if err != nil {
		return fmt.Errorf("wikipedia: %w", err)
	}
	defer f.Close()
	var head [4]byte
	n, _ := f.ReadAt(head[:], 0)
	r.head = append([]byte(nil), head[:n]...)
	r.comp = sniffCompression(head[:n])
	dec, closeDec, err := decompress(io.NewSectionReader(f, 0, f.Size()), r.comp)
	if err != nil {
		return fmt.Errorf("wikipedia: %s: %w", r.base, err)
	}
	defer closeDec()
	n, err = io.ReadFull(dec, head[:])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return fmt.Errorf("wikipedia: %s: %w", r.base, err)
	}
	r.enc, r.bom = sniffEncoding(head[:n])
	r.names = wikitext.DefaultNamespaces()
	// Workers convert pages in parallel from the first one on, so the namespace names are
	// read here, before any of them starts.
	dec2, closeDec2, err := decompress(io.NewSectionReader(f, 0, f.Size()), r.comp)
	if err != nil {
		return fmt.Errorf("wikipedia: %s: %w", r.base, err)
	}
	defer closeDec2()
	if text, err := decode(dec2, r.enc, r.bom); err == nil {
		si, head := exportxml.ReadSiteinfo(text)
		if si != nil {
			r.names, _, _ = exportxml.ParseNamespaces(si)
		}
		r.root = exportxml.RootElement(head)
	}
	return nil
}

// dispatch starts one goroutine per segment, at most workers at a time, and queues their
// result streams in file order. Read drains the queue; Close cancels and waits.
func (r *Reader) dispatch(workers int) {
	defer r.wg.Done()
	defer close(r.order)
	sem := make(chan struct{}, workers)
	for _, seg := range r.segs {
		select {
		case sem <- struct{}{}:
		case <-r.ctx.Done():
			return
		}
		run := &segRun{seg: seg, ch: make(chan batch, 16)}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { <-sem }()
			defer close(run.ch)
			r.process(r.ctx, run)
		}()
		select {
		case r.order <- run:
		case <-r.ctx.Done():
			return
		}
	}
}

var errClosed = errors.New("wikipedia: reader closed")

func noAck(context.Context, error) error { return nil }

// Read returns the next article in file order.
func (r *Reader) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	for {
		if r.err != nil {
			return schemas.Document{}, nil, r.err
		}
		if len(r.pending) > 0 {
			it := r.pending[0]
			r.pending[0] = item{}
			r.pending = r.pending[1:]
			if it.isSite {
				if r.source == "" && it.site != "" && sourceName.MatchString(it.site) {
					r.source = it.site
				}
				continue
			}
			return r.emit(it)
		}
		if r.cur == nil {
			select {
			case <-ctx.Done():
				return schemas.Document{}, nil, ctx.Err()
			case <-r.ctx.Done():
				r.err = errClosed
				continue
			case run, ok := <-r.order:
				if !ok {
					if r.ctx.Err() != nil {
						r.err = errClosed
						continue
					}
					if r.segBase == 0 {
						// Not one <page>: the wrong file, not an empty wiki.
						r.err = r.noPages()
						continue
					}
					if r.sync != nil {
						d, ack, err := r.sync.next(r)
						if err != nil && err != io.EOF {
							r.err = err
						}
						return d, ack, err
					}
					return schemas.Document{}, nil, io.EOF
				}
				r.mu.Lock()
				r.cur = run
				r.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return schemas.Document{}, nil, ctx.Err()
		case <-r.ctx.Done():
			r.err = errClosed
		case b, ok := <-r.cur.ch:
			r.mu.Lock()
			if !ok {
				r.doneBytes += r.cur.read.Load()
				r.segBase += r.curPages
				r.cur, r.curPages = nil, 0
			} else {
				r.curPages += b.pages
				for k, v := range b.skipped {
					r.skipped[k] += v
				}
				for k, v := range b.text {
					r.text[k] += v
				}
			}
			r.mu.Unlock()
			if ok {
				if b.err != nil {
					r.err = b.err
					continue
				}
				r.pending = b.items
			}
		}
	}
}

// noPages says what the file is, since it is not a MediaWiki export.
func (r *Reader) noPages() error {
	switch {
	case r.size == 0:
		return fmt.Errorf("wikipedia: %s is empty: no pages to read", r.base)
	case r.comp == compNone && strings.HasSuffix(strings.ToLower(r.base), ".bz2"):
		return fmt.Errorf("wikipedia: %s is named .bz2 but does not start with the bz2 magic \"BZh\" (first bytes %x): not a bz2 file, no pages read", r.base, r.head)
	case r.root != "" && r.root != "mediawiki":
		return fmt.Errorf("wikipedia: %s holds no <page> element: its root element is <%s>, not <mediawiki> (not a MediaWiki XML export)", r.base, r.root)
	}
	return fmt.Errorf("wikipedia: %s holds no <page> element in %d bytes (not a MediaWiki XML export?)", r.base, r.size)
}

func (r *Reader) emit(it item) (schemas.Document, connectors.AckFunc, error) {
	if r.source == "" {
		r.source = r.fileSource
	}
	ordinal := r.segBase + it.ordinal
	if r.sync != nil {
		if err := r.sync.saw(r.base, ordinal, it); err != nil {
			r.err = err
			return schemas.Document{}, nil, err
		}
	}
	if it.bad != nil {
		pos := fmt.Sprintf("%s page %d", r.base, ordinal)
		if it.title != "" {
			pos += fmt.Sprintf(" (title %q)", it.title)
		}
		id := ""
		if it.pageID != "" {
			id = r.source + ":" + it.pageID
		}
		return schemas.Document{}, noAck, &connectors.BadInputError{DocID: id, Position: pos, Reason: it.bad}
	}
	d := it.doc
	d.ID = r.source + ":" + it.pageID
	d.Source = r.source
	r.mu.Lock()
	r.read++
	r.mu.Unlock()
	return d, noAck, nil
}

// Stats may be called from any goroutine.
func (r *Reader) Stats() connectors.SourceStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	sk := make(map[string]int64, len(r.skipped))
	for k, v := range r.skipped {
		sk[k] = v
	}
	done := r.doneBytes
	if r.cur != nil {
		done += r.cur.read.Load()
	}
	return connectors.SourceStats{Read: r.read, Skipped: sk, Text: maps.Clone(r.text), BytesRead: min(done, r.size), BytesTotal: r.size}
}

// Close stops the workers and waits for them. Unacked documents are re-read by the next run.
func (r *Reader) Close(ctx context.Context) error {
	r.cancel()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		if r.sync != nil {
			r.sync.close()
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wikipedia: close: %w", ctx.Err())
	}
}
