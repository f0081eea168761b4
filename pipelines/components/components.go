// Package components declares the built-in component types -- the wikipedia, jsonl and uspto
// sources, the parquet, jsonl, kafka and pgvector sinks, the meanpool and reign aggregations --
// each with its keys, defaults, docs, validation and constructor in one place (see package
// pipelines/registry). Builtin returns them; nothing registers itself.
package components

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/jsonl"
	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/connectors/multifile"
	"github.com/reignpipe/reignpipe/connectors/pgvector"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/connectors/watchdir"
	"github.com/reignpipe/reignpipe/connectors/wikipedia"
	"github.com/reignpipe/reignpipe/pipelines/registry"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/reign"
)

// Builtin returns the registry of the built-in components, in the order help lists them.
func Builtin() *registry.Registry {
	return &registry.Registry{
		Sources: []registry.Source{wikipediaSource(), jsonlSource(), usptoSource()},
		Sinks: []registry.Sink{
			fileSink("parquet", "Parquet vector part files", openParquet),
			fileSink("jsonl", "JSONL vector part files, each with its sha256", openJSONL),
			kafkaSink(),
			pgvectorSink(),
		},
		Aggregators: []registry.Aggregator{meanPool(), reignAggregator()},
		SourceKeys: []registry.Key{
			{Name: "path", Default: "—", Doc: "input file; for jsonl and uspto also a directory or a glob, read in name order"},
			{Name: "name", Default: "from data", Doc: "id prefix; default: the dump's dbname / the file name"},
			{Name: "max_doc_bytes", Default: "33554432 (32 MiB)", Doc: "a document with more text is dead-lettered; 0 = no bound"},
		},
	}
}

func wikipediaSource() registry.Source {
	return registry.Source{
		Type: "wikipedia",
		Doc:  "MediaWiki pages-articles XML: plain, .bz2 or multistream .bz2 with its index",
		Keys: []registry.Key{
			{Name: "index", Default: "auto", Doc: "multistream index (*-index.txt.bz2 beside the dump)"},
			{Name: "workers", Default: "all cores", Doc: "parallel bz2 streams"},
		},
		Validate: func(c registry.SourceConfig, bad registry.Bad) error {
			if c.Workers < 0 {
				return bad("workers", "must be >= 0")
			}
			return nil
		},
		Open: func(c registry.SourceConfig) (connectors.Source, error) {
			if _, err := os.Stat(c.Path); errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("source.path: %q does not exist%s", c.Path, relativeHint(c.Path))
			}
			return wikipedia.Open(wikipedia.Options{Path: c.Path, Index: c.Index, Source: c.Name, Workers: c.Workers, MaxPageBytes: int(markupBound(c.MaxDocBytes))})
		},
	}
}

// fileKeys are the keys of the sources that read a path of files: a folder or glob read once,
// or a folder watched (watch: true).
var fileKeys = []registry.Key{
	{Name: "watch", Default: "false", Doc: "path is a directory watched for new files; each file's progress is checkpointed in run.state_dir"},
	{Name: "pattern", Default: "*", Doc: "watched files' name glob"},
	{Name: "poll", Default: "10s", Doc: "how often a watched directory is listed"},
	{Name: "settle", Default: "2s", Doc: "a watched file is read only after it has not changed for this long"},
}

func validateFiles(c registry.SourceConfig, bad registry.Bad) error {
	switch {
	case c.Pattern != "" && !c.Watch:
		return bad("pattern", "applies only with watch: true (else put the glob in path)")
	case c.Poll.Duration < 0:
		return bad("poll", "must be >= 0")
	case c.Settle.Duration < 0:
		return bad("settle", "must be >= 0")
	case c.Settle.Duration != 0 && !c.Watch:
		return bad("settle", "applies only with watch: true")
	}
	return nil
}

func jsonlSource() registry.Source {
	return registry.Source{
		Type: "jsonl", Doc: "one JSON document per line (id, title, text)", Keys: fileKeys, Validate: validateFiles,
		Open: func(c registry.SourceConfig) (connectors.Source, error) {
			return files(c, func(p string) (connectors.Source, error) {
				return jsonl.Open(jsonl.Options{Path: p, Source: c.Name, MaxLineBytes: jsonlLineBound(c.MaxDocBytes)})
			})
		},
	}
}

