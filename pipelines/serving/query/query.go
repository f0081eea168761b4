// Package query turns one query document into the vectors the pipeline would publish for it,
// through the same parts as a run: the GN's tokenizer, the configured windows, the chunk cache,
// the GN for the windows the cache lacks, and the configured aggregation. `reignpipe search` and
// `reignpipe serve` stand on it: a long document's REIGN vector can only be made this way, so
// the query side must cut and aggregate exactly as the corpus side did.
//
// The windows go through the engine's embed step, as the corpus's do (engine.Windows: cache
// lookup, the GN for the misses, the row stored as the corpus stores it), and the vector is
// made by the same publish step (engine.Aggregation.Vector). Query windows are
// content-addressed like any other, so the ones the GN embeds are added to the chunk cache (a
// second query of the same document costs no GN pass), but no manifest is written: a query is
// not a corpus document, and re-aggregation and training, which walk the manifests, never see
// it.
package query

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// Options tune how the embedder opens its parts.
type Options struct {
	// NoCache embeds every window with the GN and leaves the chunk cache alone. The cache can
	// be open in one process only, so a service next to a running pipeline uses this.
	NoCache bool
	Logger  *slog.Logger
}

// Embedder makes query vectors. It is safe for concurrent use: concurrent queries share the
// GN's batches, and identical windows in flight share one pass.
type Embedder struct {
	params   chunk.Params
	anchored bool
	gn       gn.Identity
	parts    *parts.Parts
	cache    *shardcache.Cache // nil without a cache
	batcher  *gn.Batcher
	win      *engine.Windows
	agg      engine.Aggregation
	log      *slog.Logger
	// CacheNote says why the cache is not used ("" when it is).
	CacheNote string

	c           engine.Counters // the embed step's counts
	queries     atomic.Int64
	closeOnce   sync.Once
	flushedRows atomic.Int64 // ChunkRowsNew at the last Flush
	flushFailed atomic.Int64
}

// Stats count the work done since Open.
type Stats struct {
	Queries, Windows, CacheHits, GNWindows, CacheCorrupt int64
}

// Result is one query document's vectors and what they cost.
type Result struct {
	// Vector holds the document's vectors as a sink would receive them: Vector in the
	// aggregation's space, GNVector the GN mean-pool beside a REIGN vector.
	Vector    schemas.DocVector
	Windows   int // windows cut
	CacheHits int // found in the chunk cache
	GNWindows int // embedded by the GN now (the rest shared an identical window in flight)
}

// Open opens the parts of cfg a query needs. When the chunk cache is locked by a running
// pipeline, it goes on without it and says so in CacheNote, rather than making a search wait
// for a feed to end.
func Open(cfg *pipelines.Config, o Options) (*Embedder, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	want := parts.Want{Embed: true, Tokenizer: true, Cache: !o.NoCache, Aggregator: true}
	pp, err := parts.Open(cfg, want)
	note := ""
	if o.NoCache {
		note = "not used (no cache asked for)"
	}
	if err != nil && want.Cache && errors.Is(err, syscall.EWOULDBLOCK) {
		note = fmt.Sprintf("not used: %s is open in another reignpipe process (a running pipeline); every query window goes to the GN", cfg.Cache.Dir)
		want.Cache = false
		pp, err = parts.Open(cfg, want)
	}
	if err != nil {
		return nil, err
	}
	b, err := gn.NewBatcher(pp.Model, gn.BatcherOptions{
		TokenBudget: cfg.Batching.TokenBudget, MaxBatch: cfg.Batching.MaxBatch, MaxWait: cfg.Batching.MaxWait.Duration,
	})
	if err != nil {
		return nil, errors.Join(err, pp.Close())
	}
	e := &Embedder{
		params: pp.Params, anchored: cfg.Chunking.Mode == "anchored", gn: pp.GN, parts: pp, cache: pp.Cache,
		batcher: b, agg: engine.Aggregation{Aggregator: pp.Aggregator, Companion: pp.Companion}, log: log, CacheNote: note,
	}
	wo := engine.WindowsOptions{GN: b, Dim: pp.GN.Dim, Counters: &e.c, Logger: log}
	if pp.Cache != nil {
		wo.Cache = pp.Cache
	}
	if e.win, err = engine.NewWindows(wo); err != nil {
		return nil, errors.Join(err, b.Close(), pp.Close())
	}
	return e, nil
}

