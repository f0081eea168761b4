// Package query turns one query document into the vectors the pipeline would publish for it,
// through the same parts as a run: the GN's tokenizer, the configured windows, the chunk cache,
// the GN for the windows the cache lacks, and the configured aggregation. `reignpipe search` and
// `reignpipe serve` stand on it: a long document's REIGN vector can only be made this way, so
// the query side must cut and aggregate exactly as the corpus side did.
//
// Query windows are content-addressed like any other, so the ones the GN embeds are added to
// the chunk cache (a second query of the same document costs no GN pass), but no manifest is
// written: a query is not a corpus document, and re-aggregation and training, which walk the
// manifests, never see it.
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
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
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
// GN's batches.
type Embedder struct {
	params    chunk.Params
	anchored  bool
	gn        gn.Identity
	parts     *parts.Parts
	cache     *shardcache.Cache // nil without a cache
	batcher   *gn.Batcher
	agg, comp aggregate.Aggregator
	log       *slog.Logger
	// CacheNote says why the cache is not used ("" when it is).
	CacheNote string

	stats       Stats
	closeOnce   sync.Once
	unflushed   atomic.Int64 // windows added to the cache since the last Flush
	flushFailed atomic.Int64
}

// Stats count the work done since Open.
type Stats struct {
	Queries, Windows, CacheHits, GNWindows atomic.Int64
}

// Result is one query document's vectors and what they cost.
type Result struct {
	// Vector holds the document's vectors as a sink would receive them: Vector in the
	// aggregation's space, GNVector the GN mean-pool beside a REIGN vector.
	Vector    schemas.DocVector
	Windows   int // windows cut
	CacheHits int // found in the chunk cache
	GNWindows int // embedded by the GN now
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
	return &Embedder{
		params: pp.Params, anchored: cfg.Chunking.Mode == "anchored", gn: pp.GN, parts: pp, cache: pp.Cache,
		batcher: b, agg: pp.Aggregator, comp: pp.Companion, log: log, CacheNote: note,
	}, nil
}

// Space is the aggregation's vector space; GNSpace the mean-pool space published beside it
// ("" when the aggregation is the mean-pool itself).
func (e *Embedder) Space() string { return e.agg.Space() }

// GNSpace is the space of the GN mean-pool vector published beside a REIGN vector, or "".
func (e *Embedder) GNSpace() string {
	if e.comp == nil {
		return ""
	}
	return e.comp.Space()
}

// Stats are the counters since Open.
func (e *Embedder) Stats() *Stats { return &e.stats }

// Embed computes doc's vectors. A document that cuts into no window cannot be searched for
// (the runner would dead-letter it the same way).
func (e *Embedder) Embed(ctx context.Context, doc schemas.Document) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	windows, nTokens := e.params.Cut(e.parts.Tokenizer, doc.Text, e.anchored)
	if nTokens == 0 {
		return nil, fmt.Errorf("query %s: no text to embed (the document has no tokens)", name(doc))
	}
	dim := e.gn.Dim
	buf := make([]float32, len(windows)*dim)
	emb := make([][]float32, len(windows))
	keys := make([]uint64, len(windows))
	res := &Result{Windows: len(windows)}
	var misses []int
	for i, w := range windows {
		emb[i] = buf[i*dim : (i+1)*dim : (i+1)*dim]
		keys[i] = chunk.Key(e.gn.Fingerprint, e.params, w)
		if e.cache != nil {
			hit, err := e.cache.Get(keys[i], emb[i])
			if err != nil && !errors.Is(err, shardcache.ErrCorrupt) {
				return nil, fmt.Errorf("query %s: chunk cache lookup of window %d: %w", name(doc), i, err)
			}
			if hit {
				res.CacheHits++
				continue
			}
		}
		misses = append(misses, i)
	}
	if err := e.embedMisses(ctx, windows, emb, misses); err != nil {
		return nil, fmt.Errorf("query %s: %w", name(doc), err)
	}
	res.GNWindows = len(misses)
	v, err := aggregate.Vectors(e.agg, e.comp, emb)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", name(doc), err)
	}
	v.DocID, v.Title, v.Source, v.Version = doc.ID, doc.Title, doc.Source, doc.Version
	v.ContentHash, v.NChunks, v.NTokens = doc.ContentHash(), len(windows), nTokens
	res.Vector = v
	if e.cache != nil {
		for _, i := range misses {
			added, err := e.cache.Add(shardcache.Row{Key: keys[i], DocID: doc.ID, ChunkIndex: int32(i), NTokens: int32(len(windows[i]) - 2), Embedding: emb[i]})
			if err != nil {
				// The vectors are right; only the saving for the next query is lost.
				e.log.Warn("query windows not added to the chunk cache", "doc", name(doc), "err", err)
				break
			}
			if added {
				e.unflushed.Add(1)
			}
		}
	}
	e.stats.Queries.Add(1)
	e.stats.Windows.Add(int64(res.Windows))
	e.stats.CacheHits.Add(int64(res.CacheHits))
	e.stats.GNWindows.Add(int64(res.GNWindows))
	return res, nil
}

// embedMisses runs the GN on windows[misses] through the shared batcher and waits for all.
func (e *Embedder) embedMisses(ctx context.Context, windows [][]int32, emb [][]float32, misses []int) error {
	if len(misses) == 0 {
		return nil
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	for _, i := range misses {
		wg.Add(1)
		idx := i
		err := e.batcher.Submit(ctx, gn.Request{Tokens: windows[i], Out: emb[i], Done: func(err error) {
			if err != nil {
				fail(fmt.Errorf("GN on window %d: %w", idx, err))
			}
			wg.Done()
		}})
		if err != nil {
			wg.Done()
			fail(fmt.Errorf("GN on window %d: %w", idx, err))
			break
		}
	}
	// A caller that stops waiting (a request past its timeout) leaves the windows to finish in
	// the batcher; they write into buffers nothing reads any more.
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		return ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	return first
}

// Flush makes the windows added to the cache durable, so the next query finds them.
func (e *Embedder) Flush() error {
	if e.cache == nil || e.unflushed.Load() == 0 {
		return nil
	}
	if err := e.cache.Flush(); err != nil {
		e.flushFailed.Add(1)
		return fmt.Errorf("chunk cache flush: %w", err)
	}
	e.unflushed.Store(0)
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
