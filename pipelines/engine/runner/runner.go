// Package runner runs a pipeline's documents through the engine in one process: source →
// tokenize + chunk → the embed step (cache, GN) → the ledger (manifests, chunk records,
// vectors, acks), joined by bounded channels so a slow stage pushes back on the source. The
// embedded run is a runner over the configured source; a distributed embed or process worker
// is a runner over a Kafka source, whose cache is a replica of the cluster's store.
//
// Goroutines and their owner (Run): one reader, TokenizeWorkers tokenizers, one embedder that
// hands documents to the embed step (engine.Windows), and one writer, which owns the ledger
// (engine.Ledger): every durable effect and every ack goes through it, so an input is
// acknowledged only after everything derived from it is durable.
//
// Stopping: cancelling the context passed to Run is a soft stop (no new input is read, what is
// at the GN drains and is committed); after DrainTimeout the hard stop abandons in-flight
// documents, which are not acked and are read again by the next run. A document whose input
// stops being this runner's (its Kafka partition moved) is dropped, unacked, with what it still
// had queued for the GN.
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
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/chunk"
)

// Tokenizer is the part of the GN tokenizer the runner needs (content ids only; [CLS]/[SEP]
// are added by the chunker).
type Tokenizer = chunk.Tokenizer

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
	Embedder    engine.GN
	Cache       engine.Cache
	// SharedCache: other processes fill Cache too (a distributed worker's replica of the
	// cluster's store), so a window is looked up again when its GN batch forms.
	SharedCache bool
	// Aggregation makes the vectors of Sinks (named by SinkNames in messages and the summary).
	Aggregation engine.Aggregation
	Sinks       []connectors.Sink
	SinkNames   []string
	// ChunkSinks receive each document's chunk embeddings (the embed stage of distributed mode
	// publishes them for a separate aggregate stage). With ChunkSinks, Sinks may be left empty:
	// the runner then embeds and publishes chunks only.
	ChunkSinks []connectors.ChunkSink
	DeadLetter connectors.DeadLetterSink
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
	// TrackIDs bounds the doc ids remembered to count duplicates (engine.Options.TrackIDs).
	TrackIDs int
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

// item is one input on its way through the stages.
type item struct {
	in    engine.Input
	doc   schemas.Document
	bad   *connectors.BadInputError
	lease context.Context
	size  int64 // text bytes held against Options.InflightBytes until the writer is done
	hash  uint64
	// nTokens are the document's content tokens; job its windows through the embed step.
	nTokens int
	job     engine.Job
	// err fails the document before the embed step (its size, a soft stop), with the stage.
	err   error
	stage string
	// superseded: a deletion the cache remembers supersedes this upsert's version; it is
	// neither tokenized nor embedded (the ledger records it as superseded).
	superseded bool
}

// skipsEmbed says whether it goes straight to the writer: a deletion record or a superseded
// upsert has no windows.
func (it *item) skipsEmbed() bool { return it.doc.Deleted || it.superseded }

// Runner executes one pipeline once.
type Runner struct {
	parts  Parts
	opt    Options
	budget *byteBudget
	order  *idOrder
	win    *engine.Windows
	C      engine.Counters
}

// New checks the parts and returns a runner. From Run on, the runner owns the sinks and chunk
// sinks: Run closes them, and its error says when a close failed.
func New(p Parts, opt Options) (*Runner, error) {
	opt.defaults()
	switch {
	case p.Source == nil:
		return nil, errors.New("runner: no source")
	case p.Tokenizer == nil:
		return nil, errors.New("runner: no tokenizer")
	case p.Embedder == nil:
		return nil, errors.New("runner: no GN embedder")
	case p.Cache == nil:
		return nil, errors.New("runner: no chunk cache")
	case p.Aggregation.Aggregator == nil && len(p.ChunkSinks) == 0:
		return nil, errors.New("runner: no aggregator")
	case p.Aggregation.Aggregator != nil && len(p.Sinks) == 0:
		return nil, errors.New("runner: no sink")
	case p.Aggregation.Aggregator == nil && len(p.Sinks) > 0:
		return nil, errors.New("runner: vector sinks need an aggregator")
	case p.DeadLetter == nil:
		return nil, errors.New("runner: no dead-letter output")
	case p.Dim <= 0 || p.Fingerprint == "":
		return nil, errors.New("runner: GN dimension and fingerprint are required")
	}
	if err := p.Chunking.Validate(); err != nil {
		return nil, err
	}
	return &Runner{parts: p, opt: opt, budget: newByteBudget(opt.InflightBytes), order: newIDOrder()}, nil
}

// Space is the chunk-embedding space of the runner's windows.
func (r *Runner) Space() schemas.Space {
	return schemas.Space{Fingerprint: r.parts.Fingerprint, Dim: r.parts.Dim, K: r.parts.Chunking.K, S: r.parts.Chunking.S}
}

