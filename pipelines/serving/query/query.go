// Package query turns one query document into the vectors the pipeline would publish for it,
// through the same parts as a run: the GN's tokenizer, the configured windows, the chunk cache,
// the GN for the windows the cache lacks, and the configured aggregation. `reignpipe search` and
// `reignpipe serve` stand on it: a long document's REIGN vector can only be made this way, so
// the query side must cut and aggregate exactly as the corpus side did.
//
// The windows go through the engine's embed step, as the corpus's do (engine.Windows: cache
// lookup, the GN for the misses), and the vector is made by the same publish step
// (engine.Aggregation.Vector). The windows are looked up in the corpus's chunk store, read
// only and never locked (a shardcache.Reader beside a running pipeline; in distributed mode a
// replica of the cluster's store this process keeps, or reads beside whoever keeps it), so a
// corpus document costs no GN pass. What the GN embeds for a query stays out of that store --
// client data is not corpus data, and no row or manifest is written under a client's id -- and
// goes into a bounded in-memory cache of the query side's own instead (an LRU, so a repeated
// query costs no GN pass either).
package query

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/gn"
)

// Options tune how the embedder opens its parts.
type Options struct {
	// NoCache embeds every window with the GN: neither the corpus's chunk store nor the query
	// cache is read (a measurement's baseline).
	NoCache bool
	// QueryCacheWindows bounds the in-memory cache of the query windows the corpus store
	// lacks, in windows (about 4*dim+100 bytes each); 0 = none, every such window goes to the
	// GN each time (a one-shot search has no use for one; serve's default is
	// DefaultQueryCacheWindows).
	QueryCacheWindows int
	// ReplicaWait bounds how long Open waits, in distributed mode, for the replica of the
	// cluster's chunk store it keeps to catch up (to the topics' end offsets at Open) before
	// queries are answered; it goes on following afterwards. 0 = DefaultReplicaWait, negative
	// = no wait.
	ReplicaWait time.Duration
	Logger      *slog.Logger
}

// DefaultReplicaWait is Options.ReplicaWait when left 0.
const DefaultReplicaWait = 30 * time.Second

// Embedder makes query vectors. It is safe for concurrent use: concurrent queries share the
// GN's batches, and identical windows in flight share one pass.
type Embedder struct {
	params   chunk.Params
	anchored bool
	gn       gn.Identity
	parts    *parts.Parts
	store    *store
	batcher  *gn.Batcher
	win      *engine.Windows
	agg      engine.Aggregation
	log      *slog.Logger
	// CacheNote names the chunk store queries read, as it is used.
	CacheNote   string
	closeCorpus func() error

	c         engine.Counters // the embed step's counts
	queries   atomic.Int64
	closeOnce sync.Once
}

// Stats count the work done since Open.
type Stats struct {
	Queries, Windows, CacheHits, GNWindows, CacheCorrupt int64
	// QueryCacheHits counts the windows of CacheHits found in the query cache; QueryCacheHeld
	// is how many windows it holds now.
	QueryCacheHits, QueryCacheHeld int64
}

// Result is one query document's vectors and what they cost.
type Result struct {
	// Vector holds the document's vectors as a sink would receive them: Vector in the
	// aggregation's space, GNVector the GN mean-pool beside a REIGN vector.
	Vector    schemas.DocVector
	Windows   int // windows cut
	CacheHits int // found in the corpus's chunk store or the query cache
	GNWindows int // embedded by the GN now (the rest shared an identical window in flight)
}

// Open opens the parts of cfg a query needs and the corpus's chunk store, which it only reads:
// it never waits for, or blocks, a pipeline writing it.
func Open(ctx context.Context, cfg *pipelines.Config, o Options) (*Embedder, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	pp, err := parts.Open(cfg, parts.Want{Embed: true, Tokenizer: true, Aggregator: true})
	if err != nil {
		return nil, err
	}
	e := &Embedder{
		params: pp.Params, anchored: cfg.Chunking.Mode == "anchored", gn: pp.GN, parts: pp, store: &store{},
		agg: engine.Aggregation{Aggregator: pp.Aggregator, Companion: pp.Companion}, log: log,
		CacheNote: "not used (no cache asked for): every query window goes to the GN",
	}
	fail := func(err error) (*Embedder, error) {
		if e.closeCorpus != nil {
			err = errors.Join(err, e.closeCorpus())
		}
		return nil, errors.Join(err, pp.Close())
	}
	if !o.NoCache {
		if e.store.corpus, e.CacheNote, e.closeCorpus, err = openCorpus(ctx, cfg, pp, o.ReplicaWait, log); err != nil {
			return fail(err)
		}
		if n := o.QueryCacheWindows; n > 0 {
			e.store.recent = newLRU(n)
			e.CacheNote += fmt.Sprintf("; query windows it lacks: an in-memory cache of %d windows", n)
		}
	}
	if e.batcher, err = gn.NewBatcher(pp.Model, gn.BatcherOptions{
		TokenBudget: cfg.Batching.TokenBudget, MaxBatch: cfg.Batching.MaxBatch, MaxWait: cfg.Batching.MaxWait.Duration,
	}); err != nil {
		return fail(err)
	}
	// NoStore without a query cache: nothing a query embeds is kept anywhere.
	wo := engine.WindowsOptions{GN: e.batcher, Dim: pp.GN.Dim, Counters: &e.c, Logger: log, NoStore: e.store.recent == nil}
	if !o.NoCache {
		wo.Cache = e.store
	}
	if e.win, err = engine.NewWindows(wo); err != nil {
		return fail(errors.Join(err, e.batcher.Close()))
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
	st := Stats{
		Queries: e.queries.Load(), Windows: e.c.Windows.Load(), CacheHits: e.c.CacheHits.Load(),
		GNWindows: e.c.GNWindows.Load(), CacheCorrupt: e.c.CacheCorrupt.Load(),
	}
	if r := e.store.recent; r != nil {
		st.QueryCacheHits, st.QueryCacheHeld = r.hits.Load(), int64(r.len())
	}
	return st
}

// NoTokensError is a query whose text cuts into no window: empty once the GN's tokenizer is
// done with it (blank, or only characters its vocabulary drops). The caller's to fix, not a
// server fault.
type NoTokensError struct{ Query string }

func (e *NoTokensError) Error() string {
	return fmt.Sprintf("query %s: no text to embed (the document has no tokens)", e.Query)
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
		return nil, &NoTokensError{Query: name(doc)}
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

// Close stops the GN batcher and the corpus store (a replica's follower flushes and
// checkpoints) and releases every part.
func (e *Embedder) Close() error {
	var err error
	e.closeOnce.Do(func() {
		err = e.batcher.Close()
		if e.closeCorpus != nil {
			err = errors.Join(err, e.closeCorpus())
		}
		err = errors.Join(err, e.parts.Close())
	})
	return err
}

func name(d schemas.Document) string {
	if d.ID != "" {
		return d.ID
	}
	return "(no id)"
}
