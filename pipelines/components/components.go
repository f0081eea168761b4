// Package components declares the built-in component types -- the wikipedia, jsonl, uspto and
// postgres sources, the parquet, jsonl, kafka and pgvector sinks, the meanpool and reign aggregations --
// each with its settings (keys, defaults, docs and validation: the connector's own Config
// struct where it has one, pgvector.Config, vectorfile.Config, ...) and its constructor (see
// package pipelines/registry). Builtin returns them; nothing registers itself.
package components

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/debezium"
	"github.com/reignpipe/reignpipe/connectors/jsonl"
	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/connectors/multifile"
	"github.com/reignpipe/reignpipe/connectors/pgcdc"
	"github.com/reignpipe/reignpipe/connectors/pgvector"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/connectors/watchdir"
	"github.com/reignpipe/reignpipe/connectors/wikipedia"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/pipelines/registry"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/reign"
)

// Builtin returns the registry of the built-in components, in the order help lists them.
func Builtin() *registry.Registry {
	return &registry.Registry{
		Sources: []registry.Source{wikipediaSource(), jsonlSource(), usptoSource(), postgresSource(), debeziumSource()},
		Sinks: []registry.Sink{
			fileSink("parquet", "Parquet vector part files", openParquet),
			fileSink("jsonl", "JSONL vector part files, each with its sha256", openJSONL),
			kafkaSink(),
			pgvectorSink(),
		},
		Aggregators: []registry.Aggregator{meanPool(), reignAggregator()},
	}
}

// settingsOf is a section's settings as the type's struct: the ones decoded, or the type's
// defaults for a section built in code without any.
func settingsOf[T any](have any, config func() any) T {
	if have == nil {
		have = config()
	}
	t, ok := have.(T)
	if !ok {
		panic(fmt.Sprintf("components: settings %T where %T belong", have, t))
	}
	return t
}

func wikipediaSource() registry.Source {
	config := func() any { return &wikipedia.Config{} }
	return registry.Source{
		Type:   "wikipedia",
		Doc:    "MediaWiki pages-articles XML: plain, .bz2 or multistream .bz2 with its index",
		Config: config,
		Open: func(ctx context.Context, c registry.SourceConfig) (connectors.Source, error) {
			w := settingsOf[*wikipedia.Config](c.Settings, config)
			if _, err := c.Store.Stat(ctx, c.Path); errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("source.path: %q does not exist%s", c.Path, relativeHint(c.Path))
			}
			if w.DeleteMissing && c.StateBase == "" {
				return nil, errors.New("source.delete_missing: needs the run's state folder (run.state_dir) to keep the articles of the last complete read")
			}
			return wikipedia.OpenIn(ctx, wikipedia.Options{Path: c.Path, Index: w.Index, Source: c.Name, Workers: w.Workers,
				MaxPageBytes: int(markupBound(c.MaxDocBytes)), Store: c.Store,
				DeleteMissing: w.DeleteMissing, ArticlesPath: c.StateBase + ".wikipedia-articles"})
		},
	}
}

func jsonlSource() registry.Source {
	config := func() any { return &watchdir.Config{} }
	return registry.Source{
		Type: "jsonl", Doc: "one JSON document per line (id, title, text)", Config: config,
		Open: func(ctx context.Context, c registry.SourceConfig) (connectors.Source, error) {
			return files(ctx, c, *settingsOf[*watchdir.Config](c.Settings, config), func(ctx context.Context, p string) (connectors.Source, error) {
				return jsonl.OpenIn(ctx, c.Store, jsonl.Options{Path: p, Source: c.Name, MaxLineBytes: jsonlLineBound(c.MaxDocBytes)})
			})
		},
	}
}

func postgresSource() registry.Source {
	config := func() any { c := pgcdc.DefaultConfig(); return &c }
	return registry.Source{
		Type: "postgres", Doc: "a PostgreSQL table: a snapshot of its rows, then its inserts, updates and deletes (logical replication)", Config: config, NoPath: true,
		Open: func(ctx context.Context, c registry.SourceConfig) (connectors.Source, error) {
			p := settingsOf[*pgcdc.Config](c.Settings, config)
			// The state file in run.state_dir records that the snapshot is durable downstream.
			return pgcdc.Open(ctx, pgcdc.Options{Config: *p, Pipeline: c.Pipeline, Source: c.Name, StateFile: c.StateFile})
		},
	}
}

