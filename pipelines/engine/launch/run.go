// Package launch wires a loaded pipeline definition into a running pipeline: the embedded run
// (Run: source, chunking, GN, cache, aggregation and sinks in one process) and the stages of
// distributed mode (Stage), opening every component through the component registry. It prints
// nothing on stdout: the summaries are returned, and the command prints them.
package launch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/deadletter"
	"github.com/reignpipe/reignpipe/internal/promtext"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/pipelines/engine/reaggregate"
	"github.com/reignpipe/reignpipe/pipelines/engine/report"
	"github.com/reignpipe/reignpipe/pipelines/engine/runner"
	"github.com/reignpipe/reignpipe/pipelines/engine/runstate"
	"github.com/reignpipe/reignpipe/pipelines/registry"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// Options replace parts of a configured pipeline, for the stages of distributed mode and for
// callers that bring their own documents; the zero value runs the pipeline as configured.
type Options struct {
	// FromScratch forgets the checkpoint and the vector outputs (the chunk cache is kept).
	FromScratch bool
	Source      connectors.Source // instead of the configured source
	ChunkSinks  []connectors.ChunkSink
	// NoVectors: the run publishes chunk embeddings only (no aggregation, no sinks).
	NoVectors  bool
	DeadLetter connectors.DeadLetterSink // instead of the dead-letter file
	// KafkaSink opens a kafka vector sink; nil outside the distributed stages.
	KafkaSink func(pipelines.SinkConfig) (connectors.Sink, error)
	Metrics   func() map[string]float64 // extra metrics (consumer lag...)
	Stage     string                    // the metrics' stage label; "" = run
	// Store, when set, makes the chunk cache a replica of the cluster's store (pipelines/
	// replica): it gets the opened cache, returns once the replica has caught up, and gives the
	// cache the runner writes through, a close (its error is the run's) and the store's part
	// of the summary.
	Store func(ctx context.Context, c *shardcache.Cache) (engine.Cache, func() error, func() any, error)
	// OpenSource opens the source when Source is nil, after Store returned: an embed worker
	// joins its consumer group only once its store has caught up.
	OpenSource func() (connectors.Source, error)
}

