// Package embedded runs a pipeline in one process: source → tokenize + chunk → chunk cache /
// GN → aggregate → sinks, joined by bounded channels so a slow stage pushes back on the source.
//
// Goroutines and their owner (Run): one reader, TokenizeWorkers tokenizers, one embedder that
// looks windows up in the cache and submits misses to the GN batcher, and one writer. The writer
// owns every durable effect: it adds new chunk rows and doc manifests to the cache, writes
// vectors to the sinks, and commits (cache flush, then sink flush, then acks and the source
// checkpoint), so an input is acknowledged only after everything derived from it is durable.
//
// Stopping: cancelling the context passed to Run is a soft stop (no new input is read, what is
// in flight drains and is committed); after DrainTimeout the hard stop abandons in-flight
// documents, which are not acked and are read again by the next run.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/commitpolicy"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// Tokenizer is the part of the GN tokenizer the runner needs (content ids only; [CLS]/[SEP]
// are added by the chunker).
type Tokenizer = chunk.Tokenizer

// WindowEmbedder runs GN forward passes. Submit blocks while the embedder's queue is full
// (back-pressure) or until ctx is done; done is called exactly once, from any goroutine, after
// out holds the L2-normalised chunk embedding or with the error.
type WindowEmbedder interface {
	Submit(ctx context.Context, window []int32, out []float32, done func(error)) error
	// Abort is the hard stop: windows still queued fail with err (their done is called) and
	// Abort returns once no forward pass is running. Submit fails afterwards.
	Abort(err error)
}

// ChunkCache is the persistent chunk-embedding cache (stages/shardcache).
type ChunkCache interface {
	Get(key uint64, dst []float32) (bool, error)
	Add(r shardcache.Row) (added bool, err error)
	PutManifest(m shardcache.Manifest) error
	Flush() error
}

// Parts are the connected pieces of one pipeline.
type Parts struct {
	Source    connectors.Source
	Tokenizer Tokenizer
	Chunking  chunk.Params
	// Anchored cuts edit-stable windows at paragraph boundaries (chunk.AnchoredWindows)
	// instead of the reference's fixed windows.
	Anchored    bool
	Fingerprint string // GN fingerprint (window keys, manifests)
	Dim         int    // GN dimension
	Embedder    WindowEmbedder
	Cache       ChunkCache
	Aggregator  aggregate.Aggregator
	// GNMeanPool, when set, is written beside each vector (DocVector.GNVector): the chunked
	// mean-pool GN vector that comes free from the same chunks when Aggregator is REIGN.
	GNMeanPool aggregate.Aggregator
	Sinks      []connectors.Sink
	// ChunkSinks receive each document's chunk embeddings (the embed stage of distributed mode
	// publishes them for a separate aggregate stage). With ChunkSinks, Aggregator and Sinks may
	// be left empty: the runner then embeds and publishes chunks only.
	ChunkSinks []ChunkSink
	DeadLetter connectors.DeadLetterSink
}

// ChunkSink makes documents' chunk embeddings durable, like connectors.Sink does for vectors.
type ChunkSink interface {
	// WriteChunks hands over one document; it may buffer. The ChunkDoc's slices are not
	// retained past the call's return unless copied. Called from one goroutine at a time.
	WriteChunks(ctx context.Context, c schemas.ChunkDoc) error
	// Flush blocks until everything written so far is durable; only then are inputs acked.
	Flush(ctx context.Context) error
}

// Options tune the runner.
type Options struct {
	CommitEvery     int           // documents between commits (default commitpolicy.Every)
	CommitInterval  time.Duration // and at most this long between commits (default commitpolicy.Interval)
	TokenizeWorkers int           // default: all cores
	Queue           int           // documents buffered between stages (default 64)
	DrainTimeout    time.Duration // soft stop → hard stop (default 30s)
	// MaxDocBytes dead-letters a document whose text is larger (0: no bound), before it is
	// tokenized, so it never costs more than the source's own read of it.
	MaxDocBytes int64
	// InflightBytes bounds the text of the documents in flight (0: no bound): the reader waits
	// while admitting the next document would pass it. One document is always admitted, so a
	// document larger than the bound still runs, alone. Tokens, windows and embeddings grow
	// with the text, so this bounds the runner's memory where Queue counts documents only.
	InflightBytes int64
	// Resume is the number of leading inputs a previous run already committed; they are read
	// again (sources are deterministic) but skipped.
	Resume int64
	// OnCommit persists the new watermark (inputs fully done, counted from the start) after each
	// commit. An error ends the run.
	OnCommit func(watermark int64) error
	Logger   *slog.Logger
}

