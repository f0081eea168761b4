package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/deadletter"
	"github.com/reignpipe/reignpipe/connectors/multifile"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/internal/promtext"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/embedded"
	"github.com/reignpipe/reignpipe/pipelines/parts"
	"github.com/reignpipe/reignpipe/pipelines/runstate"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/gn"
)

func cmdRun(ctx context.Context, args []string) error {
	fs := newFlagSet("run", args)
	fromScratch := fs.Bool("from-scratch", false, "forget the checkpoint and the vector outputs (the chunk cache is kept), then run")
	input := fs.String("input", "", "override source.path")
	logFormat := fs.String("log-format", "text", "text or json")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("run", "give exactly one pipeline file")
	}
	if err := setupLogger(*logFormat); err != nil {
		return err
	}
	cfg, err := pipelines.Load(pos[0])
	if err != nil {
		return err
	}
	if *input != "" {
		cfg.Source.Path = *input
	}
	_, err = run(ctx, cfg, *fromScratch)
	return err
}

// sinks maps sinks[].type to its constructor.
// gnDim > 0: vectors carry their GN mean-pool companion of that dimension. meta (GN
// fingerprint, K, S) goes into file metadata where the format has it.
var sinks = map[string]func(c pipelines.SinkConfig, dim, gnDim int, meta map[string]string) (connectors.Sink, error){
	"parquet": func(c pipelines.SinkConfig, dim, gnDim int, meta map[string]string) (connectors.Sink, error) {
		return vectorfile.NewParquet(vectorfile.ParquetOptions{Dir: c.Dir, Dim: dim, GNDim: gnDim, Metadata: meta})
	},
	"jsonl": func(c pipelines.SinkConfig, _, _ int, _ map[string]string) (connectors.Sink, error) {
		return vectorfile.NewJSONL(vectorfile.JSONLOptions{Dir: c.Dir})
	},
}

// batcherEmbedder adapts the GN batcher to the runner's WindowEmbedder.
type batcherEmbedder struct{ b *gn.Batcher }

func (e batcherEmbedder) Submit(ctx context.Context, w []int32, out []float32, done func(error)) error {
	return e.b.Submit(ctx, gn.Request{Tokens: w, Out: out, Done: done})
}

func (e batcherEmbedder) Abort(err error) { e.b.Abort(err) }

// wiring replaces parts of a configured pipeline, for the stages of distributed mode; the zero
// value is the embedded pipeline as configured.
type wiring struct {
	source     connectors.Source // instead of the configured source
	chunkSinks []embedded.ChunkSink
	// noVectors: the embed stage publishes chunk embeddings only (no aggregation, no sinks).
	noVectors  bool
	deadLetter connectors.DeadLetterSink // instead of the dead-letter file
	kafkaSink  func(pipelines.SinkConfig) (connectors.Sink, error)
	metrics    func() map[string]float64 // extra metrics (consumer lag...)
	stage      string                    // the metrics' stage label; "" = run
}

// run executes one pipeline and returns its summary (also printed and written to run.summary).
func run(ctx context.Context, cfg *pipelines.Config, fromScratch bool) (embedded.Summary, error) {
	return runWith(ctx, cfg, fromScratch, wiring{})
}

