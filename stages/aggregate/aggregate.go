// Package aggregate turns a document's ordered chunk embeddings into its document vector.
// Each Aggregator names the vector space it writes into, so no two spaces end up unlabelled in
// one column (a REIGN vector and a GN mean-pool vector are never comparable).
package aggregate

import (
	"errors"
	"fmt"
	"math"

	"github.com/reignpipe/reignpipe/schemas"
)

// Aggregator computes one document vector from the document's chunk embeddings.
type Aggregator interface {
	// Space labels the output space, e.g. "gn-meanpool:<GN fingerprint>".
	Space() string
	// Dim is the output dimension.
	Dim() int
	// Aggregate writes the vector of a document whose chunk embeddings are chunks (in window
	// order, each of the input dimension) into out (len Dim). It does not retain its arguments
	// and is safe for concurrent use.
	Aggregate(chunks [][]float32, out []float32) error
}

// MeanPool is the chunked mean-pool of the GN chunk embeddings, L2-normalised: the paper's
// strongest simple baseline, and the default until a REIGN checkpoint is configured.
type MeanPool struct {
	dim   int
	space string
}

// NewMeanPool aggregates dim-dimensional chunk embeddings of the GN with this fingerprint.
func NewMeanPool(dim int, gnFingerprint string) (*MeanPool, error) {
	if dim <= 0 {
		return nil, fmt.Errorf("aggregate: dimension %d must be > 0", dim)
	}
	if gnFingerprint == "" {
		return nil, errors.New("aggregate: a GN fingerprint is needed to label the mean-pool space")
	}
	return &MeanPool{dim: dim, space: "gn-meanpool:" + gnFingerprint}, nil
}

func (m *MeanPool) Space() string { return m.space }
func (m *MeanPool) Dim() int      { return m.dim }

func (m *MeanPool) Aggregate(chunks [][]float32, out []float32) error {
	if len(chunks) == 0 {
		return errors.New("aggregate: document has no chunks")
	}
	if len(out) != m.dim {
		return fmt.Errorf("aggregate: output has %d dims, want %d", len(out), m.dim)
	}
	// Accumulate in float64: a 2,000-window document would otherwise lose the low bits that
	// distinguish near-duplicate documents.
	acc := make([]float64, m.dim)
	for i, c := range chunks {
		if len(c) != m.dim {
			return fmt.Errorf("aggregate: chunk %d has %d dims, want %d", i, len(c), m.dim)
		}
		for j, v := range c {
			acc[j] += float64(v)
		}
	}
	var norm float64
	for _, v := range acc {
		norm += v * v
	}
	norm = math.Sqrt(norm)
	if norm == 0 || math.IsNaN(norm) || math.IsInf(norm, 0) {
		return fmt.Errorf("aggregate: mean of %d chunks has norm %v", len(chunks), norm)
	}
	for j, v := range acc {
		out[j] = float32(v / norm)
	}
	return nil
}

// Router is an aggregator whose choice depends on the document: the runner asks it which
// aggregator (and so which space and dimension) a document of n chunks goes to.
type Router interface {
	Route(nChunks int) Aggregator
}

// SingleChunkRouter sends single-chunk documents to Single and the rest to Multi: the paper's
// advice for REIGN, which trails the bare GN on one-chunk inputs. The two outputs live in
// different spaces (and often dimensions); every vector keeps its own space label.
type SingleChunkRouter struct {
	Multi, Single Aggregator
}

// Route picks the aggregator for a document of n chunks.
func (r SingleChunkRouter) Route(n int) Aggregator {
	if n == 1 {
		return r.Single
	}
	return r.Multi
}

// Space, Dim and Aggregate describe the multi-chunk route; the runner uses Route.
func (r SingleChunkRouter) Space() string { return r.Multi.Space() }
func (r SingleChunkRouter) Dim() int      { return r.Multi.Dim() }
func (r SingleChunkRouter) Aggregate(chunks [][]float32, out []float32) error {
	return r.Route(len(chunks)).Aggregate(chunks, out)
}

// Vectors computes a document's published vectors from its chunk embeddings: agg's vector
// (routed by chunk count when agg is a Router) and, when gnMeanPool is set, the chunked
// mean-pool GN vector beside it (the same slice when agg already is that mean-pool). Only the
// vector fields and spaces of the result are set; the caller fills in the identity.
func Vectors(agg, gnMeanPool Aggregator, chunks [][]float32) (schemas.DocVector, error) {
	var v schemas.DocVector
	if rt, ok := agg.(Router); ok {
		agg = rt.Route(len(chunks))
	}
	v.Space, v.Vector = agg.Space(), make([]float32, agg.Dim())
	if err := agg.Aggregate(chunks, v.Vector); err != nil {
		return v, err
	}
	if gnMeanPool != nil {
		v.GNSpace, v.GNVector = gnMeanPool.Space(), v.Vector
		if agg != gnMeanPool {
			v.GNVector = make([]float32, gnMeanPool.Dim())
			if err := gnMeanPool.Aggregate(chunks, v.GNVector); err != nil {
				return v, err
			}
		}
	}
	return v, nil
}