func (o *Options) defaults() {
	commitpolicy.Defaults(&o.CommitEvery, &o.CommitInterval)
	if o.TokenizeWorkers <= 0 {
		o.TokenizeWorkers = runtime.NumCPU()
	}
	if o.Queue <= 0 {
		o.Queue = 64
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Counters are live run figures; read them with Snapshot.
type Counters struct {
	InputsRead    atomic.Int64 // documents and bad inputs read in this run (resumed ones included)
	Resumed       atomic.Int64 // inputs skipped because a previous run committed them
	DocsWritten   atomic.Int64 // committed: durable in every sink and acked
	DocsFailed    atomic.Int64 // dead-lettered
	Windows       atomic.Int64 // windows cut (and looked up in the cache)
	WindowsDone   atomic.Int64 // windows with their embedding: from the cache, the GN or a shared pass
	GNDone        atomic.Int64 // windows the GN has embedded
	Tokens        atomic.Int64
	CacheHits     atomic.Int64
	CacheCorrupt  atomic.Int64 // cached windows found damaged and embedded again
	GNWindows     atomic.Int64 // windows sent to the GN
	GNShared      atomic.Int64 // windows that missed the cache and took an identical in-flight window's vector
	Commits       atomic.Int64
	Watermark     atomic.Int64
	InFlight      atomic.Int64
	Abandoned     atomic.Int64 // in flight at a hard stop; re-read next run
	ChunkRowsNew  atomic.Int64
	ManifestsPut  atomic.Int64
	DeadLetters   atomic.Int64
	ProcessedDocs atomic.Int64 // documents that reached the writer
}

// item is one input on its way through the stages.
type item struct {
	seq     int64
	doc     schemas.Document
	bad     *connectors.BadInputError
	ack     connectors.AckFunc
	hash    uint64
	size    int64 // text bytes held against Options.InflightBytes until the writer is done
	nTokens int
	windows [][]int32
	keys    []uint64
	emb     [][]float32
	miss    []bool
	leads   []uint64 // keys whose GN flight this item leads (flights.release)
	pending atomic.Int32
	errMu   sync.Mutex
	err     error
	// refused is a sink's refusal of the document's vector (dead-lettered, acked at the commit).
	refused error
	stage   string
}

func (it *item) fail(stage string, err error) {
	it.errMu.Lock()
	if it.err == nil {
		it.err, it.stage = err, stage
	}
	it.errMu.Unlock()
}

// Runner executes one pipeline once.
type Runner struct {
	parts   Parts
	opt     Options
	budget  *byteBudget
	flights *flights
	C       Counters
}

// New checks the parts and returns a runner.
func New(p Parts, opt Options) (*Runner, error) {
	opt.defaults()
	switch {
	case p.Source == nil:
		return nil, errors.New("embedded: no source")
	case p.Tokenizer == nil:
		return nil, errors.New("embedded: no tokenizer")
	case p.Embedder == nil:
		return nil, errors.New("embedded: no GN embedder")
	case p.Cache == nil:
		return nil, errors.New("embedded: no chunk cache")
	case p.Aggregator == nil && len(p.ChunkSinks) == 0:
		return nil, errors.New("embedded: no aggregator")
	case p.Aggregator != nil && len(p.Sinks) == 0:
		return nil, errors.New("embedded: no sink")
	case p.Aggregator == nil && len(p.Sinks) > 0:
		return nil, errors.New("embedded: vector sinks need an aggregator")
	case p.DeadLetter == nil:
		return nil, errors.New("embedded: no dead-letter output")
	case p.Dim <= 0 || p.Fingerprint == "":
		return nil, errors.New("embedded: GN dimension and fingerprint are required")
	}
	if err := p.Chunking.Validate(); err != nil {
		return nil, err
	}
	return &Runner{parts: p, opt: opt, budget: newByteBudget(opt.InflightBytes), flights: newFlights()}, nil
}

// Run processes the source to its end (or until ctx is cancelled: soft stop) and returns after
// the last commit. The error is the first fatal one (a sink or the cache failing); bad inputs
// are not errors, they are dead-lettered and counted.
func (r *Runner) Run(ctx context.Context) error {
	// hardCtx ends in-flight work; it is cancelled DrainTimeout after ctx, or on a fatal error.
	hardCtx, hardCancel := context.WithCancelCause(context.Background())
	defer hardCancel(nil)
	var softAt atomic.Int64 // when the soft stop came (UnixNano); 0: it did not
	softLogged := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		softAt.Store(time.Now().UnixNano())
		r.opt.Logger.Info("soft stop: no new input is read; in-flight documents drain", "drain_timeout", r.opt.DrainTimeout)
		close(softLogged)
		t := time.AfterFunc(r.opt.DrainTimeout, func() { hardCancel(errHardStop) })
		context.AfterFunc(hardCtx, func() { t.Stop() })
	})
	defer stopWatch()
	// On the hard stop nothing queued for the GN runs any more: those documents are abandoned.
	stopAbort := context.AfterFunc(hardCtx, func() { r.parts.Embedder.Abort(context.Cause(hardCtx)) })
	defer stopAbort()

	toTok := make(chan *item, r.opt.Queue)
	toEmb := make(chan *item, r.opt.Queue)
	done := make(chan *item, r.opt.Queue)
	var fatalOnce sync.Once
	var fatal error
	fail := func(err error) {
		fatalOnce.Do(func() { fatal = err; hardCancel(err) })
	}

	var wg sync.WaitGroup
	// Reader: stops reading on the soft stop (ctx) or a fatal error. A source that fails (a
	// truncated file, a broken connection) only ends the reading: the documents it delivered
	// before are whole, so they drain and are committed like at a soft stop, and Run returns
	// the source's error afterwards. Hard-stopping them would throw away good work.
	readCtx, readCancel := context.WithCancel(ctx)
	defer readCancel()
	context.AfterFunc(hardCtx, readCancel)
	var sourceErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(toTok)
		sourceErr = r.read(readCtx, toTok)
	}()

	var tokWG sync.WaitGroup
	for i := 0; i < r.opt.TokenizeWorkers; i++ {
		tokWG.Add(1)
		go func() {
			defer tokWG.Done()
			for it := range toTok {
				if it.bad == nil && it.err == nil && ctx.Err() == nil {
					r.tokenize(it)
				}
				toEmb <- it
			}
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); tokWG.Wait(); close(toEmb) }()

	// Embedder: every item it receives is delivered to done exactly once.
	wg.Add(1)
	go func() {
		defer wg.Done()
		var inflight sync.WaitGroup
		deliver := func(it *item) { done <- it; inflight.Done() }
		for it := range toEmb {
			inflight.Add(1)
			if it.bad == nil && ctx.Err() != nil {
				// Soft stop: only documents already at the GN finish; the rest are abandoned
				// unacked, so the drain takes one batcher queue, not every queued document.
				it.fail("stop", ctx.Err())
			}
			if it.bad != nil || it.err != nil {
				deliver(it)
				continue
			}
			r.embed(hardCtx, it, deliver)
		}
		inflight.Wait()
		close(done)
	}()

	// The writer outlives the hard stop: documents that did finish must still reach the sinks
	// and be committed, so its context is not the one the hard stop cancels.
	if err := r.write(context.WithoutCancel(hardCtx), done); err != nil {
		fail(err)
		for it := range done { // let the other stages finish; nothing more is committed
			r.flights.release(it)
			r.C.InFlight.Add(-1)
			r.C.Abandoned.Add(1)
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		// The stages saw the stop before the watcher's goroutine may have run: wait for its
		// message, so that the log reads in the order things happened.
		<-softLogged
	}
	r.logStop(context.Cause(hardCtx), fatal, softAt.Load())
	if fatal != nil {
		return fatal
	}
	return sourceErr
}

