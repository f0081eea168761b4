// Package reaggregate computes document vectors from the chunk cache alone (doc manifests and
// chunk shards), without a GN forward pass: `reignpipe reaggregate` rebuilds every vector of a
// corpus with a new aggregation, and the evaluator scores each of its systems from the windows
// that encoding left in the cache. Both read a document's chunks through Reader, so a missing
// window is found and reported the same way.
package reaggregate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// MissingError says that a document's manifest lists a window the cache does not hold (a
// quarantined shard, or a cache directory copied in part).
type MissingError struct {
	DocID  string
	Window int
	Key    uint64
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("window %d (key %016x) is not in the cache", e.Window, e.Key)
}

// Reader reads documents' chunk embeddings from a cache. It reuses its buffers from one
// document to the next, so one Reader serves one goroutine.
type Reader struct {
	cache  *shardcache.Cache
	dim    int
	chunks [][]float32
	hits   []bool
}

// NewReader reads from cache, whose chunk embeddings have dim dimensions.
func NewReader(cache *shardcache.Cache, dim int) *Reader {
	return &Reader{cache: cache, dim: dim}
}

// Chunks returns the chunk embeddings of m's windows in window order; they are valid until the
// next call. A window the cache lacks is a *MissingError.
func (r *Reader) Chunks(m shardcache.Manifest) ([][]float32, error) {
	for len(r.chunks) < len(m.Keys) {
		r.chunks = append(r.chunks, make([]float32, r.dim))
		r.hits = append(r.hits, false)
	}
	chunks, hits := r.chunks[:len(m.Keys)], r.hits[:len(m.Keys)]
	n, err := r.cache.GetMany(m.Keys, chunks, hits)
	if err != nil {
		return nil, err
	}
	if n < len(m.Keys) {
		for i, k := range m.Keys {
			if !hits[i] {
				return nil, &MissingError{DocID: m.DocID, Window: i, Key: k}
			}
		}
	}
	return chunks, nil
}

// Vectors is aggregate.Vectors over the chunks of m: agg's vector (routed by chunk count) and,
// when gnMeanPool is set, the GN mean-pool beside it. Only the vector fields are set.
func (r *Reader) Vectors(m shardcache.Manifest, agg, gnMeanPool aggregate.Aggregator) (schemas.DocVector, error) {
	chunks, err := r.Chunks(m)
	if err != nil {
		return schemas.DocVector{}, err
	}
	return aggregate.Vectors(agg, gnMeanPool, chunks)
}

// Vector is the vector agg gives the document docID, read by its manifest.
func (r *Reader) Vector(docID string, agg aggregate.Aggregator) ([]float32, error) {
	m, ok, err := r.cache.Manifest(docID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("document %s has no manifest in the cache", docID)
	}
	v, err := r.Vectors(m, agg, nil)
	if err != nil {
		return nil, fmt.Errorf("document %s: %w", docID, err)
	}
	return v.Vector, nil
}

// Summary is what `reignpipe reaggregate` prints. GNWindows is always 0: the point of the
// command is that document vectors are rebuilt from the chunk cache alone.
type Summary struct {
	Pipeline     string  `json:"pipeline"`
	WallSeconds  float64 `json:"wall_seconds"`
	Documents    int64   `json:"documents"`
	Written      int64   `json:"docs_written"`
	Failed       int64   `json:"docs_failed"` // a chunk missing from the cache, or aggregation failed
	ChunksRead   int64   `json:"chunks_read"`
	GNWindows    int64   `json:"gn_windows"`
	GNForward    int64   `json:"gn_forward_passes"`
	Space        string  `json:"vector_space"`
	Output       string  `json:"output"`
	FirstFailure string  `json:"first_failure,omitempty"`
}

// Sinks opens where re-aggregated vectors go, once the aggregation is known (its dimension and
// space; companion is the GN mean-pool published beside a REIGN vector, nil for a mean-pool
// pipeline). output names them for the summary. finish ends them: ok false means the run failed
// and what can be withdrawn is (a Parquet part never appears); it is called exactly once.
type Sinks func(id gn.Identity, agg, companion aggregate.Aggregator) (sinks []connectors.Sink, output string, finish func(ok bool) error, err error)

