package search

import (
	"context"
	"fmt"

	"github.com/reignpipe/reignpipe/connectors/pgvector"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/schemas"
)

// pgStore answers from a pgvector sink's tables through the sink package's Searcher.
type pgStore struct {
	s    *pgvector.Searcher
	name string
}

func openPG(ctx context.Context, sc pipelines.SinkConfig) (Store, error) {
	p := components.PgvectorSettings(sc)
	table := p.Table
	if table == "" {
		table = pgvector.DefaultTable
	}
	s, err := pgvector.OpenSearcher(ctx, pgvector.SearchOptions{DSN: p.DSN, Table: table})
	if err != nil {
		return nil, err
	}
	return &pgStore{s: s, name: fmt.Sprintf("pgvector table prefix %s", table)}, nil
}

func (p *pgStore) Name() string { return p.name }
func (p *pgStore) Close() error { p.s.Close(); return nil }

func (p *pgStore) Search(ctx context.Context, space string, q []float32, k int, ex Exclude, exact bool) (*Answer, error) {
	hits, err := p.s.Search(ctx, space, q, k, pgvector.Exclude{DocID: ex.DocID, ContentHash: ex.ContentHash, ExcludeHash: ex.ByHash}, exact)
	if err != nil {
		return nil, err
	}
	a := &Answer{Store: p.name, Exact: exact, Hits: make([]Hit, len(hits))}
	for i, h := range hits {
		a.Hits[i] = Hit{DocID: h.DocID, Title: h.Title, Source: h.Source, Version: h.Version, ContentHash: h.ContentHash, Score: h.Score}
	}
	return a, nil
}

func (p *pgStore) Lookup(ctx context.Context, space, docID string) (*schemas.DocVector, error) {
	v, near, found, err := p.s.Vector(ctx, space, docID)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, notFound(docID, p.name, near)
	}
	return v, nil
}