// Space is the aggregation's vector space; GNSpace the mean-pool space published beside it
// ("" when the aggregation is the mean-pool itself).
func (e *Embedder) Space() string { return e.agg.Space() }

// GNSpace is the space of the GN mean-pool vector published beside a REIGN vector, or "".
func (e *Embedder) GNSpace() string { return e.agg.GNSpace() }

// Dim is the dimension of the aggregation's vectors; GNDim that of the GN's (the mean-pool).
func (e *Embedder) Dim() int { return e.agg.Aggregator.Dim() }

// GNDim is the GN's dimension: that of its windows and of the mean-pool vector.
func (e *Embedder) GNDim() int { return e.gn.Dim }

// Stats are the counters since Open.
func (e *Embedder) Stats() Stats {
	return Stats{
		Queries: e.queries.Load(), Windows: e.c.Windows.Load(), CacheHits: e.c.CacheHits.Load(),
		GNWindows: e.c.GNWindows.Load(), CacheCorrupt: e.c.CacheCorrupt.Load(),
	}
}

// Embed computes doc's vectors. A document that cuts into no window cannot be searched for
// (the runner would dead-letter it the same way). When ctx ends, the query's windows still
// queued for the GN are dropped.
func (e *Embedder) Embed(ctx context.Context, doc schemas.Document) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	windows, nTokens, err := e.params.CutStop(e.parts.Tokenizer, doc.Text, e.anchored, stopper(ctx))
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", name(doc), err)
	}
	if nTokens == 0 {
		return nil, fmt.Errorf("query %s: no text to embed (the document has no tokens)", name(doc))
	}
	keys := make([]uint64, len(windows))
	for i, w := range windows {
		keys[i] = chunk.Key(e.gn.Fingerprint, e.params, w)
	}
	j := &engine.Job{DocID: doc.ID, Windows: windows, Keys: keys}
	if err := e.win.EmbedWait(ctx, j); err != nil {
		return nil, fmt.Errorf("query %s: %w", name(doc), err)
	}
	v, err := e.agg.Vector(engine.DocOf(doc, doc.ContentHash(), nTokens), j.Emb)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", name(doc), err)
	}
	e.queries.Add(1)
	return &Result{Vector: v, Windows: len(windows), CacheHits: int(j.Hits.Load()), GNWindows: int(j.GNWindows.Load())}, nil
}

// Budget bounds the content tokens the documents of one request may cut into, all of them
// together (serve's --max-tokens): a request is refused as soon as its tokenizing passes the
// bound, before any window is embedded. It travels in the request's context (WithBudget), so
// every path from a request to Embed (search included) honours it without a parameter of its own.
type Budget struct {
	Max  int64
	used atomic.Int64
}

// Used is how many tokens the documents embedded under b have cut into so far.
func (b *Budget) Used() int64 { return b.used.Load() }

// OverBudgetError is a request past its Budget.
type OverBudgetError struct{ Max int64 }

func (e *OverBudgetError) Error() string {
	return fmt.Sprintf("the request's text is over %d tokens", e.Max)
}

type budgetKey struct{}

// WithBudget returns ctx carrying b: Embed under it counts its tokens against b.
func WithBudget(ctx context.Context, b *Budget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

// stopper ends a document's tokenizing when ctx ends (the request timed out, its client went
// away, the server stops) or the request's budget is spent.
func stopper(ctx context.Context) func(int) error {
	b, _ := ctx.Value(budgetKey{}).(*Budget)
	last := 0
	return func(n int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if b != nil && b.Max > 0 {
			if b.used.Add(int64(n-last)) > b.Max {
				return &OverBudgetError{Max: b.Max}
			}
			last = n
		}
		return nil
	}
}

// Flush makes the windows added to the cache durable, so the next query finds them.
func (e *Embedder) Flush() error {
	rows := e.c.ChunkRowsNew.Load()
	if e.cache == nil || rows == e.flushedRows.Load() {
		return nil
	}
	if err := e.cache.Flush(); err != nil {
		e.flushFailed.Add(1)
		return fmt.Errorf("chunk cache flush: %w", err)
	}
	e.flushedRows.Store(rows)
	return nil
}

// Close flushes the cache and releases every part.
func (e *Embedder) Close() error {
	var err error
	e.closeOnce.Do(func() {
		err = errors.Join(e.batcher.Close(), e.Flush(), e.parts.Close())
	})
	return err
}

func name(d schemas.Document) string {
	if d.ID != "" {
		return d.ID
	}
	return "(no id)"
}
