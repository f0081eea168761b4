// Package pipelines loads and validates pipeline definitions (the YAML files in this
// directory). A definition names one source, the GN and window settings, the chunk cache, the
// aggregation and the sinks; the embedded runner (package pipelines/engine/runner) executes it in one
// process.
//
// Loading is strict: unknown keys and bad values are rejected with the YAML line and the reason,
// because a typo in a key would otherwise silently fall back to a default and cost a user a
// multi-hour backfill.
package pipelines

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/reignpipe/reignpipe/internal/commitpolicy"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/registry"
	"github.com/reignpipe/reignpipe/stages/gn/gnbatch"
)

// Config is one pipeline definition.
type Config struct {
	Version    int              `yaml:"version"`
	Name       string           `yaml:"name"`
	Source     SourceConfig     `yaml:"source"`
	Runtime    RuntimeConfig    `yaml:"runtime"`
	GN         GNConfig         `yaml:"gn"`
	Chunking   ChunkingConfig   `yaml:"chunking"`
	Batching   BatchingConfig   `yaml:"batching"`
	Cache      CacheConfig      `yaml:"cache"`
	Aggregate  AggregateConfig  `yaml:"aggregate"`
	Sinks      []SinkConfig     `yaml:"sinks"`
	DeadLetter DeadLetterConfig `yaml:"dead_letter"`
	Run        RunConfig        `yaml:"run"`
	Transport  TransportConfig  `yaml:"transport"`
	// S3 says how s3:// paths are reached (source.path, the parquet and jsonl sinks' dir).
	S3 objstore.S3Settings `yaml:"s3"`

	root  *yaml.Node
	store *objstore.Store // kept to report the line of a bad value
}

// The component sections -- source, sinks[], aggregate -- are declared with the component
// registry (package pipelines/registry), which the components read them through; they are this
// package's own types under these names. Each holds the keys every type of its role reads and,
// in Settings, the keys of the type it names (the struct that type declares).
type (
	SourceConfig    = registry.SourceConfig
	SinkConfig      = registry.SinkConfig
	AggregateConfig = registry.AggregateConfig
)

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

// RuntimeConfig locates the ONNX Runtime library (one environment per process).
type RuntimeConfig struct {
	ORTLibrary string `yaml:"ort_library"` // "" = the one ops/fetch put in REIGNPIPE_HOME
}

// GNConfig selects the Guidance Network.
type GNConfig struct {
	Name           string `yaml:"name"`      // e.g. bge-small-en-v15; locates model/tokenizer in REIGNPIPE_HOME when paths are empty
	Model          string `yaml:"model"`     // model.onnx
	Tokenizer      string `yaml:"tokenizer"` // tokenizer.json
	Provider       string `yaml:"provider"`  // cpu | cuda:N
	IntraOpThreads int    `yaml:"intra_op_threads"`
	InterOpThreads int    `yaml:"inter_op_threads"`
	// Optimized runs the offline BERT-fused variant of the fetched GN (make gn-optimized:
	// REIGNPIPE_HOME/gn/<name>-opt/model.onnx, Attention and SkipLayerNormalization fused where
	// ORT's own optimiser leaves them apart): 5-20 % fewer CPU seconds on this 2-core CPU, chunk
	// vectors within 1 - 1.4e-13 in cosine (ops/bench/results/gn-2026-12-01.md). Its file differs,
	// so its fingerprint, and its cache space, differ from the original's.
	Optimized bool `yaml:"optimized"`
}

// ChunkingConfig is the window setting (REFERENCE §1).
type ChunkingConfig struct {
	K int `yaml:"k"`
	S int `yaml:"s"`
	// Mode: fixed (the reference's windows, default) or anchored (windows end at content-
	// defined paragraph boundaries, so an edit re-embeds only the windows it touches).
	Mode string `yaml:"mode"`
}

// BatchingConfig shapes GN forward passes.
type BatchingConfig struct {
	TokenBudget int      `yaml:"token_budget"`
	MaxBatch    int      `yaml:"max_batch"`
	MaxWait     Duration `yaml:"max_wait"`
}

