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
	"github.com/reignpipe/reignpipe/connectors/debezium"
	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/promtext"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/pipelines/engine/launch"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/pipelines/engine/replica"
	"github.com/reignpipe/reignpipe/pipelines/engine/report"
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

// rawFormats maps transport.kafka.raw_format to how the raw topic's records read: the decoder
// of their values, and what a null value means (in reignpipe's formats, a deletion).
var rawFormats = map[string]func(pipelines.SourceConfig) kafka.RawFormat{
	"json": func(pipelines.SourceConfig) kafka.RawFormat {
		return kafka.RawFormat{Decode: kafka.RawJSON, Null: kafka.NullDeletes}
	},
	"uspto-xml": func(c pipelines.SourceConfig) kafka.RawFormat {
		return kafka.RawFormat{Decode: func(v []byte) (schemas.Document, string, error) { return uspto.DecodeXML(v, components.Sections(c)) }, Null: kafka.NullDeletes}
	},
	// Debezium says a row is gone with a delete event (decoded as a deletion) and then sends
	// a null value so that compaction can drop the key: that one is no news.
	"debezium": func(c pipelines.SourceConfig) kafka.RawFormat {
		return kafka.RawFormat{Decode: components.DebeziumDecoder(c), Null: kafka.NullSkips(debezium.SkipTombstone)}
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
			src := kafka.NewDocSource(c, rawFormats[cfg.Transport.Kafka.RawFormat](cfg.Source))
			if cfg.Transport.Kafka.RawFormat == "debezium" {
				src.KeyedByRow() // by the row's primary key, as Debezium writes it
			}
			return idleSourceOf(src, o.IdleExit), nil
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
		// Its records are acknowledged only after the windows and manifests of their documents;
		// the run's ledger closes it.
		sw.ordered = &replica.OrderedChunkSink{Inner: kafka.NewChunkSink(p), MaxRecordBytes: cfg.Transport.Kafka.MaxRecordBytes}
		ro.ChunkSinks, ro.NoVectors = []connectors.ChunkSink{sw.ordered}, true
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
	src, err := launch.OpenSource(ctx, cfg, o.FromScratch)
	if err != nil {
		return nil, err
	}
	defer src.Close(context.Background())
	p, err := e.producer(cfg.Transport.Kafka.RawTopic())
	if err != nil {
		return nil, err
	}
	out := kafka.NewRawSink(p) // closed by Ingest's ledger
	ckPath := runstate.CheckpointPath(cfg.Run.StateDir, cfg.Name+".ingest")
	if o.FromScratch {
		_ = os.Remove(ckPath)
	}
	ck, err := runstate.LoadCheckpoint(ckPath)
	if err != nil {
		out.Close(context.Background())
		return nil, err
	}
	if why, err := launch.ResumeCheckpoint(ctx, &ck, cfg); err != nil {
		out.Close(context.Background())
		return nil, err
	} else if why != "" {
		e.log.Warn("the input changed since the checkpoint; ingesting from the beginning", "why", why, "source", cfg.Source.Path)
	}
	var c engine.Counters
	stop, err := e.serveMetrics("ingest", &c, nil)
	if err != nil {
		out.Close(context.Background())
		return nil, err
	}
	defer stop()
	sum := e.startSummary("ingest", []string{"kafka:" + cfg.Transport.Kafka.RawTopic()})
	err = Ingest(ctx, idleSourceOf(src, o.IdleExit), out, dl, IngestOptions{
		LoopOptions: LoopOptions{CommitEvery: cfg.Run.CommitEvery, CommitInterval: cfg.Run.CommitInterval.Duration, Logger: e.log},
		Resume:      ck.Watermark,
		TrackIDs:    cfg.Run.DuplicateIDs,
		OnCommit: func(w int64) error {
			ck.Watermark = w
			return ck.Save(ckPath)
		},
	}, &c)
	return e.finishSummary(ctx, sum, &c, src.Stats(), nil, err), err
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
	outs, names, closeSinks, err := launch.OpenSinks(ctx, cfg, launch.SinkEnv(pp.GN, pp.Params, pp.Aggregator, pp.Companion, e.kafkaSink))
	if err != nil {
		return nil, err
	}
	cons, err := e.consumer("aggregate", cfg.Transport.Kafka.ChunksTopic())
	if err != nil {
		closeSinks()
		return nil, err
	}
	in := kafka.NewChunkSource(cons)
	defer in.Close(context.Background())
	var c engine.Counters
	stop, err := e.serveMetrics("aggregate", &c, func() map[string]float64 {
		return map[string]float64{"reignpipe_consumer_lag": float64(cons.Lag())}
	})
	if err != nil {
		closeSinks()
		return nil, err
	}
	defer stop()
	sum := e.startSummary("aggregate", names)
	sum.Space = pp.Aggregator.Space()
	// Aggregate's ledger closes the sinks, and a close that fails fails the stage.
	err = Aggregate(ctx, AggregateParts{
		Input: idleChunksOf(in, o.IdleExit), Aggregation: engine.Aggregation{Aggregator: pp.Aggregator, Companion: pp.Companion},
		Sinks: outs, SinkNames: names, DeadLetter: dl,
		Space: schemas.Space{Fingerprint: pp.GN.Fingerprint, Dim: pp.GN.Dim, K: pp.Params.K, S: pp.Params.S},
	}, LoopOptions{CommitEvery: cfg.Run.CommitEvery, CommitInterval: cfg.Run.CommitInterval.Duration, Logger: e.log}, &c)
	return e.finishSummary(ctx, sum, &c, connectors.SourceStats{}, outs, err), err
}

func (e *stageEnv) serveMetrics(stage string, c *engine.Counters, extra func() map[string]float64) (func(), error) {
	if e.cfg.Run.MetricsAddr == "" {
		return func() {}, nil
	}
	stop, err := promtext.Serve(e.cfg.Run.MetricsAddr, report.MetricsHandler(c, promtext.Labels{Pipeline: e.cfg.Name, Stage: stage}, extra))
	if err != nil {
		return nil, fmt.Errorf("metrics on %s: %w", e.cfg.Run.MetricsAddr, err)
	}
	return stop, nil
}

func (e *stageEnv) startSummary(stage string, outputs []string) *engine.Summary {
	return &engine.Summary{Pipeline: e.cfg.Name, Stage: stage, Started: time.Now().UTC(), DeadLetter: "kafka:" + e.cfg.Transport.Kafka.DeadLetterTopic(), Outputs: outputs}
}

// finishSummary fills in the stage's summary from the engine's counters (also written to
// run.summary when set). A stage stopped by a signal says "stopped": that is how a stage ends.
func (e *stageEnv) finishSummary(ctx context.Context, s *engine.Summary, c *engine.Counters, st connectors.SourceStats, sinks []connectors.Sink, runErr error) *engine.Summary {
	engine.Summarize(s, c, st, sinks)
	s.Stopped = engine.StopOf(ctx, runErr, true)
	if runErr != nil {
		s.Error = runErr.Error()
	}
	launch.WriteSummary(e.cfg, s.JSON(), e.log)
	return s
}

// A backfill's stage exits once its input has been quiet for --idle-exit: idleExit ends a
// source's reads with io.EOF after no input arrived for that long (0: never), measured from
// the last input, however often the ledger cut a wait short to commit.
type idleExit struct {
	d    time.Duration
	last time.Time
}

// idleRead is read under the idle deadline: io.EOF once no input arrived for i.d.
func idleRead[T any](i *idleExit, ctx context.Context, read func(context.Context) (T, connectors.AckFunc, error)) (T, connectors.AckFunc, error) {
	if i.d <= 0 {
		return read(ctx)
	}
	if i.last.IsZero() {
		i.last = time.Now()
	}
	rctx, cancel := context.WithDeadline(ctx, i.last.Add(i.d))
	defer cancel()
	v, ack, err := read(rctx)
	switch {
	case err == nil:
		i.last = time.Now()
	case rctx.Err() != nil && ctx.Err() == nil:
		return v, ack, io.EOF
	}
	return v, ack, err
}

// idleSource is a source that ends after --idle-exit of quiet: the embed and process stages'
// Kafka source, ingest's (a watched folder is quiet once its files are read). What the
// runner and the ledger ask of a source beyond Read passes through.
type idleSource struct {
	connectors.Source
	idle idleExit
}

func idleSourceOf(src connectors.Source, d time.Duration) connectors.Source {
	if d <= 0 {
		return src
	}
	return &idleSource{Source: src, idle: idleExit{d: d}}
}

func (s *idleSource) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	return idleRead(&s.idle, ctx, s.Source.Read)
}

func (s *idleSource) FlushAcks(ctx context.Context) error {
	if f, ok := s.Source.(connectors.AckFlusher); ok {
		return f.FlushAcks(ctx)
	}
	return nil
}

func (s *idleSource) SelfCheckpointing() bool {
	sc, ok := s.Source.(connectors.SelfCheckpointing)
	return ok && sc.SelfCheckpointing()
}

// Lease is the source's lease of the input Read returned last, nil for a source without one.
func (s *idleSource) Lease() context.Context {
	if l, ok := s.Source.(connectors.Leased); ok {
		return l.Lease()
	}
	return nil
}

// idleChunks is a chunk source that ends after --idle-exit of quiet.
type idleChunks struct {
	connectors.ChunkSource
	idle idleExit
}

func idleChunksOf(in connectors.ChunkSource, d time.Duration) connectors.ChunkSource {
	if d <= 0 {
		return in
	}
	return &idleChunks{ChunkSource: in, idle: idleExit{d: d}}
}

func (s *idleChunks) Read(ctx context.Context) (schemas.ChunkDoc, connectors.AckFunc, error) {
	return idleRead(&s.idle, ctx, s.ChunkSource.Read)
}