func debeziumSource() registry.Source {
	config := func() any { c := debezium.DefaultConfig(); return &c }
	return registry.Source{
		Type: "debezium", Doc: "Debezium change events of a table, read from Kafka (transport.kafka.raw_format: debezium)",
		Config: config, RawFormat: "debezium",
		Open: func(context.Context, registry.SourceConfig) (connectors.Source, error) {
			// The loader refuses the pipeline before this: Debezium writes the topic, the
			// embed and process stages read it.
			return nil, errors.New("source.type: debezium is read by `reignpipe stage process` (or embed) from the topic Debezium writes, not opened by a run")
		},
	}
}

// DebeziumDecoder decodes the raw topic's change events into documents with the columns the
// debezium source names, ids prefixed by source.name (default: each event's table).
func DebeziumDecoder(c registry.SourceConfig) kafka.Decoder {
	d, err := debezium.NewDecoder(*settingsOf[*debezium.Config](c.Settings, func() any { c := debezium.DefaultConfig(); return &c }), c.Name)
	if err != nil {
		// The loader validated the same settings with the same rule.
		panic(fmt.Sprintf("components: debezium source settings: %v", err))
	}
	return d.Decode
}

// USPTOConfig is the uspto source's own keys: which parts of a patent make its text, and how
// its files are found (a path read once, or a folder watched).
type USPTOConfig struct {
	Text  uspto.Config    `yaml:",inline"`
	Files watchdir.Config `yaml:",inline"`
}

// Validate checks the text keys, then the file keys.
func (c USPTOConfig) Validate(bad registry.Bad) error {
	if err := c.Text.Validate(bad); err != nil {
		return err
	}
	return c.Files.Validate(bad)
}

// Sections is source.sections of a uspto source (nil: all, in the default order, and for a
// source of another type): what the patent XML readers outside the source -- the raw topic's
// uspto-xml decoder, a search by document -- take as the text.
func Sections(c registry.SourceConfig) []string {
	if u, ok := c.Settings.(*USPTOConfig); ok {
		return u.Text.Sections
	}
	return nil
}

func usptoSource() registry.Source {
	config := func() any { return &USPTOConfig{} }
	return registry.Source{
		Type: "uspto", Doc: "USPTO full-text grants and applications, .xml or .zip", Config: config,
		Open: func(ctx context.Context, c registry.SourceConfig) (connectors.Source, error) {
			u := settingsOf[*USPTOConfig](c.Settings, config)
			return files(ctx, c, u.Files, func(ctx context.Context, p string) (connectors.Source, error) {
				return uspto.OpenIn(ctx, c.Store, uspto.Options{Path: p, Sections: u.Text.Sections, MaxDocBytes: markupBound(c.MaxDocBytes)})
			})
		},
	}
}

// jsonlLineBound is the longest JSONL line worth reading under source.max_doc_bytes: the text
// plus 1 MiB for the other fields and JSON syntax. A line past it is skipped as a bad input
// without being held, so an oversized document costs the reader this much memory, not its size.
// Text heavy in JSON escapes can make a line longer than its text: such a document is refused
// slightly early, with a reason that names the bound.
func jsonlLineBound(maxDocBytes int64) int {
	if maxDocBytes <= 0 {
		return 0 // the reader's own bound
	}
	return int(maxDocBytes) + 1<<20
}

// markupBound is the longest XML record (a patent, a Wikipedia page) worth reading under
// source.max_doc_bytes: twice the text bound, for the markup around the text (the default, 32 MiB
// of text, gives the patent splitter's own 64 MiB). A longer record is skipped as a bad input
// without being held.
func markupBound(maxDocBytes int64) int64 {
	if maxDocBytes <= 0 {
		return 0 // the reader's own bound
	}
	return min(2*maxDocBytes, math.MaxInt32)
}

// files opens a path of per-file sources: watched, or a fixed set read once. A path that
// names no input is reported as source.path's, the key the user wrote it under.
func files(ctx context.Context, c registry.SourceConfig, w watchdir.Config, open func(context.Context, string) (connectors.Source, error)) (connectors.Source, error) {
	if w.Watch {
		if objstore.IsS3(c.Path) {
			// An empty prefix is a feed yet to start; a bucket that cannot be listed is an error now.
			if _, err := c.Store.List(ctx, c.Path); err != nil {
				return nil, fmt.Errorf("source.path: %w", err)
			}
		} else if isDir, err := c.Store.IsDir(ctx, c.Path); err != nil || !isDir {
			return nil, fmt.Errorf("source.path: %q is not a folder (source.watch: true reads the files that arrive in a folder or an s3:// prefix)%s", c.Path, relativeHint(c.Path))
		}
		return watchdir.Open(watchdir.Options{Dir: c.Path, Store: c.Store, Pattern: w.Pattern, Open: open, StateFile: c.StateFile, Poll: w.Poll, Settle: w.Settle})
	}
	s, err := multifile.Open(ctx, c.Store, c.Path, open)
	if err != nil {
		var none *multifile.NoInputError
		if errors.As(err, &none) && !none.EmptyDir {
			return nil, fmt.Errorf("source.path: %w%s", err, relativeHint(c.Path))
		}
		return nil, fmt.Errorf("source.path: %w", err)
	}
	return s, nil
}