// CacheConfig places the chunk-embedding shards and their index.
type CacheConfig struct {
	Dir          string `yaml:"dir"`
	RowsPerShard int    `yaml:"rows_per_shard"`
}

// DeadLetterConfig is where failed inputs go.
type DeadLetterConfig struct {
	Path string `yaml:"path"`
}

// DeadLetterPath is the dead-letter file: dead_letter.path, by default
// <run.state_dir>/<name>.deadletter.jsonl.
func (c *Config) DeadLetterPath() string {
	if c.DeadLetter.Path != "" {
		return c.DeadLetter.Path
	}
	return filepath.Join(c.Run.StateDir, c.Name+".deadletter.jsonl")
}

// RunConfig tunes the embedded runner.
type RunConfig struct {
	StateDir        string   `yaml:"state_dir"`       // checkpoint of the source position
	Summary         string   `yaml:"summary"`         // JSON run summary file
	CommitEvery     int      `yaml:"commit_every"`    // documents between durable commits
	CommitInterval  Duration `yaml:"commit_interval"` // and at most this long
	TokenizeWorkers int      `yaml:"tokenize_workers"`
	Queue           int      `yaml:"queue"`    // documents buffered between stages
	Progress        string   `yaml:"progress"` // auto | bar | log | off
	MetricsAddr     string   `yaml:"metrics_addr"`
	DrainTimeout    Duration `yaml:"drain_timeout"` // soft stop before the hard stop
	// InflightBytes bounds the text of the documents between the reader and the writer, with
	// Queue: memory follows the smaller of the two. 0 = no bound.
	InflightBytes int64 `yaml:"inflight_bytes"`
	// DuplicateIDs bounds the doc ids a run remembers to find the same id delivered twice in
	// one input (eight bytes an id, at most twice over); 0 = none.
	DuplicateIDs int `yaml:"duplicate_ids"`
	// DeleteRetention is how long a deletion is remembered against older versions of its
	// document arriving later (schemas.Deletion's rule): by the chunk cache's manifests, the
	// pgvector sink's deletions table and, as delete.retention.ms, the compacted topics.
	DeleteRetention Duration `yaml:"delete_retention"`
}

// Store is where the pipeline's paths are opened: local files, and s3:// objects as the s3
// section says.
func (c *Config) Store() *objstore.Store {
	if c.store == nil {
		c.store = objstore.New(c.S3)
	}
	return c.store
}

