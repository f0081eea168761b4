package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/parts"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// ReaggregateSummary is printed by `reignpipe reaggregate`. GNWindows is always 0: the point
// of the command is that document vectors are rebuilt from the chunk cache alone.
type ReaggregateSummary struct {
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

// cmdReaggregate recomputes every document vector of a pipeline's corpus from its chunk cache
// (doc manifests + shards) with the pipeline's aggregation, e.g. a new REIGN checkpoint.
// Manifests are streamed, so memory does not grow with the corpus.
func cmdReaggregate(ctx context.Context, args []string) error {
	fs := newFlagSet("reaggregate", args)
	out := fs.String("out", "", "directory for the new Parquet vector parts (required)")
	checkpoint := fs.String("checkpoint", "", "REIGN checkpoint (overrides aggregate.checkpoint and sets aggregate.type: reign)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *out == "" {
		return usageError("reaggregate", "--out and one pipeline file are required")
	}
	cfg, err := pipelines.Load(pos[0])
	if err != nil {
		return err
	}
	if *checkpoint != "" {
		cfg.Aggregate.Type, cfg.Aggregate.Checkpoint = "reign", *checkpoint
	}
	sum, err := reaggregate(ctx, cfg, *out)
	b, _ := json.MarshalIndent(sum, "", "  ")
	fmt.Println(string(b))
	return err
}

func reaggregate(ctx context.Context, cfg *pipelines.Config, outDir string) (sum ReaggregateSummary, err error) {
	start := time.Now()
	sum.Pipeline, sum.Output = cfg.Name, outDir
	// The GN is only identified, for its fingerprint and dimension, which name the cache's
	// space; no GN session is made, so the summary's forward-pass counter stays 0.
	pp, err := parts.Open(cfg, parts.Want{Cache: true, Aggregator: true})
	if err != nil {
		return sum, err
	}
	defer pp.Close()
	gnID, cache, agg, companion := pp.GN, pp.Cache, pp.Aggregator, pp.Companion
	sum.Space = agg.Space()
	gnDim := 0
	if companion != nil {
		gnDim = companion.Dim()
	}
	sink, err := vectorfile.NewParquet(vectorfile.ParquetOptions{Dir: outDir, Dim: agg.Dim(), GNDim: gnDim})
	if err != nil {
		return sum, err
	}
	defer func() {
		if err != nil {
			// Nothing of a failed re-aggregation becomes visible: a partial part would read
			// as a result that lacks documents.
			sink.Abort()
		} else if cerr := sink.Close(context.Background()); cerr != nil {
			err = cerr
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
	var chunks [][]float32
	var hits []bool
	err = cache.ScanManifests(func(m shardcache.Manifest) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		sum.Documents++
		for len(chunks) < len(m.Keys) {
			chunks = append(chunks, make([]float32, gnID.Dim))
			hits = append(hits, false)
		}
		n, err := cache.GetMany(m.Keys, chunks[:len(m.Keys)], hits[:len(m.Keys)])
		if err != nil {
			return err
		}
		if n < len(m.Keys) {
			for i, k := range m.Keys {
				if !hits[i] {
					fail(m.DocID, fmt.Sprintf("window %d (key %016x) is not in the cache", i, k))
					return nil
				}
			}
		}
		sum.ChunksRead += int64(len(m.Keys))
		a := agg
		if r, ok := a.(aggregate.Router); ok {
			a = r.Route(len(m.Keys))
		}
		vec := make([]float32, a.Dim())
		if err := a.Aggregate(chunks[:len(m.Keys)], vec); err != nil {
			fail(m.DocID, err.Error())
			return nil
		}
		var gnVec []float32
		var gnSpace string
		if companion != nil {
			gnSpace, gnVec = companion.Space(), vec
			if a != companion {
				gnVec = make([]float32, companion.Dim())
				if err := companion.Aggregate(chunks[:len(m.Keys)], gnVec); err != nil {
					fail(m.DocID, err.Error())
					return nil
				}
			}
		}
		source := m.Source
		if source == "" { // written by an older version
			source, _, _ = strings.Cut(m.DocID, ":")
		}
		if err := sink.Write(ctx, schemas.DocVector{
			DocID: m.DocID, Title: m.Title, Source: source, Version: m.Version, ContentHash: m.ContentHash,
			NChunks: len(m.Keys), NTokens: m.NTokens, Space: a.Space(), Vector: vec,
			GNSpace: gnSpace, GNVector: gnVec,
		}); err != nil {
			return err
		}
		sum.Written++
		return nil
	})
	if err != nil {
		return sum, err
	}
	return sum, sink.Flush(ctx)
}
