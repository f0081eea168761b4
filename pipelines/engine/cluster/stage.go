package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	kafkaclient "github.com/reignpipe/reignpipe/internal/kafka"
	"github.com/reignpipe/reignpipe/internal/promtext"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/engine/launch"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/pipelines/engine/replica"
	"github.com/reignpipe/reignpipe/pipelines/engine/runner"
	"github.com/reignpipe/reignpipe/pipelines/engine/runstate"
	"github.com/reignpipe/reignpipe/schemas"
)

// StageNames are the processes of distributed mode and what each does; "process" is embed and
// aggregate in one process (raw topic → vectors), for clusters where the chunk topic is not
// worth its bytes.
var StageNames = map[string]string{
	"ingest":    "source connector → <topics>.raw",
	"embed":     "<topics>.raw → chunking, GN, chunk cache → <topics>.chunks",
	"aggregate": "<topics>.chunks → REIGN or mean-pool → sinks",
	"process":   "<topics>.raw → chunking, GN, cache, aggregation → sinks",
	"replica":   "<topics>.windows + <topics>.manifests → a chunk cache kept in step (no GN)",
}

// rawFormats maps transport.kafka.raw_format to the decoder of the raw topic's values.
var rawFormats = map[string]func(pipelines.SourceConfig) kafka.Decoder{
	"json": func(pipelines.SourceConfig) kafka.Decoder { return kafka.RawJSON },
	"uspto-xml": func(c pipelines.SourceConfig) kafka.Decoder {
		return func(v []byte) (schemas.Document, string, error) { return uspto.DecodeXML(v, components.Sections(c)) }
	},
}

// StageOptions tune one stage process.
type StageOptions struct {
	// IdleExit ends the stage after no input arrived for this long (0: run until cancelled).
	IdleExit time.Duration
	// FromScratch (ingest) forgets the source checkpoint.
	FromScratch bool
	// ReplicaMaxLag (embed, process): records the chunk store replica may still be behind
	// when the worker joins the consumer group; 0 means DefaultReplicaMaxLag, < 0 none.
	ReplicaMaxLag int64
	// ReplicaCheckpointEvery (embed, process, replica): store records applied between two
	// flushes of the replica and its checkpoint, besides the one every 2 seconds; 0 means
	// replica.DefaultFlushRecords. Lower makes a long restore that is killed resume closer to
	// where it stopped, at the cost of smaller shards.
	ReplicaCheckpointEvery int
}

// Summary is a stage's outcome, as the JSON line a command prints.
type Summary interface{ JSON() []byte }

