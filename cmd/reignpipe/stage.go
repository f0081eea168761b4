package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	kafkaclient "github.com/reignpipe/reignpipe/internal/kafka"
	"github.com/reignpipe/reignpipe/internal/promtext"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/distributed"
	"github.com/reignpipe/reignpipe/pipelines/embedded"
	"github.com/reignpipe/reignpipe/pipelines/parts"
	"github.com/reignpipe/reignpipe/pipelines/runstate"
	"github.com/reignpipe/reignpipe/schemas"
)

// stageNames are the processes of distributed mode; "process" is embed and aggregate in one
// process (raw topic → vectors), for clusters where the chunk topic is not worth its bytes.
var stageNames = map[string]string{
	"ingest":    "source connector → <topics>.raw",
	"embed":     "<topics>.raw → chunking, GN, chunk cache → <topics>.chunks",
	"aggregate": "<topics>.chunks → REIGN or mean-pool → sinks",
	"process":   "<topics>.raw → chunking, GN, cache, aggregation → sinks",
}

// rawFormats maps transport.kafka.raw_format to the decoder of the raw topic's values.
var rawFormats = map[string]func(pipelines.SourceConfig) kafka.Decoder{
	"json": func(pipelines.SourceConfig) kafka.Decoder { return kafka.RawJSON },
	"uspto-xml": func(c pipelines.SourceConfig) kafka.Decoder {
		return func(v []byte) (schemas.Document, string, error) { return uspto.DecodeXML(v, c.Sections) }
	},
}

type stageFlags struct {
	idleExit    time.Duration
	cacheDir    string
	metricsAddr string
	fromScratch bool
}