// Load reads, expands and validates a pipeline file. ${VAR} and ${VAR:-default} are expanded
// from the environment in its values, after parsing (expand.go); REIGNPIPE_HOME defaults to
// Home().
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, noPipelineFile(path)
	}
	if err != nil {
		return nil, err
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// noPipelineFile is a pipeline file that is not there (errors.Is fs.ErrNotExist).
type noPipelineFile string

func (p noPipelineFile) Error() string { return "no pipeline file " + string(p) }
func (p noPipelineFile) Unwrap() error { return fs.ErrNotExist }

// Home is the directory ops/fetch fills.
func Home() string {
	if h := os.Getenv("REIGNPIPE_HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return filepath.Join(h, ".cache", "reignpipe")
}

// Parse decodes and validates a pipeline definition.
func Parse(data []byte) (*Config, error) {
	return parse(data, os.LookupEnv)
}

// parse is Parse with the environment lookup given (tests).
func parse(data []byte, lookup func(string) (string, bool)) (*Config, error) {
	text, refs := protect(data)
	var root yaml.Node
	if err := yaml.Unmarshal(text, &root); err != nil {
		return nil, errors.New(refs.restore(plainYAMLError(err).Error()))
	}
	if len(root.Content) == 0 {
		return nil, errors.New("empty pipeline definition")
	}
	if err := refs.expandEnv(&root, lookup); err != nil {
		return nil, err
	}
	reg, top := components.Builtin(), root.Content[0]
	// The shape check is what makes decoding strict: it refuses every key that Config, or the
	// settings of the component type a section names, does not have, so the decoder (which
	// cannot be strict about a mapping decoded into two structs) meets only known keys.
	if err := newShape(reg).checkShape(top); err != nil {
		return nil, err
	}
	c := Defaults()
	if err := top.Decode(c); err != nil {
		return nil, plainYAMLError(err) // what the shape check did not foresee, still in YAML terms
	}
	if err := c.decodeSettings(reg, top); err != nil {
		return nil, plainYAMLError(err)
	}
	c.root = &root
	c.fillProviderDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.Source.Store = c.Store()
	for i := range c.Sinks {
		c.Sinks[i].Store = c.Store()
	}
	return c, nil
}

// decodeSettings decodes each component section a second time, into the settings struct of
// the type it names (with that type's defaults for the keys left out).
func (c *Config) decodeSettings(reg *registry.Registry, top *yaml.Node) error {
	decode := func(config func() any, n *yaml.Node) (any, error) {
		if config == nil {
			return nil, nil
		}
		settings := config()
		if n != nil && !isNull(n) {
			if err := n.Decode(settings); err != nil {
				return nil, err
			}
		}
		return settings, nil
	}
	var err error
	if s, ok := reg.Source(c.Source.Type); ok {
		if c.Source.Settings, err = decode(s.Config, lookup(top, "source")); err != nil {
			return err
		}
	}
	if a, ok := reg.Aggregator(c.Aggregate.Type); ok {
		if c.Aggregate.Settings, err = decode(a.Config, lookup(top, "aggregate")); err != nil {
			return err
		}
	}
	sinks := lookup(top, "sinks")
	for i := range c.Sinks {
		s, ok := reg.Sink(c.Sinks[i].Type)
		if !ok || sinks == nil || i >= len(sinks.Content) {
			continue
		}
		if c.Sinks[i].Settings, err = decode(s.Config, resolveAlias(sinks.Content[i])); err != nil {
			return err
		}
	}
	return nil
}

// Defaults is the configuration a key left out takes.
func Defaults() *Config {
	return &Config{
		Version:  1,
		Source:   SourceConfig{Type: "wikipedia", MaxDocBytes: 32 << 20},
		GN:       GNConfig{Name: "bge-small-en-v15", Provider: "cpu"},
		Chunking: ChunkingConfig{K: 512, S: 512, Mode: "fixed"},
		// TokenBudget and MaxBatch depend on gn.provider: set again after decoding for
		// another provider unless written.
		Batching: BatchingConfig{TokenBudget: gnbatch.For("cpu").TokenBudget, MaxBatch: gnbatch.For("cpu").MaxBatch,
			MaxWait: Duration{Duration: 20 * time.Millisecond}},
		Cache:     CacheConfig{Dir: "out/cache", RowsPerShard: 8192},
		Aggregate: AggregateConfig{Type: "meanpool"},
		Run: RunConfig{
			StateDir: "out/state", CommitEvery: commitpolicy.Every, CommitInterval: Duration{Duration: commitpolicy.Interval},
			Queue: 64, Progress: "auto", DrainTimeout: Duration{Duration: 30 * time.Second}, InflightBytes: 64 << 20,
			DuplicateIDs: 1 << 21, DeleteRetention: Duration{Duration: 7 * 24 * time.Hour},
		},
		Transport: TransportConfig{Type: "embedded", Kafka: KafkaConfig{
			Partitions: 6, ReplicationFactor: 1, MaxRecordBytes: 900_000, Compression: "zstd", StartOffset: "earliest", RawFormat: "json",
			RawRetention: "forever", ChunksRetention: "7d",
		}},
	}
}

// fillProviderDefaults gives batching keys left out the defaults of the configured provider
// (gnbatch.For, which the GN batcher uses too).
func (c *Config) fillProviderDefaults() {
	d := gnbatch.For(c.GN.Provider)
	if c.line("batching.token_budget") == 0 {
		c.Batching.TokenBudget = d.TokenBudget
	}
	if c.line("batching.max_batch") == 0 {
		c.Batching.MaxBatch = d.MaxBatch
	}
}

// FieldError is a bad value, located in the YAML.
type FieldError struct {
	Path   string // dotted key path, e.g. "chunking.s"
	Line   int    // 0 when the key was not written (a default)
	Reason string
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Path, e.Reason)
	}
	return fmt.Sprintf("%s: %s", e.Path, e.Reason)
}

