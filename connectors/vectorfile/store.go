package vectorfile

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/schemas"
)

// Store answers queries from a parquet or jsonl sink's part files by an exact scan
// (connectors.VectorStore): every newest vector is scored, so it is right by construction and
// costs one read of the parts per query. Memory is a few dozen bytes per document (its id,
// version and score), never the vectors.
type Store struct {
	dir string
	f   folder
}

var _ connectors.VectorStore = Store{}

// NewStore answers from the part files under dir, a folder or an s3:// prefix opened through
// st (nil: local folders only).
func NewStore(st *objstore.Store, dir string) Store { return Store{dir: dir, f: folderOf(st, dir)} }

// Name says which store answers.
func (s Store) Name() string { return "files " + s.dir }

// Close releases nothing: every query reads the parts afresh.
func (s Store) Close() error { return nil }

// scanned is a document's newest row as the scan has seen it so far.
type scanned struct {
	version, title, source string
	hash                   uint64
	score                  float64
	inSpace                bool
}

// pick is the vector of v in space: its main vector or its GN mean-pool companion.
func pick(v *schemas.DocVector, space string) ([]float32, bool) {
	switch space {
	case v.Space:
		return v.Vector, true
	case v.GNSpace:
		if v.GNSpace != "" {
			return v.GNVector, true
		}
	}
	return nil, false
}

// noVectors says the sink's folder does not exist yet, in the user's terms.
func (s Store) noVectors(ctx context.Context) error {
	ok, err := s.f.exists(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s holds no vectors yet (the folder does not exist): run the pipeline first", s.dir)
	}
	return nil
}

func (s Store) Search(ctx context.Context, space string, q []float32, k int, ex schemas.Exclude, _ bool) (*schemas.Answer, error) {
	if err := s.noVectors(ctx); err != nil {
		return nil, err
	}
	docs := NewFold[scanned]()
	err := readVectors(ctx, s.f, memory.DefaultAllocator, func(v schemas.DocVector, deleted bool) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		e := scanned{version: v.Version, title: v.Title, source: v.Source, hash: v.ContentHash}
		if vec, ok := pick(&v, space); ok && !deleted {
			if len(vec) != len(q) {
				return fmt.Errorf("%s: %s has a %d-dimensional vector in space %s, the query %d", s.dir, v.DocID, len(vec), space, len(q))
			}
			e.score, e.inSpace = dot(q, vec), true
		}
		docs.Add(v.DocID, v.Version, deleted, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	a := &schemas.Answer{Store: s.Name(), Exact: true, How: "exact scan of the vector files"}
	hits := []schemas.Hit{}
	docs.Live(func(id string, e scanned) {
		if !e.inSpace {
			a.OtherSpace++
			return
		}
		a.Among++
		if ex.Excludes(id, e.hash) {
			a.Excluded++
			return
		}
		hits = append(hits, schemas.Hit{DocID: id, Title: e.title, Source: e.source, Version: e.version, ContentHash: e.hash, Score: e.score})
	})
	sortHits(hits)
	a.Hits = hits[:min(k, len(hits))]
	return a, nil
}

func (s Store) Lookup(ctx context.Context, space, docID string) (*schemas.DocVector, error) {
	if err := s.noVectors(ctx); err != nil {
		return nil, err
	}
	// The document and those its id may be short for (which a deletion may have removed too).
	docs := NewFold[schemas.DocVector]()
	err := readVectors(ctx, s.f, memory.DefaultAllocator, func(v schemas.DocVector, deleted bool) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if v.DocID == docID || strings.HasSuffix(v.DocID, ":"+docID) {
			docs.Add(v.DocID, v.Version, deleted, v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var found *schemas.DocVector
	var near []string
	docs.Live(func(id string, v schemas.DocVector) {
		if id == docID {
			found = &v
		} else {
			near = append(near, id)
		}
	})
	slices.Sort(near)
	near = near[:min(len(near), 3)]
	if found == nil {
		return nil, &connectors.NotFoundError{ID: docID, Where: s.dir, Near: near}
	}
	vec, ok := pick(found, space)
	if !ok {
		return nil, fmt.Errorf("%s in %s has no vector in space %s (its spaces: %s)", docID, s.dir, space, strings.Trim(found.Space+" "+found.GNSpace, " "))
	}
	out := *found
	out.Space, out.Vector, out.GNSpace, out.GNVector = space, vec, "", nil
	return &out, nil
}

// sortHits orders best score first, ties by ascending doc id, as the evaluator and neighbors do.
func sortHits(h []schemas.Hit) {
	slices.SortFunc(h, func(a, b schemas.Hit) int {
		if a.Score != b.Score {
			if a.Score > b.Score {
				return -1
			}
			return 1
		}
		return strings.Compare(a.DocID, b.DocID)
	})
}

func dot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	if math.IsNaN(s) {
		return math.Inf(-1)
	}
	return s
}
