// Package neighbors finds the documents nearest to one document of a vector sink's output:
// dot product of the L2-normalised vectors, the document itself excluded, ranked by
// retrieval.TopK so that neighbours and the evaluator never order a tie differently (best
// score first, ties by ascending doc id).
package neighbors

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines/bench/retrieval"
	"github.com/reignpipe/reignpipe/schemas"
)

// Of picks the query document: DocID, else the first document (by id) whose title equals
// Title ignoring case, else the first document by id.
type Of struct {
	DocID, Title string
}

// Hit is one neighbour.
type Hit struct {
	DocID, Title string
	Score        float64
}

// Result is the query document and its neighbours, best first.
type Result struct {
	Query schemas.DocVector
	Among int // documents in the output, the query included
	Hits  []Hit
}

// Find ranks the latest vector of every document in the sink directory dir against the one of
// picks and returns the k best. Vectors of two spaces are never compared.
func Find(dir string, of Of, k int) (*Result, error) {
	if k < 1 {
		return nil, errors.New("neighbors: --k must be >= 1")
	}
	latest, err := vectorfile.Latest(dir)
	if err != nil {
		return nil, err
	}
	if len(latest) == 0 {
		return nil, fmt.Errorf("neighbors: no vectors in %s", dir)
	}
	ids := slices.Sorted(maps.Keys(latest))
	var q schemas.DocVector
	switch {
	case of.DocID != "":
		v, ok := latest[of.DocID]
		if !ok {
			return nil, fmt.Errorf("neighbors: no document %q in %s", of.DocID, dir)
		}
		q = v
	case of.Title != "":
		found := false
		for _, id := range ids {
			if strings.EqualFold(latest[id].Title, of.Title) {
				q, found = latest[id], true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("neighbors: no document titled %q in %s", of.Title, dir)
		}
	default:
		q = latest[ids[0]]
	}
	corpus := make([][]float32, len(ids))
	for i, id := range ids {
		v := latest[id]
		if v.Space != q.Space {
			return nil, fmt.Errorf("neighbors: %s is in space %s, %s in %s: vectors of two spaces are not comparable", q.DocID, q.Space, id, v.Space)
		}
		corpus[i] = v.Vector
	}
	hits, err := retrieval.TopK(q.Vector, corpus, ids, k, q.DocID)
	if err != nil {
		return nil, err
	}
	res := &Result{Query: q, Among: len(latest), Hits: make([]Hit, len(hits))}
	for i, h := range hits {
		res.Hits[i] = Hit{DocID: h.ID, Title: latest[h.ID].Title, Score: h.Score}
	}
	return res, nil
}