func runWith(ctx context.Context, cfg *pipelines.Config, fromScratch bool, w wiring) (sum embedded.Summary, err error) {
	log := slog.Default()
	ckPath := runstate.CheckpointPath(cfg.Run.StateDir, cfg.Name)
	if fromScratch {
		if err := os.Remove(ckPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return sum, err
		}
		for _, s := range cfg.Sinks {
			if err := clearDir(s.Dir); err != nil {
				return sum, err
			}
		}
		log.Info("from scratch: checkpoint and vector outputs removed; chunk cache kept", "cache", cfg.Cache.Dir)
	}

	// The one ONNX Runtime environment of this process, the GN, its tokenizer, the cache and
	// the aggregation; closed last, so the cache's Close error reaches the caller.
	pp, err := parts.Open(cfg, parts.Want{Embed: true, Tokenizer: true, Cache: true, Aggregator: !w.noVectors})
	if err != nil {
		return sum, err
	}
	defer func() {
		if cerr := pp.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	tok, model, cache, params := pp.Tokenizer, pp.Model, pp.Cache, pp.Params
	agg, companion := pp.Aggregator, pp.Companion
	batcher, err := gn.NewBatcher(model, gn.BatcherOptions{
		TokenBudget: cfg.Batching.TokenBudget, MaxBatch: cfg.Batching.MaxBatch, MaxWait: cfg.Batching.MaxWait.Duration,
	})
	if err != nil {
		return sum, err
	}
	batcherClosed := false
	defer func() {
		if !batcherClosed {
			batcher.Close()
		}
	}()

	src := w.source
	if src == nil {
		if src, err = openSource(cfg, fromScratch); err != nil {
			return sum, err
		}
	}
	defer src.Close(context.Background())

	var outs []connectors.Sink
	var outDirs []string
	for _, sc := range cfg.Sinks {
		if w.noVectors {
			break
		}
		if sc.Type == "kafka" {
			if w.kafkaSink == nil {
				return sum, errors.New("a kafka sink needs transport.type: kafka")
			}
			s, err := w.kafkaSink(sc)
			if err != nil {
				return sum, err
			}
			defer s.Close(context.Background())
			outs = append(outs, s)
			outDirs = append(outDirs, "kafka:"+sc.Topic)
			continue
		}
		gnDim := 0
		if companion != nil {
			gnDim = companion.Dim()
		}
		meta := map[string]string{
			schemas.MetaGNFingerprint: model.Fingerprint(), schemas.MetaK: strconv.Itoa(params.K), schemas.MetaS: strconv.Itoa(params.S),
		}
		s, err := sinks[sc.Type](sc, agg.Dim(), gnDim, meta)
		if err != nil {
			return sum, fmt.Errorf("sink %s %s: %w", sc.Type, sc.Dir, err)
		}
		defer s.Close(context.Background())
		outs = append(outs, s)
		outDirs = append(outDirs, sc.Dir)
	}
	dl, dlPath := w.deadLetter, "kafka"
	if dl == nil {
		if dl, dlPath, err = openDeadLetter(cfg); err != nil {
			return sum, err
		}
		defer dl.Close(context.Background())
	}

	ck, err := runstate.LoadCheckpoint(ckPath)
	if err != nil {
		return sum, err
	}
	sc, ok := src.(connectors.SelfCheckpointing)
	selfCheckpointing := ok && sc.SelfCheckpointing()
	if selfCheckpointing {
		ck.Watermark = 0 // the source resumes by itself (or, in memory, reads everything again)
	} else if why, err := resumeCheckpoint(&ck, cfg); err != nil {
		return sum, err
	} else if why != "" {
		log.Warn("the input changed since the checkpoint; starting from the beginning (cached windows are still reused)",
			"why", why, "source", cfg.Source.Path)
	}
	if ck.Watermark > 0 {
		log.Info("resuming after committed inputs", "inputs", ck.Watermark)
	}

	runner, err := embedded.New(embedded.Parts{
		Source: src, Tokenizer: tok, Chunking: params, Anchored: cfg.Chunking.Mode == "anchored", Fingerprint: model.Fingerprint(), Dim: model.Dim(),
		Embedder: batcherEmbedder{batcher}, Cache: cache, Aggregator: agg, GNMeanPool: companion, Sinks: outs,
		ChunkSinks: w.chunkSinks, DeadLetter: dl,
	}, embedded.Options{
		CommitEvery: cfg.Run.CommitEvery, CommitInterval: cfg.Run.CommitInterval.Duration,
		TokenizeWorkers: cfg.Run.TokenizeWorkers, Queue: cfg.Run.Queue, DrainTimeout: cfg.Run.DrainTimeout.Duration,
		MaxDocBytes: cfg.Source.MaxDocBytes, InflightBytes: cfg.Run.InflightBytes,
		Resume: ck.Watermark, Logger: log,
		OnCommit: func(w int64) error {
			if selfCheckpointing {
				// Its position is the source's own (Kafka offsets, a watched folder's state
				// file); and embed workers sharing a state folder would all write this file.
				return nil
			}
			ck.Watermark = w
			return ck.Save(ckPath)
		},
	})
	if err != nil {
		return sum, err
	}
	if cfg.Run.MetricsAddr != "" {
		stage := w.stage
		if stage == "" {
			stage = "run"
		}
		labels := promtext.Labels{Pipeline: cfg.Name, Stage: stage}
		stopMetrics, err := promtext.Serve(cfg.Run.MetricsAddr, embedded.MetricsHandler(runner, labels, w.metrics))
		if err != nil {
			return sum, fmt.Errorf("metrics on %s: %w", cfg.Run.MetricsAddr, err)
		}
		defer stopMetrics()
	}

	sum = embedded.Summary{Pipeline: cfg.Name, Started: nowUTC(), DeadLetter: dlPath, Outputs: outDirs}
	log.Info("run", "pipeline", cfg.Name, "source", cfg.Source.Path, "gn", cfg.GN.Name, "dim", model.Dim(),
		"fingerprint", model.Fingerprint(), "k", params.K, "s", params.S, "provider", cfg.GN.Provider)
	prog := embedded.StartProgress(runner, src, cfg.Run.Progress, os.Stderr)
	runErr := runner.Run(ctx)
	batcher.Close()
	batcherClosed = true
	prog.Stop()

	runner.Summarize(&sum, src.Stats())
	bs, ms := batcher.Stats(), model.Stats()
	sum.GNForward = ms.ForwardPasses
	if ms.RealTokens > 0 {
		sum.GNPadRatio = float64(ms.PaddedTokens) / float64(ms.RealTokens)
	}
	_ = bs
	switch {
	case runErr != nil:
		sum.Stopped, sum.Error = "failed", runErr.Error()
	case ctx.Err() != nil:
		sum.Stopped = "interrupted"
	default:
		sum.Stopped = "completed"
	}
	out := sum.JSON()
	if cfg.Run.Summary != "" {
		if err := runstate.WriteFileAtomic(cfg.Run.Summary, out); err != nil {
			log.Error("writing run summary", "path", cfg.Run.Summary, "err", err)
		}
	}
	os.Stdout.Write(out)
	return sum, runErr
}

// openSource opens the configured source connector.
func openSource(cfg *pipelines.Config, fromScratch bool) (connectors.Source, error) {
	newSource, ok := sources[cfg.Source.Type]
	if !ok {
		return nil, fmt.Errorf("no source connector %q", cfg.Source.Type)
	}
	cfg.Source.StateFile = filepath.Join(cfg.Run.StateDir, cfg.Name+".files.json")
	if fromScratch {
		if err := os.Remove(cfg.Source.StateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return newSource(cfg.Source)
}

// openDeadLetter opens the configured dead-letter file.
func openDeadLetter(cfg *pipelines.Config) (connectors.DeadLetterSink, string, error) {
	path := cfg.DeadLetter.Path
	if path == "" {
		path = filepath.Join(cfg.Run.StateDir, cfg.Name+".deadletter.jsonl")
	}
	dl, err := deadletter.Open(path)
	return dl, path, err
}

// clearDir removes what dir holds but not dir itself, which may be a mount point (an output
// volume of its own) that cannot be removed.
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// resumeCheckpoint keeps ck's watermark only if the files the source reads still start with
// the ones it was counted over (see runstate.Checkpoint).
func resumeCheckpoint(ck *runstate.Checkpoint, cfg *pipelines.Config) (why string, err error) {
	paths, err := multifile.Expand(cfg.Source.Path)
	if err != nil {
		return "", err
	}
	files, err := runstate.StampFiles(paths)
	if err != nil {
		return "", err
	}
	return ck.Resume(cfg.Name, cfg.Source.Path, files), nil
}
