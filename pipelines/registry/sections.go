package registry

import "github.com/reignpipe/reignpipe/internal/objstore"

// The component sections of a pipeline file hold the keys every component of their role reads
// (type, and for a source path, name and max_doc_bytes) and the keys of the type named there,
// which the type declares itself as its Settings: the struct its Config returns. The loader
// decodes a section into both from the same YAML mapping, so a key is declared, defaulted,
// documented and validated once, by the component that reads it.

// SourceConfig is the source section: the keys every source reads, and the type's own.
type SourceConfig struct {
	Type string `yaml:"type"` // a registered source type
	Path string `yaml:"path" default:"—" doc:"input file; for jsonl and uspto also a directory or a glob, read in name order"`
	Name string `yaml:"name" default:"from data" doc:"id prefix; default: the dump's dbname / the file name"`
	// MaxDocBytes bounds one document's text: a larger one is dead-lettered with its size, so
	// one huge input cannot take the run's memory. The readers that can bound their records
	// before holding them follow it (JSONL lines: the bound + 1 MiB; patent XML records and
	// Wikipedia pages: twice the bound). 0 = no bound.
	MaxDocBytes int64 `yaml:"max_doc_bytes" default:"33554432 (32 MiB)" doc:"a document with more text is dead-lettered; 0 = no bound"`

	// Settings are the keys of the source type (a pointer to the struct its Config returns);
	// nil: the type's defaults, or a type without keys of its own.
	Settings any `yaml:"-"`
	// StateFile is where a watched source keeps its per-file checkpoint (set by the runner
	// from run.state_dir, not by the user).
	StateFile string `yaml:"-"`
	// Store opens Path (local, or s3:// as the pipeline's s3 section says); nil: local only.
	Store *objstore.Store `yaml:"-"`
	// Pipeline is the pipeline's name (set by the runner), for the names a source derives
	// from it: the postgres source's replication slot and publication.
	Pipeline string `yaml:"-"`
	// StateBase is <run.state_dir>/<pipeline name>, the prefix of the other state files a
	// source keeps between runs (the wikipedia source's article set), set by the runner.
	StateBase string `yaml:"-"`
}

// SinkConfig is one output (a sinks[] entry): its type and that type's keys.
type SinkConfig struct {
	Type     string `yaml:"type"` // a registered sink type
	Settings any    `yaml:"-"`    // the keys of the sink type, as SourceConfig.Settings
	// Store opens the sink's folder where it is an s3:// prefix (the pipeline's s3 section);
	// nil: local folders only.
	Store *objstore.Store `yaml:"-"`
}

// AggregateConfig selects how chunk embeddings become a document vector.
type AggregateConfig struct {
	Type     string `yaml:"type"` // a registered aggregation type
	Settings any    `yaml:"-"`    // the keys of the aggregation type, as SourceConfig.Settings
}

// DirSettings is implemented by the settings of a sink that writes files into a folder of its
// own (parquet, jsonl): starting from scratch clears it, verify and search read it, and two
// sinks cannot share it.
type DirSettings interface {
	SinkDir() string
}

// Dir is the folder the sink writes its files into; "" for a sink that writes none (kafka,
// pgvector).
func (c SinkConfig) Dir() string {
	if d, ok := c.Settings.(DirSettings); ok {
		return d.SinkDir()
	}
	return ""
}