// logStop says how the run ended when it left documents unacknowledged, and what cut it short:
// the drain deadline (the hard stop), a fatal error, or nothing -- a soft stop that drained,
// leaving only the documents that had not reached the GN, which is not a hard stop and is not
// reported as one. hardCause is the hard context's cause (nil when it was not cancelled).
func (r *Runner) logStop(hardCause, fatal error, softAt int64) {
	n := r.C.Abandoned.Load()
	var after time.Duration
	if softAt != 0 {
		after = time.Since(time.Unix(0, softAt)).Round(100 * time.Millisecond)
	}
	const rereads = "they are not acknowledged, and the next run reads them again"
	switch {
	case errors.Is(hardCause, errHardStop):
		r.opt.Logger.Warn("hard stop: run.drain_timeout passed before the in-flight documents were done; "+rereads,
			"abandoned", n, "drain_timeout", r.opt.DrainTimeout, "after", after)
	case fatal != nil:
		if n > 0 {
			r.opt.Logger.Warn("the run failed with documents in flight; "+rereads, "abandoned", n, "err", fatal)
		}
	case softAt != 0:
		r.opt.Logger.Info("soft stop: drained; the documents that had not reached the GN are left for the next run",
			"after", after, "left", n, "drain_timeout", r.opt.DrainTimeout)
	case n > 0:
		r.opt.Logger.Warn("documents left in flight; "+rereads, "abandoned", n)
	}
}