// relativeHint says where a relative input path was looked for: the directory reignpipe runs
// in, not the pipeline file's.
func relativeHint(path string) string {
	if filepath.IsAbs(path) || objstore.IsS3(path) {
		return ""
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (relative paths are read from the directory reignpipe runs in, %s)", wd)
}

func openParquet(st *objstore.Store, dir string, env registry.SinkEnv) (connectors.Sink, error) {
	return vectorfile.NewParquet(vectorfile.ParquetOptions{Dir: dir, Store: st, Dim: env.Dim, GNDim: env.GNDim, Metadata: env.Meta})
}

func openJSONL(st *objstore.Store, dir string, _ registry.SinkEnv) (connectors.Sink, error) {
	return vectorfile.NewJSONL(vectorfile.JSONLOptions{Dir: dir, Store: st})
}

// fileSink is a sink writing part files into sinks[].dir.
func fileSink(typ, doc string, open func(st *objstore.Store, dir string, env registry.SinkEnv) (connectors.Sink, error)) registry.Sink {
	config := func() any { return &vectorfile.Config{} }
	return registry.Sink{
		Type: typ, Doc: doc, Config: config,
		Open: func(_ context.Context, c registry.SinkConfig, env registry.SinkEnv) (connectors.Sink, error) {
			dir := settingsOf[*vectorfile.Config](c.Settings, config).Dir
			s, err := open(c.Store, dir, env)
			if err != nil {
				return nil, fmt.Errorf("sink %s %s: %w", c.Type, dir, err)
			}
			return s, nil
		},
		Output: func(c registry.SinkConfig) string { return c.Dir() },
		Store: func(_ context.Context, c registry.SinkConfig) (connectors.VectorStore, error) {
			return vectorfile.NewStore(c.Store, c.Dir()), nil
		},
	}
}

// KafkaSettings is a kafka sink's topic and format.
func KafkaSettings(c registry.SinkConfig) *kafka.VectorSinkConfig {
	return settingsOf[*kafka.VectorSinkConfig](c.Settings, kafkaConfig)
}

func kafkaConfig() any { return &kafka.VectorSinkConfig{} }

func kafkaSink() registry.Sink {
	return registry.Sink{
		Type: "kafka", Doc: "vectors to a compacted topic keyed by doc id (transport.type: kafka)", Config: kafkaConfig,
		Open: func(_ context.Context, c registry.SinkConfig, env registry.SinkEnv) (connectors.Sink, error) {
			if env.Kafka == nil {
				return nil, errors.New("a kafka sink needs transport.type: kafka")
			}
			s, err := env.Kafka(c)
			if err != nil {
				return nil, fmt.Errorf("sink kafka: %w", err)
			}
			return s, nil
		},
		Output:    func(c registry.SinkConfig) string { return "kafka:" + KafkaSettings(c).Topic },
		Transport: "kafka",
	}
}

// PgvectorSettings is a pgvector sink's keys.
func PgvectorSettings(c registry.SinkConfig) *pgvector.Config {
	return settingsOf[*pgvector.Config](c.Settings, pgvectorConfig)
}

func pgvectorConfig() any {
	c := pgvector.DefaultConfig()
	return &c
}

func pgvectorSink() registry.Sink {
	return registry.Sink{
		Type: "pgvector", Doc: "vectors into PostgreSQL + pgvector, one table per vector space, newest version per doc id",
		Config: pgvectorConfig,
		// ctx bounds the wait for a database that is down (retry_timeout): a signal stops it.
		Open: func(ctx context.Context, c registry.SinkConfig, env registry.SinkEnv) (connectors.Sink, error) {
			return pgvector.Open(ctx, pgvector.Options{Config: *PgvectorSettings(c), Dim: env.Dim, GNDim: env.GNDim, Key: env.Key, DeleteRetention: env.DeleteRetention})
		},
		Output: func(c registry.SinkConfig) string {
			p := PgvectorSettings(c)
			return pgvector.Describe(p.DSN, p.Table)
		},
		Store: func(ctx context.Context, c registry.SinkConfig) (connectors.VectorStore, error) {
			p := PgvectorSettings(c)
			s, err := pgvector.OpenSearcher(ctx, pgvector.SearchOptions{DSN: p.DSN, Table: p.Table})
			if err != nil {
				return nil, err // not a nil *Searcher in a non-nil interface
			}
			return s, nil
		},
		Indexed: true,
	}
}

func meanPool() registry.Aggregator {
	return registry.Aggregator{
		Type: "meanpool", Doc: "GN chunked mean-pool (no checkpoint)",
		Build: func(env registry.AggregatorEnv) (registry.Built, error) {
			mp, err := aggregate.NewMeanPool(env.GN.Dim, env.GN.Fingerprint)
			return registry.Built{Aggregator: mp, Close: func() {}}, err
		},
	}
}

// ReignConfig is the reign aggregation's keys.
type ReignConfig struct {
	Checkpoint string `yaml:"checkpoint" default:"—" doc:"directory with config.json + model.safetensors (+ reignpipe-manifest.json)"`
	// TrainedOn names the GN (name or fingerprint) a checkpoint without a reignpipe manifest was
	// trained on; such a checkpoint is refused without it.
	TrainedOn   string `yaml:"trained_on" default:"—" doc:"GN name or fingerprint, required for a checkpoint without a manifest"`
	SingleChunk string `yaml:"single_chunk" default:"reign" doc:"gn sends one-chunk documents to the GN mean-pool vector"` // reign (reference behaviour) | gn (the paper's advice)
}

// Validate reports the first bad value through bad.
func (c ReignConfig) Validate(bad registry.Bad) error {
	switch {
	case c.Checkpoint == "":
		return bad("checkpoint", "reign needs a checkpoint directory")
	case c.SingleChunk != "reign" && c.SingleChunk != "gn":
		return bad("single_chunk", "%q is not reign or gn", c.SingleChunk)
	}
	return nil
}

func reignConfig() any { return &ReignConfig{SingleChunk: "reign"} }

// WithCheckpoint is a made a reign aggregation of the checkpoint in dir (a --checkpoint flag):
// a reign section keeps its other keys, another takes reign's defaults.
func WithCheckpoint(a registry.AggregateConfig, dir string) registry.AggregateConfig {
	r := *reignConfig().(*ReignConfig)
	if have, ok := a.Settings.(*ReignConfig); ok && a.Type == "reign" {
		r = *have
	}
	r.Checkpoint = dir
	return registry.AggregateConfig{Type: "reign", Settings: &r}
}

func reignAggregator() registry.Aggregator {
	return registry.Aggregator{
		Type: "reign", Doc: "a REIGN checkpoint run on ONNX Runtime; vectors also carry their GN mean-pool companion",
		Config:  reignConfig,
		Build:   buildREIGN,
		Session: true,
	}
}

// buildREIGN checks the checkpoint against the GN and window setting in use before anything
// runs, then opens its session on the GN's ONNX Runtime environment.
func buildREIGN(env registry.AggregatorEnv) (registry.Built, error) {
	meanPool, err := aggregate.NewMeanPool(env.GN.Dim, env.GN.Fingerprint)
	if err != nil {
		return registry.Built{}, err
	}
	rc := settingsOf[*ReignConfig](env.Config.Settings, reignConfig)
	dir := rc.Checkpoint
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return registry.Built{}, fmt.Errorf("aggregate.checkpoint: %s is not a folder%s; a REIGN checkpoint is a folder with config.json and model.safetensors: "+
			"reignpipe train --out DIR writes one, and ops/checkpoints holds the committed ones", dir, relativeHint(dir))
	}
	ck, err := reign.Load(dir)
	if err != nil {
		return registry.Built{}, fmt.Errorf("aggregate.checkpoint: %w", err)
	}
	space := reign.Space{GNName: env.GNName, GNFingerprint: env.GN.Fingerprint, GNDim: env.GN.Dim, K: env.Params.K, S: env.Params.S}
	if err := reign.CheckSpace(dir, ck, space, rc.TrainedOn); err != nil {
		return registry.Built{}, err
	}
	st, err := reign.NewStage(env.Runtime, ck, reign.StageOptions{
		Provider: env.Provider, IntraOpThreads: env.IntraOpThreads, InterOpThreads: env.InterOpThreads,
	})
	if err != nil {
		return registry.Built{}, err
	}
	b := registry.Built{Aggregator: st, Companion: meanPool, Close: func() { st.Close() }}
	if rc.SingleChunk == "gn" {
		b.Aggregator = aggregate.SingleChunkRouter{Multi: st, Single: meanPool}
	}
	return b, nil
}
