// Package search answers "which documents are like this one?" for a pipeline: the query
// document becomes a vector through the pipeline's own parts (package pipelines/serving/query: windows,
// chunk cache, GN, aggregation), then the pipeline's vector store ranks its documents against
// it -- a pgvector sink's table (HNSW, or an exact scan), or, without a database, an exact scan
// of a parquet or jsonl sink's part files. `reignpipe search` and `reignpipe serve` both ask
// through here.
package search

import (
	"context"
	"errors"
	"fmt"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/registry"
	"github.com/reignpipe/reignpipe/pipelines/serving/query"
	"github.com/reignpipe/reignpipe/schemas"
)

// Store is a pipeline's vector store as the query side sees it: the sink's
// connectors.VectorStore (a pgvector table, the vector files).
type Store = connectors.VectorStore

// Request is one search.
type Request struct {
	// Doc is a query document to embed; ID instead names a stored document whose published
	// vector is the query (nothing is embedded).
	Doc *schemas.Document
	ID  string
	K   int
	// Exact asks the database for a full scan instead of its HNSW index (the files are always
	// scanned).
	Exact bool
	// GN searches the GN mean-pool vectors published beside REIGN vectors instead of the
	// aggregation's own.
	GN bool
}

// QueryInfo describes the query as it was turned into a vector.
type QueryInfo struct {
	DocID     string `json:"doc_id"`
	Title     string `json:"title,omitempty"`
	Space     string `json:"space"`
	NChunks   int    `json:"n_chunks"`
	NTokens   int    `json:"n_tokens"`
	Windows   int    `json:"windows"`    // cut from the query (0 for a stored vector)
	CacheHits int    `json:"cache_hits"` // of those, found in the chunk cache
	GNWindows int    `json:"gn_windows"` // embedded by the GN for this query
	Stored    bool   `json:"stored"`     // the query vector was the stored one of ID
}

// Result is a search's query and answer.
type Result struct {
	Query QueryInfo `json:"query"`
	K     int       `json:"k"`
	*schemas.Answer
}

// Searcher runs searches for one pipeline.
type Searcher struct {
	Embedder *query.Embedder // nil until a document is to be embedded; see Open
	Store    Store
}

// Search runs r.
func (s *Searcher) Search(ctx context.Context, r Request) (*Result, error) {
	if r.K < 1 {
		return nil, errors.New("k must be >= 1")
	}
	if (r.Doc == nil) == (r.ID == "") {
		return nil, errors.New("give one query: a document or a stored document's id")
	}
	space := s.Embedder.Space()
	if r.GN {
		if space = s.Embedder.GNSpace(); space == "" {
			return nil, errors.New("gn: this pipeline's vectors already are the GN mean-pool (aggregate.type: meanpool); leave the GN switch off")
		}
	}
	var q *schemas.DocVector
	info := QueryInfo{Space: space}
	var ex schemas.Exclude
	if r.ID != "" {
		v, err := s.Store.Lookup(ctx, space, r.ID)
		var nf *connectors.NotFoundError
		if errors.As(err, &nf) && len(nf.Near) == 1 {
			// The id without its source prefix, and only one source has it: that document.
			v, err = s.Store.Lookup(ctx, space, nf.Near[0])
		}
		if err != nil {
			return nil, err
		}
		q, info.Stored = v, true
		ex = schemas.Exclude{DocID: v.DocID, ContentHash: v.ContentHash, ByHash: true}
	} else {
		res, err := s.Embedder.Embed(ctx, *r.Doc)
		if err != nil {
			return nil, err
		}
		v := res.Vector
		if r.GN {
			v.Space, v.Vector = v.GNSpace, v.GNVector
		}
		q = &v
		info.Windows, info.CacheHits, info.GNWindows = res.Windows, res.CacheHits, res.GNWindows
		ex = schemas.Exclude{DocID: r.Doc.ID, ContentHash: v.ContentHash, ByHash: true}
	}
	info.DocID, info.Title, info.NChunks, info.NTokens = q.DocID, q.Title, q.NChunks, q.NTokens
	ans, err := s.Store.Search(ctx, space, q.Vector, r.K, ex, r.Exact)
	if err != nil {
		return nil, err
	}
	return &Result{Query: info, K: r.K, Answer: ans}, nil
}

// Close releases the embedder and the store.
func (s *Searcher) Close() error {
	var errs []error
	if s.Embedder != nil {
		errs = append(errs, s.Embedder.Close())
	}
	if s.Store != nil {
		errs = append(errs, s.Store.Close())
	}
	return errors.Join(errs...)
}

// Options open a Searcher.
type Options struct {
	Query query.Options
	// Sink picks the store by its index in the pipeline's sinks; -1 = the first pgvector sink,
	// else the first parquet or jsonl sink.
	Sink int
}

// Open opens the pipeline's query parts and its vector store.
func Open(ctx context.Context, cfg *pipelines.Config, o Options) (*Searcher, error) {
	st, err := OpenStore(ctx, cfg, o.Sink)
	if err != nil {
		return nil, err
	}
	emb, err := query.Open(ctx, cfg, o.Query)
	if err != nil {
		return nil, errors.Join(err, st.Close())
	}
	return &Searcher{Embedder: emb, Store: st}, nil
}

// OpenStore opens the store of the pipeline's sink number i (-1: the first sink whose store
// answers from an index, a pgvector table; else the first whose vectors can be scanned, a
// parquet or jsonl folder), through the sink type's registered store.
func OpenStore(ctx context.Context, cfg *pipelines.Config, i int) (Store, error) {
	reg := components.Builtin()
	if i >= len(cfg.Sinks) {
		return nil, fmt.Errorf("the pipeline has %d sinks; sink %d does not exist", len(cfg.Sinks), i)
	}
	if i < 0 {
		i = pickSink(reg, cfg.Sinks)
		if i < 0 {
			return nil, errors.New("search needs a pgvector, parquet or jsonl sink in the pipeline's sinks; a kafka topic cannot be searched")
		}
	}
	sc := cfg.Sinks[i]
	typ, ok := reg.Sink(sc.Type)
	if !ok || typ.Store == nil {
		return nil, fmt.Errorf("sinks[%d]: a %s sink cannot be searched (pgvector, parquet and jsonl can)", i, sc.Type)
	}
	return typ.Store(ctx, sc)
}

// pickSink is the first indexed searchable sink, else the first searchable one; -1 for none.
func pickSink(reg *registry.Registry, sinks []pipelines.SinkConfig) int {
	first := -1
	for i, s := range sinks {
		typ, ok := reg.Sink(s.Type)
		if !ok || typ.Store == nil {
			continue
		}
		if typ.Indexed {
			return i
		}
		if first < 0 {
			first = i
		}
	}
	return first
}