// Run executes one pipeline in this process and returns its summary (also written to
// run.summary when set). The summary is nil when the run failed before it started; a run that
// started and failed returns both.
func Run(ctx context.Context, cfg *pipelines.Config, o Options) (_ *engine.Summary, err error) {
	log := slog.Default()
	ckPath := runstate.CheckpointPath(cfg.Run.StateDir, cfg.Name)
	if o.FromScratch {
		if err := os.Remove(ckPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		for _, s := range cfg.Sinks {
			if err := ClearDir(s.Dir()); err != nil {
				return nil, err
			}
		}
		log.Info("from scratch: checkpoint and vector outputs removed; chunk cache kept", "cache", cfg.Cache.Dir)
	}

	// The one ONNX Runtime environment of this process, the GN, its tokenizer, the cache and
	// the aggregation; closed last, so the cache's Close error reaches the caller.
	pp, err := parts.Open(cfg, parts.Want{Embed: true, Tokenizer: true, Cache: true, Aggregator: !o.NoVectors})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := pp.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	tok, model, params := pp.Tokenizer, pp.Model, pp.Params
	var cache engine.Cache = pp.Cache
	var storeSummary func() any
	if o.Store != nil {
		c, closeStore, summ, err := o.Store(ctx, pp.Cache)
		if err != nil {
			return nil, err
		}
		defer func() { // before the cache closes (deferred earlier)
			if cerr := closeStore(); cerr != nil && err == nil {
				err = cerr
			}
		}()
		cache, storeSummary = c, summ
	}
	batcher, err := gn.NewBatcher(model, gn.BatcherOptions{
		TokenBudget: cfg.Batching.TokenBudget, MaxBatch: cfg.Batching.MaxBatch, MaxWait: cfg.Batching.MaxWait.Duration,
	})
	if err != nil {
		return nil, err
	}
	batcherClosed := false
	defer func() {
		if !batcherClosed {
			batcher.Close()
		}
	}()

	src := o.Source
	if src == nil && o.OpenSource != nil {
		if src, err = o.OpenSource(); err != nil {
			return nil, err
		}
	}
	if src == nil {
		if src, err = OpenSource(ctx, cfg, o.FromScratch); err != nil {
			return nil, err
		}
	}
	defer src.Close(context.Background())

	// The sinks are the runner's once it runs (it closes them, and a close that fails fails
	// the run: pgvector's deferred index is built there); until then they are closed here.
	var outs []connectors.Sink
	var outDirs []string
	closeSinks := func() error { return nil }
	chunkSinks := o.ChunkSinks
	handedOver := false
	defer func() {
		if handedOver {
			return
		}
		if closeSinks != nil { // OpenSinks closed what it had opened when it failed
			closeSinks()
		}
		for _, s := range chunkSinks {
			s.Close(context.Background())
		}
	}()
	if !o.NoVectors {
		outs, outDirs, closeSinks, err = OpenSinks(ctx, cfg, SinkEnv(pp.GN, params, pp.Aggregator, pp.Companion, o.KafkaSink))
		if err != nil {
			return nil, err
		}
	}
	dl, dlPath := o.DeadLetter, "kafka"
	if dl == nil {
		if dl, dlPath, err = OpenDeadLetter(cfg); err != nil {
			return nil, err
		}
		defer dl.Close(context.Background())
	}

	ck, err := runstate.LoadCheckpoint(ckPath)
	if err != nil {
		return nil, err
	}
	sc, ok := src.(connectors.SelfCheckpointing)
	selfCheckpointing := ok && sc.SelfCheckpointing()
	if selfCheckpointing {
		ck.Watermark = 0 // the source resumes by itself (or, in memory, reads everything again)
	} else if why, err := ResumeCheckpoint(ctx, &ck, cfg); err != nil {
		return nil, err
	} else if why != "" {
		log.Warn("the input changed since the checkpoint; starting from the beginning (cached windows are still reused)",
			"why", why, "source", cfg.Source.Path)
	}
	if ck.Watermark > 0 {
		log.Info("resuming after committed inputs", "inputs", ck.Watermark)
	}

	rn, err := runner.New(runner.Parts{
		Source: src, Tokenizer: tok, Chunking: params, Anchored: cfg.Chunking.Mode == "anchored", Fingerprint: model.Fingerprint(), Dim: model.Dim(),
		Embedder: batcher, Cache: cache, SharedCache: o.Store != nil, Aggregation: engine.Aggregation{Aggregator: pp.Aggregator, Companion: pp.Companion},
		Sinks: outs, SinkNames: outDirs, ChunkSinks: chunkSinks, DeadLetter: dl,
	}, runner.Options{
		CommitEvery: cfg.Run.CommitEvery, CommitInterval: cfg.Run.CommitInterval.Duration,
		TokenizeWorkers: cfg.Run.TokenizeWorkers, Queue: cfg.Run.Queue, DrainTimeout: cfg.Run.DrainTimeout.Duration,
		MaxDocBytes: cfg.Source.MaxDocBytes, InflightBytes: cfg.Run.InflightBytes,
		Resume: ck.Watermark, Logger: log, TrackIDs: trackIDs(cfg, o),
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
		return nil, err
	}
	stage := o.Stage
	if stage == "" {
		stage = "run"
	}
	if cfg.Run.MetricsAddr != "" {
		labels := promtext.Labels{Pipeline: cfg.Name, Stage: stage}
		stopMetrics, err := promtext.Serve(cfg.Run.MetricsAddr, report.MetricsHandler(&rn.C, labels, o.Metrics))
		if err != nil {
			return nil, fmt.Errorf("metrics on %s: %w", cfg.Run.MetricsAddr, err)
		}
		defer stopMetrics()
	}

	sum := &engine.Summary{Pipeline: cfg.Name, Started: time.Now().UTC(), DeadLetter: dlPath, Outputs: outDirs}
	if o.Stage != "" {
		sum.Stage = o.Stage
	}
	log.Info("run", "pipeline", cfg.Name, "source", cfg.Source.Path, "gn", cfg.GN.Name, "dim", model.Dim(),
		"fingerprint", model.Fingerprint(), "k", params.K, "s", params.S, "provider", cfg.GN.Provider)
	prog := report.StartProgress(&rn.C, src.Stats, cfg.Run.Progress, os.Stderr)
	handedOver = true
	runErr := rn.Run(ctx)
	batcher.Close()
	batcherClosed = true
	prog.Stop()

	rn.Summarize(sum, src.Stats())
	if storeSummary != nil {
		sum.Store = storeSummary()
	}
	ms := model.Stats()
	sum.GNForward, sum.GNSeconds = ms.ForwardPasses, ms.ForwardTime.Seconds()
	if ms.RealTokens > 0 {
		sum.GNPadRatio = float64(ms.PaddedTokens) / float64(ms.RealTokens)
	}
	sum.Stopped = engine.StopOf(ctx, runErr, o.Stage != "")
	if runErr != nil {
		sum.Error = runErr.Error()
	}
	WriteSummary(cfg, sum.JSON(), log)
	return sum, runErr
}

// WriteSummary writes run.summary when set; a failure is logged, not returned, so it cannot
// hide the run's own outcome.
func WriteSummary(cfg *pipelines.Config, out []byte, log *slog.Logger) {
	if cfg.Run.Summary == "" {
		return
	}
	if err := runstate.WriteFileAtomic(cfg.Run.Summary, out); err != nil {
		log.Error("writing run summary", "path", cfg.Run.Summary, "err", err)
	}
}

// SinkEnv is what the vector sinks are opened with: the aggregation's dimension, the GN
// mean-pool companion's (0 without one), and the GN fingerprint, K and S for file metadata.
func SinkEnv(id gn.Identity, p chunk.Params, agg, companion aggregate.Aggregator, kafka func(pipelines.SinkConfig) (connectors.Sink, error)) registry.SinkEnv {
	env := registry.SinkEnv{Dim: agg.Dim(), Kafka: kafka, Meta: map[string]string{
		schemas.MetaGNFingerprint: id.Fingerprint, schemas.MetaK: strconv.Itoa(p.K), schemas.MetaS: strconv.Itoa(p.S),
	}}
	if companion != nil {
		env.GNDim = companion.Dim()
	}
	return env
}

// OpenSinks opens the configured vector sinks through their registered types; closeAll closes
// them. On an error the ones already opened are closed. ctx bounds the opening (a database
// sink waiting for its server): a signal ends it.
func OpenSinks(ctx context.Context, cfg *pipelines.Config, env registry.SinkEnv) (sinks []connectors.Sink, outputs []string, closeAll func() error, err error) {
	reg := components.Builtin()
	closeAll = func() error {
		var errs []error
		for _, s := range sinks {
			errs = append(errs, s.Close(context.Background()))
		}
		return errors.Join(errs...)
	}
	env.DeleteRetention = cfg.Run.DeleteRetention.Duration
	for i, sc := range cfg.Sinks {
		typ, ok := reg.Sink(sc.Type)
		if !ok {
			closeAll()
			return nil, nil, nil, fmt.Errorf("no sink connector %q", sc.Type)
		}
		env.Key = fmt.Sprintf("sinks[%d]", i)
		s, err := typ.Open(ctx, sc, env)
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		sinks, outputs = append(sinks, s), append(outputs, typ.Output(sc))
	}
	return sinks, outputs, closeAll, nil
}

// OpenSource opens the configured source connector through its registered type. A watched
// source keeps its per-file checkpoint in run.state_dir; fromScratch forgets it.
func OpenSource(ctx context.Context, cfg *pipelines.Config, fromScratch bool) (connectors.Source, error) {
	typ, ok := components.Builtin().Source(cfg.Source.Type)
	if !ok {
		return nil, fmt.Errorf("no source connector %q", cfg.Source.Type)
	}
	cfg.Source.StateFile = filepath.Join(cfg.Run.StateDir, cfg.Name+".files.json")
	cfg.Source.Pipeline = cfg.Name
	cfg.Source.StateBase = filepath.Join(cfg.Run.StateDir, cfg.Name)
	if fromScratch {
		if err := os.Remove(cfg.Source.StateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return typ.Open(ctx, cfg.Source)
}

// OpenDeadLetter opens the configured dead-letter file and returns its path.
func OpenDeadLetter(cfg *pipelines.Config) (connectors.DeadLetterSink, string, error) {
	path := cfg.DeadLetterPath()
	dl, err := deadletter.Open(path)
	return dl, path, err
}

// ClearDir removes what dir holds but not dir itself, which may be a mount point (an output
// volume of its own) that cannot be removed.
func ClearDir(dir string) error {
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

// ResumeCheckpoint keeps ck's watermark only if the files the source reads still start with
// the ones it was counted over (see runstate.Checkpoint).
func ResumeCheckpoint(ctx context.Context, ck *runstate.Checkpoint, cfg *pipelines.Config) (why string, err error) {
	objs, err := cfg.Store().List(ctx, cfg.Source.Path)
	if err != nil {
		return "", err
	}
	return ck.Resume(cfg.Name, cfg.Source.Path, runstate.StampFiles(objs)), nil
}

// ConfiguredSinks opens cfg's vector sinks as `reignpipe run` does, for the re-aggregation of a
// cached corpus (`reignpipe reaggregate --sinks`, `tune --apply`); ctx bounds their opening. A
// kafka sink needs a distributed stage's producer and is refused here as in an embedded run.
func ConfiguredSinks(ctx context.Context, cfg *pipelines.Config) reaggregate.Sinks {
	return func(id gn.Identity, agg, companion aggregate.Aggregator) ([]connectors.Sink, []string, error) {
		params := chunk.Params{K: cfg.Chunking.K, S: cfg.Chunking.S}
		sinks, outputs, _, err := OpenSinks(ctx, cfg, SinkEnv(id, params, agg, companion, nil))
		return sinks, outputs, err
	}
}

// trackIDs is how many doc ids the run remembers to count duplicates: run.duplicate_ids, but
// none for a distributed worker, whose Kafka input is read again after a rebalance -- a repeat
// there is a redelivery, not the input's (the ingest stage counts the input's).
func trackIDs(cfg *pipelines.Config, o Options) int {
	if o.OpenSource != nil {
		return 0
	}
	return cfg.Run.DuplicateIDs
}