// line finds the line of a dotted path ("sinks.1.dir") in the parsed YAML.
func (c *Config) line(path string) int {
	if c.root == nil || len(c.root.Content) == 0 {
		return 0
	}
	n := c.root.Content[0]
	for _, part := range strings.Split(path, ".") {
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == part {
					next = n.Content[i+1]
				}
			}
		case yaml.SequenceNode:
			var idx int
			if _, err := fmt.Sscan(part, &idx); err == nil && idx >= 0 && idx < len(n.Content) {
				next = n.Content[idx]
			}
		}
		if next == nil {
			return 0
		}
		n = next
	}
	return n.Line
}

func (c *Config) bad(path, format string, args ...any) error {
	return &FieldError{Path: path, Line: c.line(path), Reason: fmt.Sprintf(format, args...)}
}

var providerRe = regexp.MustCompile(`^(cpu|cuda:[0-9]+)$`)

// under reports bad values of the keys of section (a dotted path) with their lines.
func (c *Config) under(section string) registry.Bad {
	return func(key, format string, args ...any) error { return c.bad(section+"."+key, format, args...) }
}

// Validate checks every value and reports the first bad one with its line. The component
// sections (source, aggregate, sinks) are checked against the built-in component registry:
// their types and each type's own rules (its settings' Validate).
func (c *Config) Validate() error {
	reg := components.Builtin()
	switch {
	case c.Version != 1:
		return c.bad("version", "unsupported version %d (this reignpipe reads version 1)", c.Version)
	case c.Name == "":
		return c.bad("name", "a pipeline needs a name (it keys the checkpoint)")
	}
	if err := c.S3.Check(); err != nil {
		return c.bad(strings.SplitN(err.Error(), ":", 2)[0], "%s", strings.TrimSpace(strings.SplitN(err.Error(), ":", 2)[1]))
	}
	if err := reg.CheckSource(c.Source, c.under("source")); err != nil {
		return err
	}
	src, _ := reg.Source(c.Source.Type)
	switch {
	case (src.NoPath || src.RawFormat != "") && c.Source.Path != "":
		return c.bad("source.path", "the %s source reads no path; its own keys name what it reads", c.Source.Type)
	case c.Source.Path == "" && !src.NoPath && src.RawFormat == "":
		return c.bad("source.path", "missing input path")
	case c.GN.Name == "" && (c.GN.Model == "" || c.GN.Tokenizer == ""):
		return c.bad("gn", "name a fetched GN (gn.name) or give gn.model and gn.tokenizer")
	case c.GN.Optimized && (c.GN.Name == "" || c.GN.Model != ""):
		return c.bad("gn.optimized", "picks the fused variant of the fetched GN gn.name; with gn.model set, point gn.model at the fused file instead")
	case c.GN.Optimized && !exists(c.GN.optimizedModel()):
		return c.bad("gn.optimized", "%s does not exist: make gn-optimized writes it (ops/bench/ortopt/optimize.py %s, in the peers venv)", c.GN.optimizedModel(), c.GN.Name)
	case !providerRe.MatchString(c.GN.Provider):
		return c.bad("gn.provider", "%q is not cpu or cuda:N", c.GN.Provider)
	case c.GN.IntraOpThreads < 0 || c.GN.InterOpThreads < 0:
		return c.bad("gn", "thread counts must be >= 0")
	case c.Chunking.K < 3 || c.Chunking.K > 512:
		return c.bad("chunking.k", "K=%d: must be in [3, 512] (the GN's position limit)", c.Chunking.K)
	case c.Chunking.S < 3 || c.Chunking.S > c.Chunking.K:
		return c.bad("chunking.s", "S=%d: must be in [3, K=%d]", c.Chunking.S, c.Chunking.K)
	case c.Chunking.Mode != "fixed" && c.Chunking.Mode != "anchored":
		return c.bad("chunking.mode", "%q is not fixed or anchored", c.Chunking.Mode)
	case c.Batching.TokenBudget < c.Chunking.K:
		return c.bad("batching.token_budget", "%d is smaller than one window (K=%d)", c.Batching.TokenBudget, c.Chunking.K)
	case c.Batching.MaxBatch < 1:
		return c.bad("batching.max_batch", "must be >= 1")
	case c.Batching.MaxWait.Duration <= 0:
		return c.bad("batching.max_wait", "must be > 0")
	case c.Cache.Dir == "":
		return c.bad("cache.dir", "missing")
	case objstore.IsS3(c.Cache.Dir):
		return c.bad("cache.dir", "must be a local folder: the chunk cache is looked up window by window while it is written, which an object store cannot serve at that rate; keep it on local disk (the vectors can go to a bucket)")
	case objstore.IsS3(c.Run.StateDir):
		return c.bad("run.state_dir", "must be a local folder: checkpoints are rewritten at every commit")
	case c.Cache.RowsPerShard < 1:
		return c.bad("cache.rows_per_shard", "must be >= 1")
	}
	if err := reg.CheckAggregate(c.Aggregate, c.under("aggregate")); err != nil {
		return err
	}
	switch {
	case len(c.Sinks) == 0:
		return c.bad("sinks", "at least one sink is needed")
	case c.Run.CommitEvery < 1:
		return c.bad("run.commit_every", "must be >= 1")
	case c.Run.CommitInterval.Duration <= 0:
		return c.bad("run.commit_interval", "must be > 0")
	case c.Run.TokenizeWorkers < 0:
		return c.bad("run.tokenize_workers", "must be >= 0")
	case c.Run.Queue < 1:
		return c.bad("run.queue", "must be >= 1")
	case c.Source.MaxDocBytes < 0:
		return c.bad("source.max_doc_bytes", "must be >= 0 (0: no bound)")
	case c.Run.DuplicateIDs < 0:
		return c.bad("run.duplicate_ids", "must be >= 0 (0: duplicates are not counted)")
	case c.Run.DeleteRetention.Duration < time.Minute:
		return c.bad("run.delete_retention", "must be at least 1m: a deletion must outlive the re-delivery of what it removed")
	case c.Run.InflightBytes < 0:
		return c.bad("run.inflight_bytes", "must be >= 0 (0: no bound)")
	case c.Run.Progress != "auto" && c.Run.Progress != "bar" && c.Run.Progress != "log" && c.Run.Progress != "off":
		return c.bad("run.progress", "%q is not auto, bar, log or off", c.Run.Progress)
	case c.Run.StateDir == "":
		return c.bad("run.state_dir", "missing")
	}
	dirs := map[string]bool{}
	for i, s := range c.Sinks {
		p := fmt.Sprintf("sinks.%d", i)
		if err := reg.CheckSink(s, c.under(p)); err != nil {
			return err
		}
		dir := s.Dir()
		if dir == "" {
			continue
		}
		if dirs[filepath.Clean(dir)] {
			return c.bad(p+".dir", "%s is used by another sink", dir)
		}
		dirs[filepath.Clean(dir)] = true
	}
	return c.validateTransport()
}