// Stage runs one stage of a pipeline with transport.type: kafka and returns its summary (also
// written to run.summary when set); the summary is nil when the stage failed before it started.
func Stage(ctx context.Context, cfg *pipelines.Config, name string, o StageOptions) (Summary, error) {
	if StageNames[name] == "" {
		return nil, fmt.Errorf("no stage %q", name)
	}
	client, err := kafkaClient(cfg.Transport.Kafka)
	if err != nil {
		return nil, fmt.Errorf("transport.kafka: %w", err)
	}
	e := &stageEnv{cfg: cfg, client: client, log: slog.Default().With("stage", name)}
	if err := e.ensureTopics(ctx); err != nil {
		return nil, err
	}
	dlp, err := e.producer(cfg.Transport.Kafka.DeadLetterTopic())
	if err != nil {
		return nil, err
	}
	dl := kafka.NewDeadLetterTopic(dlp)
	defer dl.Close(context.Background())
	e.log.Info("stage starting", "does", StageNames[name], "brokers", cfg.Transport.Kafka.Brokers, "topics", cfg.Transport.Kafka.Topics)

	switch name {
	case "replica":
		return e.replicaStage(ctx, o)
	case "ingest":
		return e.ingest(ctx, dl, o)
	case "aggregate":
		return e.aggregate(ctx, dl, o)
	}
	// embed and process: the embedded runner with a Kafka source, its cache a replica of the
	// cluster's chunk store (store.go); the consumer joins the group once the replica caught up.
	var cons atomic.Pointer[kafkaclient.Consumer]
	sw := &storeWorker{e: e, maxLag: o.ReplicaMaxLag, flushRecords: o.ReplicaCheckpointEvery}
	if sw.maxLag == 0 {
		sw.maxLag = DefaultReplicaMaxLag
	}
	ro := launch.Options{
		OpenSource: func() (connectors.Source, error) {
			c, err := e.consumer(name, cfg.Transport.Kafka.RawTopic())
			if err != nil {
				return nil, err
			}
			cons.Store(c)
			return idleSource{DocSource: kafka.NewDocSource(c, rawFormats[cfg.Transport.Kafka.RawFormat](cfg.Source)), idle: o.IdleExit}, nil
		},
		Store: sw.attach, DeadLetter: dl, Stage: name,
		// process: a vector record is acknowledged only after the windows and manifest of its
		// document, as the embed stage's chunk records are.
		KafkaSink: func(s pipelines.SinkConfig) (connectors.Sink, error) {
			vs, err := e.kafkaSink(s)
			if err != nil {
				return nil, err
			}
			return &replica.OrderedVectorSink{Inner: vs, Pub: func() *replica.Publisher { return sw.pub }, MaxRecordBytes: cfg.Transport.Kafka.MaxRecordBytes}, nil
		},
		Metrics: func() map[string]float64 {
			m := map[string]float64{"reignpipe_dead_letters_published_total": float64(dl.Count())}
			if c := cons.Load(); c != nil {
				m["reignpipe_consumer_lag"] = float64(c.Lag())
			}
			sw.metrics(m)
			return m
		},
	}
	if name == "embed" {
		p, err := e.producer(cfg.Transport.Kafka.ChunksTopic())
		if err != nil {
			return nil, err
		}
		cs := kafka.NewChunkSink(p)
		defer cs.Close(context.Background())
		// Its records are acknowledged only after the windows and manifests of their documents.
		sw.ordered = &replica.OrderedChunkSink{Inner: cs, MaxRecordBytes: cfg.Transport.Kafka.MaxRecordBytes}
		ro.ChunkSinks, ro.NoVectors = []runner.ChunkSink{sw.ordered}, true
	}
	sum, err := launch.Run(ctx, cfg, ro)
	if sum == nil {
		return nil, err
	}
	return sum, err
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

// vectorProducer is the producer of a kafka sink: one that never fragments for the JSON
// formats, whose readers are not reignpipe.
func (e *stageEnv) vectorProducer(topic, format string) (*kafkaclient.Producer, error) {
	k := e.cfg.Transport.Kafka
	return kafkaclient.NewProducer(e.client, kafkaclient.ProducerOptions{Topic: topic, MaxRecordBytes: k.MaxRecordBytes, Compression: k.Compression,
		NoFragment: format != "" && format != kafka.FormatRPDV, Logger: e.log})
}

func (e *stageEnv) consumer(stage, topic string) (*kafkaclient.Consumer, error) {
	k := e.cfg.Transport.Kafka
	return kafkaclient.NewConsumer(e.client, kafkaclient.ConsumerOptions{Group: k.GroupFor(stage), Topics: []string{topic}, StartOffset: k.StartOffset, Logger: e.log})
}

// ensureTopics creates the pipeline's topics when missing and checks existing ones
// (EnsureTopics, topics.go).
func (e *stageEnv) ensureTopics(ctx context.Context) error {
	return EnsureTopics(ctx, e.cfg, e.client)
}

func vectorTopic(k pipelines.KafkaConfig, s pipelines.SinkConfig) string {
	if t := components.KafkaSettings(s).Topic; t != "" {
		return t
	}
	return k.VectorsTopic()
}

func (e *stageEnv) kafkaSink(s pipelines.SinkConfig) (connectors.Sink, error) {
	format := components.KafkaSettings(s).Format
	p, err := e.vectorProducer(vectorTopic(e.cfg.Transport.Kafka, s), format)
	if err != nil {
		return nil, err
	}
	vs, err := kafka.NewVectorSinkFormat(p, format)
	if err != nil {
		p.Close(context.Background())
		return nil, err
	}
	return vs, nil
}

func (e *stageEnv) ingest(ctx context.Context, dl connectors.DeadLetterSink, o StageOptions) (Summary, error) {
	cfg := e.cfg
	src, err := launch.OpenSource(cfg, o.FromScratch)
	if err != nil {
		return nil, err
	}
	defer src.Close(context.Background())
	p, err := e.producer(cfg.Transport.Kafka.RawTopic())
	if err != nil {
		return nil, err
	}
	out := kafka.NewRawSink(p)
	defer out.Close(context.Background())
	ckPath := runstate.CheckpointPath(cfg.Run.StateDir, cfg.Name+".ingest")
	if o.FromScratch {
		_ = os.Remove(ckPath)
	}
	ck, err := runstate.LoadCheckpoint(ckPath)
	if err != nil {
		return nil, err
	}
	if why, err := launch.ResumeCheckpoint(&ck, cfg); err != nil {
		return nil, err
	} else if why != "" {
		e.log.Warn("the input changed since the checkpoint; ingesting from the beginning", "why", why, "source", cfg.Source.Path)
	}
	var c Counters
	stop, err := e.serveMetrics("ingest", &c, nil)
	if err != nil {
		return nil, err
	}
	defer stop()
	start := time.Now()
	err = Ingest(ctx, src, out, dl, IngestOptions{
		LoopOptions: LoopOptions{CommitEvery: cfg.Run.CommitEvery, CommitInterval: cfg.Run.CommitInterval.Duration, IdleExit: o.IdleExit, Logger: e.log},
		Resume:      ck.Watermark,
		OnCommit: func(w int64) error {
			ck.Watermark = w
			return ck.Save(ckPath)
		},
	}, &c)
	return e.summary(ctx, "ingest", &c, src.Stats(), start, err), err
}

func (e *stageEnv) aggregate(ctx context.Context, dl connectors.DeadLetterSink, o StageOptions) (Summary, error) {
	cfg := e.cfg
	// The GN is identified for its fingerprint and dimension (the space chunk embeddings must
	// come from); it runs no forward pass here, so no GN session is made.
	pp, err := parts.Open(cfg, parts.Want{Aggregator: true})
	if err != nil {
		return nil, err
	}
	defer pp.Close()
	gnID, params, agg, companion := pp.GN, pp.Params, pp.Aggregator, pp.Companion
	outs, _, closeSinks, err := launch.OpenSinks(ctx, cfg, launch.SinkEnv(gnID, params, agg, companion, e.kafkaSink))
	if err != nil {
		return nil, err
	}
	defer closeSinks()
	cons, err := e.consumer("aggregate", cfg.Transport.Kafka.ChunksTopic())
	if err != nil {
		return nil, err
	}
	defer cons.Close(context.Background())
	var c Counters
	stop, err := e.serveMetrics("aggregate", &c, func() map[string]float64 {
		return map[string]float64{"reignpipe_consumer_lag": float64(cons.Lag())}
	})
	if err != nil {
		return nil, err
	}
	defer stop()
	start := time.Now()
	err = Aggregate(ctx, AggregateParts{
		Input: kafka.NewChunkSource(cons), Aggregator: agg, GNMeanPool: companion, Sinks: outs, DeadLetter: dl,
		Space: Space{Fingerprint: gnID.Fingerprint, Dim: gnID.Dim, K: params.K, S: params.S},
	}, LoopOptions{CommitEvery: cfg.Run.CommitEvery, CommitInterval: cfg.Run.CommitInterval.Duration, IdleExit: o.IdleExit, Logger: e.log}, &c)
	return e.summary(ctx, "aggregate", &c, connectors.SourceStats{}, start, err), err
}

func (e *stageEnv) serveMetrics(stage string, c *Counters, extra func() map[string]float64) (func(), error) {
	if e.cfg.Run.MetricsAddr == "" {
		return func() {}, nil
	}
	stop, err := promtext.Serve(e.cfg.Run.MetricsAddr, MetricsHandler(promtext.Labels{Pipeline: e.cfg.Name, Stage: stage}, c, extra))
	if err != nil {
		return nil, fmt.Errorf("metrics on %s: %w", e.cfg.Run.MetricsAddr, err)
	}
	return stop, nil
}

// summary is the stage's summary (also written to run.summary when set). A stage stopped by a
// signal says "interrupted", as Run and the embed stage do.
func (e *stageEnv) summary(ctx context.Context, stage string, c *Counters, st connectors.SourceStats, start time.Time, runErr error) StageSummary {
	s := StageSummary{
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
	launch.WriteSummary(e.cfg, s.JSON(), e.log)
	return s
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
