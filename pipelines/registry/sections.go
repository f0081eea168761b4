package registry

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"
)

// SourceConfig selects and configures the source connector (the source section).
type SourceConfig struct {
	Type    string `yaml:"type"` // a registered source type
	Path    string `yaml:"path"`
	Index   string `yaml:"index"`   // wikipedia multistream index; "" = auto-detect
	Name    string `yaml:"name"`    // id prefix; "" = from the data
	Workers int    `yaml:"workers"` // wikipedia: parallel bz2 streams; 0 = all cores
	// Sections picks and orders the parts of a patent's text (uspto): title, abstract, claims,
	// description. Empty = all four in that order.
	Sections []string `yaml:"sections"`
	// Watch turns a directory path into a continuous source (jsonl, uspto): files matching
	// Pattern are picked up as they appear, each file's progress checkpointed in state_dir.
	Watch   bool     `yaml:"watch"`
	Pattern string   `yaml:"pattern"` // file-name glob for watch; default "*"
	Poll    Duration `yaml:"poll"`    // how often a watched directory is listed; default 10s
	// Settle is how long a watched file must go unchanged before it is read, so a file copied
	// in place is not read half written; default 2s. Files renamed in need none.
	Settle Duration `yaml:"settle"`
	// MaxDocBytes bounds one document's text: a larger one is dead-lettered with its size, so
	// one huge input cannot take the run's memory. The readers that can bound their records
	// before holding them follow it (JSONL lines: the bound + 1 MiB; patent XML records and
	// Wikipedia pages: twice the bound). 0 = no bound.
	MaxDocBytes int64 `yaml:"max_doc_bytes"`

	// StateFile is where a watched source keeps its per-file checkpoint (set by the runner
	// from run.state_dir, not by the user).
	StateFile string `yaml:"-"`
}

// SinkConfig is one output (a sinks[] entry).
type SinkConfig struct {
	Type  string `yaml:"type"` // a registered sink type
	Dir   string `yaml:"dir"`
	Topic string `yaml:"topic"` // kafka: default <transport.kafka.topics>.vectors
	// Format is the kafka sink's record format: rpdv (binary, the default, "" here), json or
	// connect-json (schemas/WIRE.md).
	Format string `yaml:"format"`
	// pgvector: where and how vectors go into PostgreSQL. Zero values mean the sink's defaults
	// (applied when it opens, so that a sink of another type that leaves them unset passes the
	// stray-key check).
	DSN          string   `yaml:"dsn"`   // "" = the PG* environment variables
	Table        string   `yaml:"table"` // table prefix
	BatchRows    int      `yaml:"batch_rows"`
	Index        string   `yaml:"index"`    // hnsw | deferred | none
	Distance     string   `yaml:"distance"` // inner_product | cosine | l2
	RetryTimeout Duration `yaml:"retry_timeout"`
}

// AggregateConfig selects how chunk embeddings become a document vector.
type AggregateConfig struct {
	Type       string `yaml:"type"`       // a registered aggregation type
	Checkpoint string `yaml:"checkpoint"` // reign: directory with config.json + model.safetensors
	// TrainedOn names the GN (name or fingerprint) a checkpoint without a reignpipe manifest was
	// trained on; such a checkpoint is refused without it.
	TrainedOn   string `yaml:"trained_on"`
	SingleChunk string `yaml:"single_chunk"` // reign (reference behaviour) | gn (the paper's advice)
}

// Duration is a time.Duration written as "20ms", "5s" in YAML.
type Duration struct{ time.Duration }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (e.g. 20ms, 5s)", n.Line, n.Value)
	}
	d.Duration = v
	return nil
}