// Run processes the source to its end (or until ctx is cancelled: soft stop) and returns after
// the last commit, with the sinks closed. The error is the first fatal one (a sink or the
// cache failing, a sink failing to close); bad inputs are not errors, they are dead-lettered
// and counted.
func (r *Runner) Run(ctx context.Context) (err error) {
	p := r.parts
	var sourceCommit func(context.Context) error
	if f, ok := p.Source.(connectors.AckFlusher); ok {
		sourceCommit = f.FlushAcks
	}
	led, err := engine.New(engine.Outputs{
		Cache: p.Cache, Space: r.Space(), Chunks: p.ChunkSinks, Vectors: p.Sinks, Names: p.SinkNames, Aggregation: p.Aggregation,
	}, engine.Options{
		CommitEvery: r.opt.CommitEvery, CommitInterval: r.opt.CommitInterval, Resume: r.opt.Resume,
		SourceCommit: sourceCommit, OnCommit: r.opt.OnCommit, DeadLetter: p.DeadLetter, TrackIDs: r.opt.TrackIDs, Logger: r.opt.Logger,
	}, &r.C)
	if err != nil {
		return err // New checked the parts this refuses: not reached with a runner from New
	}
	win, err := engine.NewWindows(engine.WindowsOptions{Cache: p.Cache, Shared: p.SharedCache, GN: p.Embedder, Dim: p.Dim, Counters: &r.C, Logger: r.opt.Logger})
	if err != nil {
		return errors.Join(err, led.Close(context.Background(), true))
	}
	r.win = win

	// hardCtx ends in-flight work; it is cancelled DrainTimeout after ctx, or on a fatal error.
	hardCtx, hardCancel := context.WithCancelCause(context.Background())
	defer hardCancel(nil)
	var softAt atomic.Int64 // when the soft stop came (UnixNano); 0: it did not
	softLogged := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		softAt.Store(time.Now().UnixNano())
		r.opt.Logger.Info("soft stop: no new input is read; in-flight documents drain", "drain_timeout", r.opt.DrainTimeout)
		close(softLogged)
		t := time.AfterFunc(r.opt.DrainTimeout, func() { hardCancel(engine.ErrStopped) })
		context.AfterFunc(hardCtx, func() { t.Stop() })
	})
	defer stopWatch()
	// On the hard stop nothing queued for the GN runs any more: those documents are abandoned.
	stopAbort := context.AfterFunc(hardCtx, func() { p.Embedder.Abort(context.Cause(hardCtx)) })
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
				if it.bad == nil && it.err == nil && ctx.Err() == nil && !leaseEnded(it) && !it.doc.Deleted {
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
			if it.bad == nil && it.err == nil && ctx.Err() != nil {
				// Soft stop: only documents already at the GN finish; the rest are abandoned
				// unacked, so the drain takes one batcher queue, not every queued document.
				it.err, it.stage = ctx.Err(), "stop"
			}
			if it.bad != nil || it.err != nil || leaseEnded(it) || it.skipsEmbed() {
				deliver(it)
				continue
			}
			win.Embed(hardCtx, &it.job, func(*engine.Job) { deliver(it) })
		}
		inflight.Wait()
		close(done)
	}()

	// The writer outlives the hard stop: documents that did finish must still reach the sinks
	// and be committed, so its context is not the one the hard stop cancels.
	wctx := context.WithoutCancel(hardCtx)
	werr := led.Drive(wctx, func(wait context.Context) error {
		select {
		case it, ok := <-done:
			if !ok {
				return io.EOF
			}
			return r.order.handle(it, func(it *item) error { return r.handle(wctx, led, it) })
		case <-wait.Done():
			return wait.Err()
		}
	})
	if werr != nil {
		fail(werr)
		for it := range done { // let the other stages finish; nothing more is committed
			r.C.Processed.Add(1)
			r.C.InFlight.Add(-1)
			led.Abandon(it.in)
		}
		r.order.abandonParked(led, &r.C)
	}
	wg.Wait()
	// How the run stopped, and what it left, is said once every stage is done.
	if ctx.Err() != nil {
		// The stages saw the stop before the watcher's goroutine may have run: wait for its
		// message, so that the log reads in the order things happened.
		<-softLogged
	}
	r.logStop(context.Cause(hardCtx), fatal, softAt.Load())
	if cerr := led.Close(wctx, fatal != nil); cerr != nil {
		if fatal == nil {
			return cerr
		}
		r.opt.Logger.Error("closing the outputs after the failure", "err", cerr)
	}
	if fatal != nil {
		return fatal
	}
	return sourceErr
}

func leaseEnded(it *item) bool { return it.lease != nil && it.lease.Err() != nil }

