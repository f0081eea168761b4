package engine

import (
	"fmt"

	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
)

// Aggregation is how a pipeline turns chunk embeddings into the vectors it publishes: the
// configured aggregator (mean-pool or REIGN, routed by chunk count when it is a router) and,
// beside a REIGN vector, the GN mean-pool companion (nil for a mean-pool pipeline, whose
// vector already is that one).
type Aggregation struct {
	Aggregator, Companion aggregate.Aggregator
}

// AggregateError is a document the aggregation cannot take (no chunks, a REIGN model that
// fails on it): the document's fault, dead-lettered under stage "aggregate".
type AggregateError struct{ Err error }

func (e *AggregateError) Error() string { return e.Err.Error() }
func (e *AggregateError) Unwrap() error { return e.Err }

// Vector is d's published vector from its chunk embeddings, in window order: the one place a
// DocVector is filled, for the runner, the aggregate stage, reaggregate and the query side
// alike. An error is an *AggregateError.
func (a Aggregation) Vector(d Doc, chunks [][]float32) (schemas.DocVector, error) {
	if len(chunks) == 0 {
		return schemas.DocVector{}, &AggregateError{fmt.Errorf("document %s has no chunks", d.ID)}
	}
	v, err := aggregate.Vectors(a.Aggregator, a.Companion, chunks)
	if err != nil {
		return schemas.DocVector{}, &AggregateError{err}
	}
	v.DocID, v.Title, v.Source, v.Version = d.ID, d.Title, d.Source, d.Version
	v.ContentHash, v.NChunks, v.NTokens = d.ContentHash, len(chunks), d.NTokens
	return v, nil
}

// Space is the aggregation's vector space; GNSpace the mean-pool space published beside it
// ("" when the aggregation is the mean-pool itself).
func (a Aggregation) Space() string { return a.Aggregator.Space() }

// GNSpace is the space of the GN mean-pool vector published beside a REIGN vector, or "".
func (a Aggregation) GNSpace() string {
	if a.Companion == nil {
		return ""
	}
	return a.Companion.Space()
}