func (r *Runner) read(ctx context.Context, out chan<- *item) error {
	var seq int64
	for {
		doc, ack, err := r.parts.Source.Read(ctx)
		var bad *connectors.BadInputError
		switch {
		case err == nil:
		case errors.As(err, &bad):
		case errors.Is(err, io.EOF):
			if seq == 0 {
				return r.nothingRead()
			}
			return nil
		case ctx.Err() != nil:
			return nil // soft stop
		default:
			return fmt.Errorf("source: %w", err)
		}
		r.C.InputsRead.Add(1)
		s := seq
		seq++
		if s < r.opt.Resume {
			r.C.Resumed.Add(1)
			if ack != nil {
				_ = ack(ctx, nil)
			}
			continue
		}
		it := &item{seq: s, doc: doc, bad: bad, ack: ack}
		if n := int64(len(doc.Text)); bad == nil && r.opt.MaxDocBytes > 0 && n > r.opt.MaxDocBytes {
			it.fail("size", fmt.Errorf("document text is %d bytes, over source.max_doc_bytes (%d); raise the bound to embed it", n, r.opt.MaxDocBytes))
			it.doc.Text = ""
		}
		it.size = int64(len(it.doc.Text))
		if err := r.budget.acquire(ctx, it.size); err != nil {
			r.C.Abandoned.Add(1) // read, never started: the next run reads it again
			return nil
		}
		r.C.InFlight.Add(1)
		select {
		case out <- it:
		case <-ctx.Done():
			// Read but never started: not acked, so the next run reads it again.
			r.C.InFlight.Add(-1)
			r.C.Abandoned.Add(1)
			r.budget.release(it.size)
			return nil
		}
	}
}

// ErrNoDocuments is returned by Run when the source ended without handing out a single input:
// an empty file, the wrong kind of file, or one whose every input was skipped. A run that
// "completes" with nothing hides a wrong path or source type. A self-checkpointing source (a
// watched folder) is exempt: an empty folder, or one whose files earlier runs finished, is
// simply up to date.
var ErrNoDocuments = errors.New("the input yielded no documents")