// handle turns one item that left the embed step into the ledger's record of it.
func (r *Runner) handle(ctx context.Context, led *engine.Ledger, it *item) error {
	r.C.Processed.Add(1)
	r.C.InFlight.Add(-1)
	defer func() {
		// Its rows are in the cache now, or it failed: the text and window buffers go.
		r.budget.release(it.size)
		it.doc.Text, it.job = "", engine.Job{}
	}()
	switch {
	case it.bad != nil:
		return led.FailBad(ctx, it.in, it.bad)
	case leaseEnded(it):
		led.Revoke(it.in)
		return nil
	case it.err != nil && it.stage == "stop":
		led.Abandon(it.in)
		return nil
	case it.err != nil:
		return led.Fail(ctx, it.in, it.stage, it.err)
	case it.doc.Deleted:
		return led.DeliverDelete(ctx, it.in, schemas.DeletionOf(it.doc))
	case it.superseded:
		led.Superseded(it.in)
		return nil
	}
	if err, stage, fatal, revoked := it.job.Err(); err != nil {
		switch {
		case fatal:
			return err
		case revoked:
			led.Revoke(it.in)
			return nil
		case stage == "stop" || errors.Is(err, engine.ErrStopped) || isCancel(err):
			// Not the document's fault: a hard stop. Not acked, read again next run.
			led.Abandon(it.in)
			return nil
		}
		return led.Fail(ctx, it.in, stage, err)
	}
	return led.Deliver(ctx, it.in, engine.DocOf(it.doc, it.hash, it.nTokens), it.job.Keys, it.job.Emb)
}

func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
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
	case errors.Is(hardCause, engine.ErrStopped):
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
	if v := r.C.Revoked.Load(); v > 0 {
		r.opt.Logger.Info("documents whose partition moved to another worker were dropped unacked; their new owner reads them", "revoked", v)
	}
}

func (r *Runner) read(ctx context.Context, out chan<- *item) error {
	var seq int64
	leased, _ := r.parts.Source.(connectors.Leased)
	for {
		waitStart, idle := time.Now(), r.C.InFlight.Load() == 0
		doc, ack, err := r.parts.Source.Read(ctx)
		r.C.Waited(waitStart, idle)
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
		in := engine.Input{Seq: seq, Ack: ack, DocID: doc.ID, Source: doc.Source, Position: doc.Position}
		seq++
		if in.Seq < r.opt.Resume {
			r.C.Resumed.Add(1)
			if ack != nil {
				_ = ack(ctx, nil)
			}
			continue
		}
		it := &item{in: in, doc: doc, bad: bad}
		if leased != nil {
			it.lease = leased.Lease()
		}
		if n := int64(len(doc.Text)); bad == nil && r.opt.MaxDocBytes > 0 && n > r.opt.MaxDocBytes {
			it.err, it.stage = fmt.Errorf("document text is %d bytes, over source.max_doc_bytes (%d); raise the bound to embed it", n, r.opt.MaxDocBytes), "size"
			it.doc.Text = ""
		}
		it.size = int64(len(it.doc.Text))
		if err := r.budget.acquire(ctx, it.size); err != nil {
			r.C.Abandoned.Add(1) // read, never started: the next run reads it again
			return nil
		}
		r.C.InFlight.Add(1)
		if bad == nil {
			r.order.enter(it)
		}
		select {
		case out <- it:
		case <-ctx.Done():
			// Read but never started: not acked, so the next run reads it again.
			r.order.leave(it)
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

// tokenize cuts it's windows, unless a deletion the cache remembers supersedes its version:
// then it costs no tokenizing and no GN pass. A failed lookup is left to the writer, which asks
// again (Ledger.Deliver) and fails the run with the error.
func (r *Runner) tokenize(it *item) {
	p := r.parts
	if sup, err := p.Cache.Superseded(it.doc.ID, it.doc.Version); err == nil && sup {
		it.superseded = true
		return
	}
	it.hash = it.doc.ContentHash()
	windows, nTokens := p.Chunking.Cut(p.Tokenizer, it.doc.Text, p.Anchored)
	keys := make([]uint64, len(windows))
	for i, w := range windows {
		keys[i] = chunk.Key(p.Fingerprint, p.Chunking, w)
	}
	it.nTokens = nTokens
	it.job = engine.Job{DocID: it.doc.ID, Windows: windows, Keys: keys, Lease: it.lease}
	r.C.Tokens.Add(int64(nTokens))
}

// Windows is the runner's embed step, once Run has started it (for tests: its open flights).
func (r *Runner) Windows() *engine.Windows { return r.win }

// Summarize fills s from the finished run's counters, the source's stats and the sinks that
// can say what became of their vectors; the space is the aggregation's, or the chunk space of
// a runner that publishes chunk records only.
func (r *Runner) Summarize(s *engine.Summary, src connectors.SourceStats) {
	engine.Summarize(s, &r.C, src, r.parts.Sinks)
	if a := r.parts.Aggregation.Aggregator; a != nil {
		s.Space = a.Space()
	} else {
		s.Space = "chunks:" + r.parts.Fingerprint
	}
}