func usptoSource() registry.Source {
	return registry.Source{
		Type: "uspto", Doc: "USPTO full-text grants and applications, .xml or .zip",
		Keys: append([]registry.Key{{Name: "sections", Default: "all", Doc: "which parts make the text, in order: title, abstract, claims, description"}}, fileKeys...),
		Validate: func(c registry.SourceConfig, bad registry.Bad) error {
			if err := validateFiles(c, bad); err != nil {
				return err
			}
			if err := uspto.ValidateSections(c.Sections); err != nil {
				return bad("sections", "%v", err)
			}
			return nil
		},
		Open: func(c registry.SourceConfig) (connectors.Source, error) {
			if err := uspto.ValidateSections(c.Sections); err != nil {
				return nil, err
			}
			return files(c, func(p string) (connectors.Source, error) {
				return uspto.Open(uspto.Options{Path: p, Sections: c.Sections, MaxDocBytes: markupBound(c.MaxDocBytes)})
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
func files(c registry.SourceConfig, open func(string) (connectors.Source, error)) (connectors.Source, error) {
	if c.Watch {
		if fi, err := os.Stat(c.Path); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("source.path: %q is not a folder (source.watch: true reads the files that arrive in a folder)%s", c.Path, relativeHint(c.Path))
		}
		return watchdir.Open(watchdir.Options{Dir: c.Path, Pattern: c.Pattern, Open: open, StateFile: c.StateFile, Poll: c.Poll.Duration, Settle: c.Settle.Duration})
	}
	s, err := multifile.Open(c.Path, open)
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
	if filepath.IsAbs(path) {
		return ""
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (relative paths are read from the directory reignpipe runs in, %s)", wd)
}

func openParquet(c registry.SinkConfig, env registry.SinkEnv) (connectors.Sink, error) {
	return vectorfile.NewParquet(vectorfile.ParquetOptions{Dir: c.Dir, Dim: env.Dim, GNDim: env.GNDim, Metadata: env.Meta})
}

func openJSONL(c registry.SinkConfig, _ registry.SinkEnv) (connectors.Sink, error) {
	return vectorfile.NewJSONL(vectorfile.JSONLOptions{Dir: c.Dir})
}

// fileSink is a sink writing part files into sinks[].dir.
func fileSink(typ, doc string, open func(registry.SinkConfig, registry.SinkEnv) (connectors.Sink, error)) registry.Sink {
	return registry.Sink{
		Type: typ, Doc: doc,
		Keys: []registry.Key{{Name: "dir", Default: "—", Doc: "folder of the part files (one sink per folder)"}},
		Validate: func(c registry.SinkConfig, bad registry.Bad) error {
			if c.Dir == "" {
				return bad("dir", "missing")
			}
			return nil
		},
		Open: func(c registry.SinkConfig, env registry.SinkEnv) (connectors.Sink, error) {
			s, err := open(c, env)
			if err != nil {
				return nil, fmt.Errorf("sink %s %s: %w", c.Type, c.Dir, err)
			}
			return s, nil
		},
		Output: func(c registry.SinkConfig) string { return c.Dir },
	}
}

// TopicName is the rule for the topic names and prefixes a pipeline file gives.
var TopicName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,200}$`)

func kafkaSink() registry.Sink {
	return registry.Sink{
		Type: "kafka", Doc: "vectors to a compacted topic keyed by doc id (transport.type: kafka)",
		Keys: []registry.Key{
			{Name: "topic", Default: "<p>.vectors", Doc: "the vector topic; default <transport.kafka.topics>.vectors"},
			{Name: "format", Default: "rpdv", Doc: "rpdv (binary), json or connect-json (Kafka Connect JsonConverter); JSON records are never fragmented"},
		},
		Validate: func(c registry.SinkConfig, bad registry.Bad) error {
			if c.Topic != "" && !TopicName.MatchString(c.Topic) {
				return bad("topic", "%q is not a valid topic name", c.Topic)
			}
			if c.Format != "" && !slices.Contains(kafka.VectorFormats, c.Format) {
				return bad("format", "%q is not rpdv, json or connect-json", c.Format)
			}
			return nil
		},
		Open: func(c registry.SinkConfig, env registry.SinkEnv) (connectors.Sink, error) {
			if env.Kafka == nil {
				return nil, errors.New("a kafka sink needs transport.type: kafka")
			}
			s, err := env.Kafka(c)
			if err != nil {
				return nil, fmt.Errorf("sink kafka: %w", err)
			}
			return s, nil
		},
		Output:    func(c registry.SinkConfig) string { return "kafka:" + c.Topic },
		Transport: "kafka",
	}
}

func pgvectorSink() registry.Sink {
	return registry.Sink{
		Type: "pgvector", Doc: "vectors into PostgreSQL + pgvector, one table per vector space, newest version per doc id",
		Keys: []registry.Key{
			{Name: "dsn", Default: "PG* env", Doc: "libpq connection string or URL; empty: PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE"},
			{Name: "table", Default: pgvector.DefaultTable, Doc: "table prefix: <table>_spaces lists the spaces, each in its table <table>_<kind>_<hash>"},
			{Name: "batch_rows", Default: strconv.Itoa(pgvector.DefaultBatchRows), Doc: "rows per upsert statement; a commit (run.commit_every) is one transaction"},
			{Name: "index", Default: pgvector.DefaultIndex, Doc: "hnsw (with the table), deferred (built when the run ends: faster bulk loads) or none"},
			{Name: "distance", Default: pgvector.DefaultDistance, Doc: "inner_product (the vectors are L2-normalised: ranks as cosine, cheaper), cosine or l2"},
			{Name: "retry_timeout", Default: "2m", Doc: "how long a commit waits for a database that is down before the run fails"},
		},
		Validate: func(c registry.SinkConfig, bad registry.Bad) error {
			switch {
			case c.Table != "" && pgvector.CheckTable(c.Table) != "":
				return bad("table", "%s", pgvector.CheckTable(c.Table))
			case c.BatchRows < 0:
				return bad("batch_rows", "must be >= 1")
			case c.Index != "" && pgvector.CheckIndex(c.Index) != "":
				return bad("index", "%s", pgvector.CheckIndex(c.Index))
			case c.Distance != "" && pgvector.CheckDistance(c.Distance) != "":
				return bad("distance", "%s", pgvector.CheckDistance(c.Distance))
			case c.RetryTimeout.Duration < 0:
				return bad("retry_timeout", "must be > 0")
			}
			return nil
		},
		Open: func(c registry.SinkConfig, env registry.SinkEnv) (connectors.Sink, error) {
			return pgvector.Open(context.Background(), pgvector.Options{
				DSN: c.DSN, Table: c.Table, BatchRows: c.BatchRows, Index: c.Index, Distance: c.Distance,
				RetryTimeout: c.RetryTimeout.Duration, Dim: env.Dim, GNDim: env.GNDim, Key: env.Key,
			})
		},
		Output: func(c registry.SinkConfig) string { return pgvector.Describe(c.DSN, c.Table) },
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

func reignAggregator() registry.Aggregator {
	return registry.Aggregator{
		Type: "reign", Doc: "a REIGN checkpoint run on ONNX Runtime; vectors also carry their GN mean-pool companion",
		Keys: []registry.Key{
			{Name: "checkpoint", Default: "—", Doc: "directory with config.json + model.safetensors (+ reignpipe-manifest.json)"},
			{Name: "trained_on", Default: "—", Doc: "GN name or fingerprint, required for a checkpoint without a manifest"},
			{Name: "single_chunk", Default: "reign", Doc: "gn sends one-chunk documents to the GN mean-pool vector"},
		},
		Validate: func(c registry.AggregateConfig, bad registry.Bad) error {
			switch {
			case c.Checkpoint == "":
				return bad("checkpoint", "reign needs a checkpoint directory")
			case c.SingleChunk != "reign" && c.SingleChunk != "gn":
				return bad("single_chunk", "%q is not reign or gn", c.SingleChunk)
			}
			return nil
		},
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
	dir := env.Config.Checkpoint
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return registry.Built{}, fmt.Errorf("aggregate.checkpoint: %s is not a folder%s; a REIGN checkpoint is a folder with config.json and model.safetensors: "+
			"reignpipe train --out DIR writes one, and ops/checkpoints holds the committed ones", dir, relativeHint(dir))
	}
	ck, err := reign.Load(dir)
	if err != nil {
		return registry.Built{}, fmt.Errorf("aggregate.checkpoint: %w", err)
	}
	space := reign.Space{GNName: env.GNName, GNFingerprint: env.GN.Fingerprint, GNDim: env.GN.Dim, K: env.Params.K, S: env.Params.S}
	if err := reign.CheckSpace(dir, ck, space, env.Config.TrainedOn); err != nil {
		return registry.Built{}, err
	}
	st, err := reign.NewStage(env.Runtime, ck, reign.StageOptions{
		Provider: env.Provider, IntraOpThreads: env.IntraOpThreads, InterOpThreads: env.InterOpThreads,
	})
	if err != nil {
		return registry.Built{}, err
	}
	b := registry.Built{Aggregator: st, Companion: meanPool, Close: func() { st.Close() }}
	if env.Config.SingleChunk == "gn" {
		b.Aggregator = aggregate.SingleChunkRouter{Multi: st, Single: meanPool}
	}
	return b, nil
}