// optimizedModel is where make gn-optimized writes the fused variant of gn.name.
func (g GNConfig) optimizedModel() string {
	return filepath.Join(Home(), "gn", g.Name+"-opt", "model.onnx")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ModelPaths resolves the GN files: explicit paths win, else REIGNPIPE_HOME/gn/<name>/.
func (g GNConfig) ModelPaths() (model, tokenizer string) {
	model, tokenizer = g.Model, g.Tokenizer
	dir := filepath.Join(Home(), "gn", g.Name)
	if model == "" && g.Optimized {
		model = g.optimizedModel()
	}
	if model == "" {
		model = filepath.Join(dir, "model.onnx")
	}
	if tokenizer == "" {
		tokenizer = filepath.Join(dir, "tokenizer.json")
	}
	return model, tokenizer
}

// CheckFiles says, in the pipeline file's terms, which GN file is missing: a gn.name that was
// never fetched (with the fetched ones, and the nearest), or a gn.model or gn.tokenizer path
// that does not exist.
func (g GNConfig) CheckFiles() error {
	model, tok := g.ModelPaths()
	for _, f := range []struct{ key, set, path string }{{"gn.model", g.Model, model}, {"gn.tokenizer", g.Tokenizer, tok}} {
		if exists(f.path) {
			continue
		}
		if f.set != "" {
			return fmt.Errorf("%s: %s does not exist", f.key, f.path)
		}
		if g.Optimized {
			return fmt.Errorf("gn.optimized: %s does not exist: make gn-optimized writes it", f.path)
		}
		msg := fmt.Sprintf("gn.name: the GN %q is not fetched (%s does not exist)", g.Name, f.path)
		if fetched := fetchedGNs(); len(fetched) > 0 {
			if near := Nearest(g.Name, fetched); near != "" {
				msg += "; did you mean " + near + "?"
			} else {
				msg += "; fetched: " + strings.Join(fetched, ", ")
			}
		}
		if !strings.HasSuffix(msg, "?") {
			msg += "."
		}
		return errors.New(msg + " ops/fetch (make fetch) downloads the GNs reignpipe knows; for another model set gn.model and gn.tokenizer")
	}
	return nil
}

// fetchedGNs are the GN names with a model under REIGNPIPE_HOME/gn.
func fetchedGNs() []string {
	m, _ := filepath.Glob(filepath.Join(Home(), "gn", "*", "model.onnx"))
	names := make([]string, 0, len(m))
	for _, p := range m {
		names = append(names, filepath.Base(filepath.Dir(p)))
	}
	return names
}

// LibraryPath resolves the ORT library for the CPU provider; see LibraryFor.
func (r RuntimeConfig) LibraryPath() (string, error) { return r.LibraryFor("cpu") }

// LibraryFor resolves the ORT library for provider: explicit path, REIGNPIPE_ORT_LIB, or the
// newest one ops/fetch unpacked -- under ort/ for cpu, under ort-gpu/ (ops/fetch --gpu) for
// cuda:N, since the CPU build cannot run CUDA and the GPU build is 340 MB more to fetch.
func (r RuntimeConfig) LibraryFor(provider string) (string, error) {
	if r.ORTLibrary != "" {
		if !exists(r.ORTLibrary) {
			return r.ORTLibrary, fmt.Errorf("runtime.ort_library: %s does not exist (leave the key out to use the library ops/fetch puts under %s/ort)", r.ORTLibrary, Home())
		}
		return r.ORTLibrary, nil
	}
	if p := os.Getenv("REIGNPIPE_ORT_LIB"); p != "" {
		if !exists(p) {
			return p, fmt.Errorf("REIGNPIPE_ORT_LIB=%s: the file does not exist (unset it to use the library ops/fetch puts under %s/ort)", p, Home())
		}
		return p, nil
	}
	if strings.HasPrefix(provider, "cuda:") {
		matches, _ := filepath.Glob(filepath.Join(Home(), "ort-gpu", "*", "libonnxruntime.so"))
		if len(matches) == 0 {
			return "", fmt.Errorf("gn.provider %s needs the GPU build of ONNX Runtime and there is none under %s/ort-gpu: run ops/fetch --gpu, or set runtime.ort_library to a GPU build's libonnxruntime.so", provider, Home())
		}
		return matches[len(matches)-1], nil
	}
	matches, _ := filepath.Glob(filepath.Join(Home(), "ort", "*", "libonnxruntime.so"))
	if len(matches) == 0 {
		return "", fmt.Errorf("no ONNX Runtime library under %s/ort: run ops/fetch (or make fetch), or set runtime.ort_library", Home())
	}
	return matches[len(matches)-1], nil
}

// LibraryPath is the ORT library for this pipeline's gn.provider.
func (c *Config) LibraryPath() (string, error) { return c.Runtime.LibraryFor(c.GN.Provider) }