// ParquetSinks writes Parquet parts under dir.
func ParquetSinks(dir string) Sinks {
	return func(_ gn.Identity, agg, companion aggregate.Aggregator) ([]connectors.Sink, string, func(bool) error, error) {
		gnDim := 0
		if companion != nil {
			gnDim = companion.Dim()
		}
		sink, err := vectorfile.NewParquet(vectorfile.ParquetOptions{Dir: dir, Dim: agg.Dim(), GNDim: gnDim})
		if err != nil {
			return nil, "", nil, err
		}
		finish := func(ok bool) error {
			if !ok {
				// Nothing of a failed re-aggregation becomes visible: a partial part would read
				// as a result that lacks documents.
				sink.Abort()
				return nil
			}
			return sink.Close(context.Background())
		}
		return []connectors.Sink{sink}, dir, finish, nil
	}
}

// Run recomputes every document vector of cfg's corpus from its chunk cache with cfg's
// aggregation (e.g. a new REIGN checkpoint) into Parquet parts under outDir.
func Run(ctx context.Context, cfg *pipelines.Config, outDir string) (Summary, error) {
	return RunInto(ctx, cfg, ParquetSinks(outDir))
}

// RunInto is Run into the sinks open gives. Manifests are streamed, so memory does not grow
// with the corpus. A document whose window is missing, whose aggregation fails, or that a sink
// refuses is counted and skipped; the summary is filled in on error too. Vectors keep their
// document's id and version, so writing them again is harmless (the sinks' keyed writes).
func RunInto(ctx context.Context, cfg *pipelines.Config, open Sinks) (sum Summary, err error) {
	start := time.Now()
	sum.Pipeline = cfg.Name
	// The GN is only identified, for its fingerprint and dimension, which name the cache's
	// space; no GN session is made, so the summary's forward-pass counter stays 0.
	pp, err := parts.Open(cfg, parts.Want{Cache: true, Aggregator: true})
	if err != nil {
		return sum, err
	}
	defer pp.Close()
	agg, companion := pp.Aggregator, pp.Companion
	sum.Space = agg.Space()
	sinks, output, finish, err := open(pp.GN, agg, companion)
	if err != nil {
		return sum, err
	}
	sum.Output = output
	defer func() {
		if ferr := finish(err == nil); ferr != nil && err == nil {
			err = ferr
		}
		sum.WallSeconds = time.Since(start).Seconds()
	}()

	fail := func(docID, reason string) {
		sum.Failed++
		if sum.FirstFailure == "" {
			sum.FirstFailure = docID + ": " + reason
		}
		slog.Warn("reaggregate: document skipped", "doc", docID, "reason", reason)
	}
	rd := NewReader(pp.Cache, pp.GN.Dim)
	err = pp.Cache.ScanManifests(func(m shardcache.Manifest) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		sum.Documents++
		chunks, err := rd.Chunks(m)
		var missing *MissingError
		if errors.As(err, &missing) {
			fail(m.DocID, err.Error())
			return nil
		}
		if err != nil {
			return err
		}
		sum.ChunksRead += int64(len(m.Keys))
		v, err := aggregate.Vectors(agg, companion, chunks)
		if err != nil {
			fail(m.DocID, err.Error())
			return nil
		}
		source := m.Source
		if source == "" { // written by an older version
			source, _, _ = strings.Cut(m.DocID, ":")
		}
		v.DocID, v.Title, v.Source, v.Version, v.ContentHash = m.DocID, m.Title, source, m.Version, m.ContentHash
		v.NChunks, v.NTokens = len(m.Keys), m.NTokens
		refused, err := connectors.WriteVector(ctx, sinks, v)
		if err != nil {
			return err
		}
		if refused != nil {
			fail(m.DocID, refused.Error())
			return nil
		}
		sum.Written++
		return nil
	})
	if err != nil {
		return sum, err
	}
	for _, s := range sinks {
		if err := s.Flush(ctx); err != nil {
			return sum, err
		}
	}
	return sum, nil
}