func (r *Runner) nothingRead() error {
	if sc, ok := r.parts.Source.(connectors.SelfCheckpointing); ok && sc.SelfCheckpointing() {
		return nil
	}
	st := r.parts.Source.Stats()
	if len(st.Skipped) == 0 {
		return fmt.Errorf("source: %w (read %d bytes; check source.path and source.type)", ErrNoDocuments, st.BytesRead)
	}
	reasons := make([]string, 0, len(st.Skipped))
	for k, v := range st.Skipped {
		reasons = append(reasons, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(reasons)
	return fmt.Errorf("source: %w: every input was skipped (%s)", ErrNoDocuments, strings.Join(reasons, ", "))
}

func (r *Runner) tokenize(it *item) {
	p := r.parts
	it.hash = it.doc.ContentHash()
	it.windows, it.nTokens = p.Chunking.Cut(p.Tokenizer, it.doc.Text, p.Anchored)
	it.keys = make([]uint64, len(it.windows))
	for i, w := range it.windows {
		it.keys[i] = chunk.Key(p.Fingerprint, p.Chunking, w)
	}
	r.C.Tokens.Add(int64(it.nTokens))
}

// embed fills it.emb from the cache and submits the misses; deliver is called once, when every
// window has its embedding or failed.
func (r *Runner) embed(ctx context.Context, it *item, deliver func(*item)) {
	n, dim := len(it.windows), r.parts.Dim
	buf := make([]float32, n*dim)
	it.emb = make([][]float32, n)
	it.miss = make([]bool, n)
	r.C.Windows.Add(int64(n))
	it.pending.Store(1) // held until every miss is submitted
	finish := func() {
		if it.pending.Add(-1) == 0 {
			deliver(it)
		}
	}
	for i := range it.windows {
		it.emb[i] = buf[i*dim : (i+1)*dim : (i+1)*dim]
		hit, err := r.parts.Cache.Get(it.keys[i], it.emb[i])
		if errors.Is(err, shardcache.ErrCorrupt) {
			// A damaged stored row is not the document's fault: embed the window again, and
			// the writer's Add replaces the row, so the cache heals as it is used.
			r.C.CacheCorrupt.Add(1)
			r.opt.Logger.Warn("cached window is damaged; embedding it again", "doc", it.doc.ID, "window", i, "err", err)
			hit, err = false, nil
		}
		if err != nil {
			it.fail("cache", fmt.Errorf("cache lookup of window %d: %w", i, err))
			break
		}
		if hit {
			r.C.CacheHits.Add(1)
			r.C.WindowsDone.Add(1)
			continue
		}
		// A miss is stored by the writer whether it led the flight or waited on it: if the
		// leading document fails for its own reasons, the waiter's row is the one kept.
		it.miss[i] = true
		it.pending.Add(1)
		idx, key := i, it.keys[i]
		lead := r.flights.join(key, it, it.emb[i], func(err error) {
			if err != nil {
				r.failGN(ctx, it, fmt.Errorf("GN on window %d (an identical window in flight): %w", idx, err))
			} else {
				r.C.WindowsDone.Add(1)
			}
			finish()
		})
		if !lead {
			r.C.GNShared.Add(1)
			continue
		}
		it.leads = append(it.leads, key)
		r.C.GNWindows.Add(1)
		err = r.parts.Embedder.Submit(ctx, it.windows[i], it.emb[i], func(err error) {
			if err == nil {
				r.C.GNDone.Add(1)
				r.C.WindowsDone.Add(1)
			}
			r.flights.land(key, err)
			if err != nil {
				r.failGN(ctx, it, fmt.Errorf("GN on window %d: %w", idx, err))
			}
			finish()
		})
		if err != nil {
			r.flights.land(key, fmt.Errorf("submitting window %d of %s: %w", i, it.doc.ID, err))
			r.failGN(ctx, it, fmt.Errorf("submitting window %d: %w", i, err))
			it.pending.Add(-1)
			break
		}
	}
	finish()
}

// failGN records a GN failure. After the hard stop (ctx done) the GN fails whatever it still
// holds, in whatever words its implementation uses ("batcher closed"); that is the stop, not
// the document, so the document is abandoned (read again next run), never dead-lettered.
func (r *Runner) failGN(ctx context.Context, it *item, err error) {
	if ctx.Err() != nil {
		it.fail("stop", fmt.Errorf("%w (%v)", context.Cause(ctx), err))
		return
	}
	it.fail("gn", err)
}