func cmdStage(ctx context.Context, args []string) error {
	fs := newFlagSet("stage", args)
	var f stageFlags
	fs.DurationVar(&f.idleExit, "idle-exit", 0, "exit after no input arrived for this long (0: run until SIGTERM)")
	fs.StringVar(&f.cacheDir, "cache-dir", "", "override cache.dir (each embed worker keeps its own chunk cache)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "override run.metrics_addr (one port per process)")
	fs.BoolVar(&f.fromScratch, "from-scratch", false, "ingest: forget the source checkpoint")
	logFormat := fs.String("log-format", "text", "text or json")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || stageNames[pos[0]] == "" {
		return usageError("stage", "give a stage name and one pipeline file")
	}
	if err := setupLogger(*logFormat); err != nil {
		return err
	}
	cfg, err := pipelines.Load(pos[1])
	if err != nil {
		return err
	}
	if cfg.Transport.Type != "kafka" {
		return fmt.Errorf("%s: stages run with transport.type: kafka (this pipeline is %s; use reignpipe run)", pos[1], cfg.Transport.Type)
	}
	if f.cacheDir != "" {
		cfg.Cache.Dir = f.cacheDir
	}
	if f.metricsAddr != "" {
		cfg.Run.MetricsAddr = f.metricsAddr
	}
	return runStage(ctx, cfg, pos[0], f)
}

// kafkaClient turns the transport section into a client configuration.
func kafkaClient(k pipelines.KafkaConfig) (kafkaclient.ClientConfig, error) {
	c := kafkaclient.ClientConfig{Brokers: k.Brokers, ClientID: k.ClientID}
	if t := k.TLS; t != nil {
		c.TLS = &kafkaclient.TLSConfig{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	}
	if s := k.SASL; s != nil {
		pw, err := k.SASLPassword()
		if err != nil {
			return c, err
		}
		c.SASL = &kafkaclient.SASLConfig{Mechanism: s.Mechanism, Username: s.Username, Password: pw}
	}
	return c, c.Validate()
}

// stageEnv is what every stage shares: the client, topic creation, producers.
type stageEnv struct {
	cfg    *pipelines.Config
	client kafkaclient.ClientConfig
	log    *slog.Logger
}

func (e *stageEnv) producer(topic string) (*kafkaclient.Producer, error) {
	k := e.cfg.Transport.Kafka
	return kafkaclient.NewProducer(e.client, kafkaclient.ProducerOptions{Topic: topic, MaxRecordBytes: k.MaxRecordBytes, Compression: k.Compression, Logger: e.log})
}

func (e *stageEnv) consumer(stage, topic string) (*kafkaclient.Consumer, error) {
	k := e.cfg.Transport.Kafka
	return kafkaclient.NewConsumer(e.client, kafkaclient.ConsumerOptions{Group: k.GroupFor(stage), Topics: []string{topic}, StartOffset: k.StartOffset, Logger: e.log})
}

// ensureTopics creates the pipeline's topics when missing. The vector topic is compacted: it is
// keyed by document id, so it converges to the newest vector of every document.
func (e *stageEnv) ensureTopics(ctx context.Context) error {
	k := e.cfg.Transport.Kafka
	spec := func(name string, conf map[string]string) kafkaclient.TopicSpec {
		return kafkaclient.TopicSpec{Name: name, Partitions: k.Partitions, ReplicationFactor: k.ReplicationFactor, Config: conf}
	}
	specs := []kafkaclient.TopicSpec{spec(k.RawTopic(), nil), spec(k.ChunksTopic(), nil), spec(k.DeadLetterTopic(), nil)}
	for _, s := range e.cfg.Sinks {
		if s.Type == "kafka" {
			specs = append(specs, spec(vectorTopic(k, s), map[string]string{"cleanup.policy": "compact"}))
		}
	}
	return kafkaclient.EnsureTopics(ctx, e.client, specs...)
}

func vectorTopic(k pipelines.KafkaConfig, s pipelines.SinkConfig) string {
	if s.Topic != "" {
		return s.Topic
	}
	return k.VectorsTopic()
}

func (e *stageEnv) kafkaSink(s pipelines.SinkConfig) (connectors.Sink, error) {
	p, err := e.producer(vectorTopic(e.cfg.Transport.Kafka, s))
	if err != nil {
		return nil, err
	}
	return kafka.NewVectorSink(p), nil
}

func runStage(ctx context.Context, cfg *pipelines.Config, name string, f stageFlags) error {
	client, err := kafkaClient(cfg.Transport.Kafka)
	if err != nil {
		return fmt.Errorf("transport.kafka: %w", err)
	}
	e := &stageEnv{cfg: cfg, client: client, log: slog.Default().With("stage", name)}
	if err := e.ensureTopics(ctx); err != nil {
		return err
	}
	dlp, err := e.producer(cfg.Transport.Kafka.DeadLetterTopic())
	if err != nil {
		return err
	}
	dl := kafka.NewDeadLetterTopic(dlp)
	defer dl.Close(context.Background())
	e.log.Info("stage starting", "does", stageNames[name], "brokers", cfg.Transport.Kafka.Brokers, "topics", cfg.Transport.Kafka.Topics)

	switch name {
	case "ingest":
		return e.ingest(ctx, dl, f)
	case "aggregate":
		return e.aggregate(ctx, dl, f)
	}
	// embed and process: the embedded runner with a Kafka source.
	cons, err := e.consumer(name, cfg.Transport.Kafka.RawTopic())
	if err != nil {
		return err
	}
	src := kafka.NewDocSource(cons, rawFormats[cfg.Transport.Kafka.RawFormat](cfg.Source))
	w := wiring{
		source: idleSource{DocSource: src, idle: f.idleExit}, deadLetter: dl, kafkaSink: e.kafkaSink, stage: name,
		metrics: func() map[string]float64 {
			return map[string]float64{"reignpipe_consumer_lag": float64(cons.Lag()), "reignpipe_dead_letters_published_total": float64(dl.Count())}
		},
	}
	if name == "embed" {
		p, err := e.producer(cfg.Transport.Kafka.ChunksTopic())
		if err != nil {
			return err
		}
		cs := kafka.NewChunkSink(p)
		defer cs.Close(context.Background())
		w.chunkSinks, w.noVectors = []embedded.ChunkSink{cs}, true
	}
	_, err = runWith(ctx, cfg, false, w)
	return err
}

func (e *stageEnv) ingest(ctx context.Context, dl connectors.DeadLetterSink, f stageFlags) error {
	cfg := e.cfg
	src, err := openSource(cfg, f.fromScratch)
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	p, err := e.producer(cfg.Transport.Kafka.RawTopic())
	if err != nil {
		return err
	}
	out := kafka.NewRawSink(p)
	defer out.Close(context.Background())
	ckPath := runstate.CheckpointPath(cfg.Run.StateDir, cfg.Name+".ingest")
	if f.fromScratch {
		_ = os.Remove(ckPath)
	}
	ck, err := runstate.LoadCheckpoint(ckPath)
	if err != nil {
		return err
	}
	if why, err := resumeCheckpoint(&ck, cfg); err != nil {
		return err
	} else if why != "" {
		e.log.Warn("the input changed since the checkpoint; ingesting from the beginning", "why", why, "source", cfg.Source.Path)
	}
	var c distributed.Counters
	stop, err := e.serveMetrics("ingest", &c, nil)
	if err != nil {
		return err
	}
	defer stop()
	start := time.Now()
	err = distributed.Ingest(ctx, src, out, dl, distributed.IngestOptions{
		Options: distributed.Options{CommitEvery: cfg.Run.CommitEvery, CommitInterval: cfg.Run.CommitInterval.Duration, IdleExit: f.idleExit, Logger: e.log},
		Resume:  ck.Watermark,
		OnCommit: func(w int64) error {
			ck.Watermark = w
			return ck.Save(ckPath)
		},
	}, &c)
	e.summary(ctx, "ingest", &c, src.Stats(), start, err)
	return err
}

func (e *stageEnv) aggregate(ctx context.Context, dl connectors.DeadLetterSink, f stageFlags) error {
	cfg := e.cfg
	// The GN is identified for its fingerprint and dimension (the space chunk embeddings must
	// come from); it runs no forward pass here, so no GN session is made.
	pp, err := parts.Open(cfg, parts.Want{Aggregator: true})
	if err != nil {
		return err
	}
	defer pp.Close()
	gnID, params, agg, companion := pp.GN, pp.Params, pp.Aggregator, pp.Companion
	var outs []connectors.Sink
	for _, sc := range cfg.Sinks {
		var s connectors.Sink
		if sc.Type == "kafka" {
			s, err = e.kafkaSink(sc)
		} else {
			gnDim := 0
			if companion != nil {
				gnDim = companion.Dim()
			}
			s, err = sinks[sc.Type](sc, agg.Dim(), gnDim, map[string]string{
				schemas.MetaGNFingerprint: gnID.Fingerprint, schemas.MetaK: fmt.Sprint(params.K), schemas.MetaS: fmt.Sprint(params.S),
			})
		}
		if err != nil {
			return fmt.Errorf("sink %s: %w", sc.Type, err)
		}
		defer s.Close(context.Background())
		outs = append(outs, s)
	}
	cons, err := e.consumer("aggregate", cfg.Transport.Kafka.ChunksTopic())
	if err != nil {
		return err
	}
	defer cons.Close(context.Background())
	var c distributed.Counters
	stop, err := e.serveMetrics("aggregate", &c, func() map[string]float64 {
		return map[string]float64{"reignpipe_consumer_lag": float64(cons.Lag())}
	})
	if err != nil {
		return err
	}
	defer stop()
	start := time.Now()
	err = distributed.Aggregate(ctx, distributed.AggregateParts{
		Input: kafka.NewChunkSource(cons), Aggregator: agg, GNMeanPool: companion, Sinks: outs, DeadLetter: dl,
		Space: distributed.Space{Fingerprint: gnID.Fingerprint, Dim: gnID.Dim, K: params.K, S: params.S},
	}, distributed.Options{CommitEvery: cfg.Run.CommitEvery, CommitInterval: cfg.Run.CommitInterval.Duration, IdleExit: f.idleExit, Logger: e.log}, &c)
	e.summary(ctx, "aggregate", &c, connectors.SourceStats{}, start, err)
	return err
}

func (e *stageEnv) serveMetrics(stage string, c *distributed.Counters, extra func() map[string]float64) (func(), error) {
	if e.cfg.Run.MetricsAddr == "" {
		return func() {}, nil
	}
	stop, err := promtext.Serve(e.cfg.Run.MetricsAddr, distributed.MetricsHandler(promtext.Labels{Pipeline: e.cfg.Name, Stage: stage}, c, extra))
	if err != nil {
		return nil, fmt.Errorf("metrics on %s: %w", e.cfg.Run.MetricsAddr, err)
	}
	return stop, nil
}

// summary prints the stage's JSON summary line (and writes run.summary when set). A stage
// stopped by a signal says "interrupted", as `run` and the embed stage do.
func (e *stageEnv) summary(ctx context.Context, stage string, c *distributed.Counters, st connectors.SourceStats, start time.Time, runErr error) {
	s := distributed.Summary{
		Pipeline: e.cfg.Name, Stage: stage, WallSeconds: time.Since(start).Seconds(),
		Inputs: c.Inputs.Load(), Written: c.Written.Load(), DeadLetters: c.DeadLetters.Load(), Commits: c.Commits.Load(),
		Skipped: st.Skipped, Stopped: "completed",
	}
	switch {
	case runErr != nil:
		s.Stopped, s.Error = "failed", runErr.Error()
	case ctx.Err() != nil:
		s.Stopped = "interrupted"
	}
	out := s.JSON()
	if e.cfg.Run.Summary != "" {
		if err := runstate.WriteFileAtomic(e.cfg.Run.Summary, out); err != nil {
			e.log.Error("writing run summary", "err", err)
		}
	}
	os.Stdout.Write(out)
}

// idleSource ends a Kafka source (io.EOF) after no document arrived for idle, so a backfill's
// stage process exits when the work is done; idle 0 never ends it.
type idleSource struct {
	*kafka.DocSource
	idle time.Duration
}

func (s idleSource) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	if s.idle <= 0 {
		return s.DocSource.Read(ctx)
	}
	rctx, cancel := context.WithTimeout(ctx, s.idle)
	defer cancel()
	d, ack, err := s.DocSource.Read(rctx)
	if err != nil && rctx.Err() != nil && ctx.Err() == nil {
		return d, ack, io.EOF
	}
	return d, ack, err
}
