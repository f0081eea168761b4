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
	"os"
	"strings"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/deadletter"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/pipelines/engine/report"
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
	Written      int64   `json:"docs_written"` // committed in every sink
	Failed       int64   `json:"docs_failed"`  // a chunk missing from the cache, the aggregation failing, a sink refusing: dead-lettered
	ChunksRead   int64   `json:"chunks_read"`
	GNWindows    int64   `json:"gn_windows"`
	GNForward    int64   `json:"gn_forward_passes"`
	Commits      int64   `json:"commits"`
	Space        string  `json:"vector_space"`
	Output       string  `json:"output"`
	DeadLetter   string  `json:"dead_letter,omitempty"`
	FirstFailure string  `json:"first_failure,omitempty"`
	// Sinks holds what the sinks that can tell did with the vectors (a database sink's
	// inserted, updated, unchanged rows), by output.
	Sinks      map[string]map[string]int64 `json:"sinks,omitempty"`
	PeakRSSMiB float64                     `json:"peak_rss_mib"`
}

// Sinks opens where re-aggregated vectors go, once the aggregation is known (its dimension and
// space; companion is the GN mean-pool published beside a REIGN vector, nil for a mean-pool
// pipeline); names name them for the summary and messages. The sinks are then the run's: it
// closes them (a failed run aborts what a sink can withdraw, so a Parquet part never appears
// half done).
type Sinks func(id gn.Identity, agg, companion aggregate.Aggregator) (sinks []connectors.Sink, names []string, err error)

// ParquetSinks writes Parquet parts under dir.
func ParquetSinks(dir string) Sinks {
	return func(_ gn.Identity, agg, companion aggregate.Aggregator) ([]connectors.Sink, []string, error) {
		gnDim := 0
		if companion != nil {
			gnDim = companion.Dim()
		}
		sink, err := vectorfile.NewParquet(vectorfile.ParquetOptions{Dir: dir, Dim: agg.Dim(), GNDim: gnDim})
		if err != nil {
			return nil, nil, err
		}
		return []connectors.Sink{sink}, []string{dir}, nil
	}
}

// Run recomputes every document vector of cfg's corpus from its chunk cache with cfg's
// aggregation (e.g. a new REIGN checkpoint) into Parquet parts under outDir.
func Run(ctx context.Context, cfg *pipelines.Config, outDir string) (Summary, error) {
	return RunInto(ctx, cfg, ParquetSinks(outDir))
}

// RunInto is Run into the sinks open gives, through the engine's ledger like any run: the
// vectors are committed every run.commit_every documents (and run.commit_interval), so memory
// and a database's transactions stay bounded by configuration, not by the corpus. Manifests
// are streamed. A document whose window is missing, whose aggregation fails, or that a sink
// refuses is dead-lettered (the pipeline's dead-letter file) and counted; the summary is
// filled in on error too. Vectors keep their document's id and version, so writing them again
// is harmless (the sinks' keyed writes).
func RunInto(ctx context.Context, cfg *pipelines.Config, open Sinks) (sum Summary, err error) {
	start := time.Now()
	sum.Pipeline = cfg.Name
	defer func() { sum.WallSeconds = time.Since(start).Seconds() }()
	// The GN is only identified, for its fingerprint and dimension, which name the cache's
	// space; no GN session is made, so the summary's forward-pass counter stays 0.
	pp, err := parts.Open(cfg, parts.Want{Cache: true, Scan: true, Aggregator: true})
	if err != nil {
		return sum, err
	}
	defer pp.Close()
	agg := engine.Aggregation{Aggregator: pp.Aggregator, Companion: pp.Companion}
	sum.Space = agg.Space()
	dlPath := cfg.DeadLetterPath()
	dl, err := deadletter.Open(dlPath)
	if err != nil {
		return sum, err
	}
	defer dl.Close(context.Background())
	fl := &firstFailure{DeadLetterSink: dl}
	sinks, names, err := open(pp.GN, pp.Aggregator, pp.Companion)
	if err != nil {
		return sum, err
	}
	sum.Output, sum.DeadLetter = strings.Join(names, ", "), dlPath
	var c engine.Counters
	led, err := engine.New(engine.Outputs{Vectors: sinks, Names: names, Aggregation: agg}, engine.Options{
		CommitEvery: cfg.Run.CommitEvery, CommitInterval: cfg.Run.CommitInterval.Duration, DeadLetter: fl,
	}, &c)
	if err != nil {
		return sum, err
	}
	prog := report.StartProgress(&c, nil, cfg.Run.Progress, os.Stderr)
	defer func() {
		prog.Stop()
		if cerr := led.Close(context.WithoutCancel(ctx), err != nil); cerr != nil && err == nil {
			err = cerr
		}
		sum.Documents, sum.Written, sum.Failed = c.InputsRead.Load(), c.DocsWritten.Load(), c.DocsFailed.Load()
		sum.ChunksRead, sum.Commits, sum.FirstFailure = c.Windows.Load(), c.Commits.Load(), fl.first
		var es engine.Summary
		es.Outputs = names
		engine.Summarize(&es, &c, connectors.SourceStats{}, sinks)
		sum.Sinks, sum.PeakRSSMiB = es.Sinks, es.PeakRSSMiB
	}()

	rd := NewReader(pp.Cache, pp.GN.Dim)
	wctx := context.WithoutCancel(ctx)
	var seq int64
	err = pp.Cache.ScanManifests(func(m shardcache.Manifest) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		in := engine.Input{Seq: seq, DocID: m.DocID, Source: m.Source, Position: "manifest of " + m.DocID}
		seq++
		c.InputsRead.Add(1)
		c.Processed.Add(1)
		chunks, err := rd.Chunks(m)
		var missing *MissingError
		if errors.As(err, &missing) {
			return led.Fail(wctx, in, "cache", err)
		}
		if err != nil {
			return err
		}
		c.Windows.Add(int64(len(m.Keys)))
		if err := led.Deliver(wctx, in, engine.DocOfManifest(&m), m.Keys, chunks); err != nil {
			return err
		}
		return led.CommitIfDue(wctx)
	})
	if err != nil {
		return sum, err
	}
	return sum, led.Commit(wctx)
}

// firstFailure keeps the first dead letter's document and reason for the summary.
type firstFailure struct {
	connectors.DeadLetterSink
	first string
}

func (f *firstFailure) WriteDeadLetter(ctx context.Context, d schemas.DeadLetter) error {
	if err := f.DeadLetterSink.WriteDeadLetter(ctx, d); err != nil {
		return err
	}
	if f.first == "" {
		f.first = d.DocID + ": " + d.Err
	}
	return nil
}
