package pipelines

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/stages/gn/gnbatch"
)

const minimal = `version: 1
name: t
source:
  type: jsonl
  path: in.jsonl
sinks:
  - type: parquet
    dir: out/v
`

const kafkaTransport = "transport:\n  type: kafka\n  kafka: {brokers: [\"b:9092\"], topics: p}\n"

// Each kafka sink format is accepted; none given is rpdv's "".
func TestKafkaSinkFormats(t *testing.T) {
	for _, f := range []string{"", "rpdv", "json", "connect-json"} {
		sink := "type: kafka"
		if f != "" {
			sink += "\n    format: " + f
		}
		c, err := Parse([]byte(strings.Replace(minimal, "type: parquet\n    dir: out/v", sink, 1) + kafkaTransport))
		if err != nil {
			t.Fatalf("format %q: %v", f, err)
		}
		if got := components.KafkaSettings(c.Sinks[0]).Format; got != f {
			t.Fatalf("format %q read as %q", f, got)
		}
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.Chunking.K != 512 || c.Chunking.S != 512 || c.GN.Name != "bge-small-en-v15" || c.Batching.MaxWait.Duration != 20*time.Millisecond {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestRejectsWithLine(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown key", minimal + "chunking:\n  k: 512\n  stride: 3\n", "line 11: chunking.stride: unknown key"},
		{"S greater than K", minimal + "chunking:\n  k: 256\n  s: 300\n", "line 11: chunking.s"},
		{"K too big", minimal + "chunking:\n  k: 1024\n", "line 10: chunking.k"},
		{"bad provider", minimal + "gn:\n  provider: tpu\n", "line 10: gn.provider"},
		{"bad duration", minimal + "batching:\n  max_wait: soon\n", "line 10"},
		{"unknown sink", strings.Replace(minimal, "type: parquet", "type: csv", 1), "line 7: sinks.0.type"},
		{"duplicate sink dir", minimal + "  - type: jsonl\n    dir: out/v\n", "line 10: sinks.1.dir"},
		{"sections on jsonl", strings.Replace(minimal, "  path: in.jsonl\n", "  path: in.jsonl\n  sections: [claims]\n", 1), "line 6: source.sections"},
		{"unknown section", strings.Replace(strings.Replace(minimal, "type: jsonl", "type: uspto", 1), "  path: in.jsonl\n", "  path: in.jsonl\n  sections: [claims, drawings]\n", 1), "line 6: source.sections: uspto: unknown section \"drawings\""},
		{"unknown source", strings.Replace(minimal, "type: jsonl", "type: rss", 1), "line 4: source.type"},
		{"no name", strings.Replace(minimal, "name: t\n", "", 1), "name"},
		{"bad version", strings.Replace(minimal, "version: 1", "version: 2", 1), "line 1: version"},
		{"wrong type", minimal + "run:\n  queue: many\n", "line 10"},
		{"settle without watch", strings.Replace(minimal, "  path: in.jsonl\n", "  path: in.jsonl\n  settle: 5s\n", 1), "source.settle: applies only with watch"},
		{"negative settle", strings.Replace(minimal, "  path: in.jsonl\n", "  path: in.jsonl\n  watch: true\n  settle: -1s\n", 1), "source.settle: must be >= 0"},
		{"negative workers", minimal + "run:\n  tokenize_workers: -1\n", "line 10: run.tokenize_workers"},
		{"unknown source names the registered ones", strings.Replace(minimal, "type: jsonl", "type: rss", 1), "unknown source \"rss\" (wikipedia, jsonl, uspto, postgres, debezium)"},
		{"watch on wikipedia", strings.Replace(minimal, "type: jsonl", "type: wikipedia\n  watch: true", 1), "line 5: source.watch: applies only to the jsonl and uspto sources"},
		{"workers on jsonl", strings.Replace(minimal, "  path: in.jsonl\n", "  path: in.jsonl\n  workers: 4\n", 1), "line 6: source.workers: applies only to the wikipedia source"},
		{"checkpoint on meanpool", minimal + "aggregate:\n  checkpoint: ck\n", "line 10: aggregate.checkpoint: applies only to the reign aggregator"},
		{"reign without checkpoint", minimal + "aggregate:\n  type: reign\n", "aggregate.checkpoint: reign needs a checkpoint directory"},
		{"unknown aggregation", minimal + "aggregate:\n  type: max\n", "line 10: aggregate.type: unknown aggregation \"max\" (meanpool, reign)"},
		{"dir on a kafka sink", strings.Replace(minimal, "type: parquet", "type: kafka", 1), "line 8: sinks.0.dir: applies only to the parquet and jsonl sinks"},
		{"topic on a parquet sink", minimal + "    topic: v\n", "line 9: sinks.0.topic: applies only to the kafka sink"},
		{"kafka sink without kafka", strings.Replace(minimal, "type: parquet\n    dir: out/v", "type: kafka", 1), "line 7: sinks.0.type: a kafka sink needs transport.type: kafka"},
		{"unknown kafka format", strings.Replace(minimal, "type: parquet\n    dir: out/v", "type: kafka\n    format: avro", 1) + kafkaTransport,
			`line 8: sinks.0.format: "avro" is not rpdv, json or connect-json`},
		{"format on a parquet sink", minimal + "    format: json\n", "line 9: sinks.0.format: applies only to the kafka sink"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", c.yaml)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

// A key another type reads is refused under this one even at its default or empty: no
// component of this type reads it, so it can only be a left-over of another type or a slip.
// A type's own keys at their defaults are accepted.
func TestOtherTypesKeys(t *testing.T) {
	src := func(typ, extra string) string {
		return strings.Replace(strings.Replace(minimal, "type: jsonl", "type: "+typ, 1), "  path: in.jsonl\n", "  path: in.jsonl\n"+extra, 1)
	}
	cases := []struct{ name, yaml, want string }{
		{"workers 0 on jsonl", src("jsonl", "  workers: 0\n"), "line 6: source.workers: applies only to the wikipedia source"},
		{"empty sections on jsonl", src("jsonl", "  sections: []\n"), "line 6: source.sections: applies only to the uspto source"},
		{"null index on uspto", src("uspto", "  index:\n"), "line 6: source.index: applies only to the wikipedia source"},
		{"single_chunk on meanpool", minimal + "aggregate:\n  single_chunk: reign\n", "line 10: aggregate.single_chunk: applies only to the reign aggregator"},
		{"dsn on jsonl sink", minimal + "    dsn: \"\"\n", "line 9: sinks.0.dsn: applies only to the pgvector sink"},
		{"own keys at defaults", src("wikipedia", "  workers: 0\n  index: \"\"\n") + "aggregate:\n  type: meanpool\n", ""},
		{"watch keys at defaults", src("uspto", "  watch: false\n  sections: [title, claims]\n"), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml))
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("%v, want %q\n%s", err, c.want, c.yaml)
			}
		})
	}
}

// The shipped pipeline files must stay valid.
func TestShippedPipelinesLoad(t *testing.T) {
	files, _ := filepath.Glob("*.yaml")
	if len(files) == 0 {
		t.Fatal("no pipeline files")
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestFieldErrorUnwraps(t *testing.T) {
	_, err := Parse([]byte(minimal + "chunking:\n  s: 1\n"))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "chunking.s" || fe.Line != 10 {
		t.Fatalf("got %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "none.yaml")); !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "no pipeline file ") {
		t.Fatalf("missing file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte("version: 1\nname: [\n"))
	f.Add([]byte("sinks: {a: b}\n"))
	f.Add([]byte(pgvectorPipeline + "    index: deferred\n    retry_timeout: 5s\n"))
	f.Add([]byte(strings.Replace(minimal, "type: jsonl", "type: uspto\n  <<: {watch: true, sections: [claims]}", 1)))
	f.Add([]byte("x: &s {type: pgvector, dsn: d}\nsinks: [*s, {type: kafka, topic: t}]\naggregate: {type: reign, checkpoint: c}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err == nil && c.Validate() != nil {
			t.Fatal("Parse accepted a config that Validate rejects")
		}
	})
}

// TestBatchingDefaultsByProvider: keys left out take the provider's defaults, the same table the
// GN batcher reads; written keys are kept whatever the provider.
func TestBatchingDefaultsByProvider(t *testing.T) {
	tests := []struct {
		name, extra      string
		budget, maxBatch int
	}{
		{"cpu by default", "", gnbatch.For("cpu").TokenBudget, gnbatch.For("cpu").MaxBatch},
		{"cuda", "gn:\n  provider: cuda:0\n", gnbatch.For("cuda:0").TokenBudget, gnbatch.For("cuda:0").MaxBatch},
		{"written on cuda", "gn:\n  provider: cuda:1\nbatching:\n  token_budget: 4096\n", 4096, gnbatch.For("cuda:1").MaxBatch},
		{"written on cpu", "batching:\n  token_budget: 16384\n  max_batch: 8\n", 16384, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(minimal + tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			if c.Batching.TokenBudget != tc.budget || c.Batching.MaxBatch != tc.maxBatch {
				t.Errorf("batching = %+v, want budget %d, max batch %d", c.Batching, tc.budget, tc.maxBatch)
			}
		})
	}
	if gnbatch.For("cpu").TokenBudget >= gnbatch.For("cuda:0").TokenBudget {
		t.Errorf("cpu budget %d is not below the cuda one %d", gnbatch.For("cpu").TokenBudget, gnbatch.For("cuda:0").TokenBudget)
	}
	if _, err := Parse([]byte(minimal + "batching:\n  token_budget: 0\n")); err == nil {
		t.Error("a written token_budget of 0 was accepted")
	}
}

// cuda:N takes the GPU build from ort-gpu/ (ops/fetch --gpu), never the CPU build in ort/, and
// says how to get it when it is missing; cpu keeps the ort/ one even when both are there.
func TestLibraryForProvider(t *testing.T) {
	home := t.TempDir()
	t.Setenv("REIGNPIPE_HOME", home)
	t.Setenv("REIGNPIPE_ORT_LIB", "")
	put := func(rel string) string {
		p := filepath.Join(home, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cpu := put("ort/1.24.2/libonnxruntime.so")
	var r RuntimeConfig
	if got, err := r.LibraryFor("cpu"); err != nil || got != cpu {
		t.Fatalf("cpu: %q, %v; want %s", got, err, cpu)
	}
	if _, err := r.LibraryFor("cuda:0"); err == nil || !strings.Contains(err.Error(), "ops/fetch --gpu") {
		t.Fatalf("cuda:0 without the GPU build: %v", err)
	}
	gpu := put("ort-gpu/1.24.2/libonnxruntime.so")
	if got, err := r.LibraryFor("cuda:1"); err != nil || got != gpu {
		t.Fatalf("cuda:1: %q, %v; want %s", got, err, gpu)
	}
	if got, _ := r.LibraryFor(""); got != cpu {
		t.Fatalf("default provider took %s", got)
	}
	c := Config{Runtime: RuntimeConfig{ORTLibrary: "/x/libonnxruntime.so"}, GN: GNConfig{Provider: "cuda:0"}}
	if got, _ := c.LibraryPath(); got != "/x/libonnxruntime.so" {
		t.Fatalf("runtime.ort_library ignored: %s", got)
	}
}

// gn.optimized takes the fused variant <name>-opt (its own file, so its own fingerprint), says
// how to make it when it is missing, and refuses to guess beside an explicit gn.model.
func TestGNOptimized(t *testing.T) {
	home := t.TempDir()
	t.Setenv("REIGNPIPE_HOME", home)
	const opt = "gn:\n  name: bge-small-en-v15\n  optimized: true\n"
	if _, err := Parse([]byte(minimal + opt)); err == nil || !strings.Contains(err.Error(), "make gn-optimized") {
		t.Fatalf("missing variant: %v", err)
	}
	variant := filepath.Join(home, "gn", "bge-small-en-v15-opt", "model.onnx")
	if err := os.MkdirAll(filepath.Dir(variant), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(variant, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]byte(minimal + opt))
	if err != nil {
		t.Fatal(err)
	}
	model, tok := c.GN.ModelPaths()
	if model != variant || tok != filepath.Join(home, "gn", "bge-small-en-v15", "tokenizer.json") {
		t.Fatalf("optimized paths %s, %s", model, tok)
	}
	if _, err := Parse([]byte(minimal + opt + "  model: /x/model.onnx\n")); err == nil || !strings.Contains(err.Error(), "gn.optimized") {
		t.Fatalf("optimized with an explicit model: %v", err)
	}
	plain, err := Parse([]byte(minimal + "gn:\n  name: bge-small-en-v15\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := plain.GN.ModelPaths(); m != filepath.Join(home, "gn", "bge-small-en-v15", "model.onnx") {
		t.Fatalf("default model %s", m)
	}
}

// A GN file that is not there is named by the key it comes from, with the fetched GNs (and
// the nearest) when gn.name was never fetched.
func TestGNFilesMissing(t *testing.T) {
	home := t.TempDir()
	t.Setenv("REIGNPIPE_HOME", home)
	for _, name := range []string{"bge-small-en-v15", "all-minilm-l6-v2"} {
		d := filepath.Join(home, "gn", name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"model.onnx", "tokenizer.json"} {
			if err := os.WriteFile(filepath.Join(d, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		gn   GNConfig
		want string // "" = no error
	}{
		{GNConfig{Name: "bge-small-en-v15"}, ""},
		{GNConfig{Name: "bge-small-en-v1"}, `gn.name: the GN "bge-small-en-v1" is not fetched (` + filepath.Join(home, "gn", "bge-small-en-v1", "model.onnx") + ` does not exist); did you mean bge-small-en-v15? ops/fetch`},
		{GNConfig{Name: "e5-large"}, "; fetched: all-minilm-l6-v2, bge-small-en-v15. ops/fetch (make fetch) downloads the GNs reignpipe knows"},
		{GNConfig{Name: "x", Model: "/none/model.onnx", Tokenizer: filepath.Join(home, "gn", "bge-small-en-v15", "tokenizer.json")}, "gn.model: /none/model.onnx does not exist"},
		{GNConfig{Name: "bge-small-en-v15", Tokenizer: "/none/tok.json"}, "gn.tokenizer: /none/tok.json does not exist"},
	}
	for _, c := range cases {
		err := c.gn.CheckFiles()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.gn, err, c.want)
		}
	}
}

// An ONNX Runtime library path that does not exist is named by where it was set.
func TestLibraryMissing(t *testing.T) {
	t.Setenv("REIGNPIPE_ORT_LIB", "/none/lib.so")
	if _, err := (RuntimeConfig{}).LibraryFor("cpu"); err == nil || !strings.HasPrefix(err.Error(), "REIGNPIPE_ORT_LIB=/none/lib.so: the file does not exist") {
		t.Errorf("environment: %v", err)
	}
	if _, err := (RuntimeConfig{ORTLibrary: "/none/lib2.so"}).LibraryFor("cpu"); err == nil || !strings.HasPrefix(err.Error(), "runtime.ort_library: /none/lib2.so does not exist") {
		t.Errorf("runtime.ort_library: %v", err)
	}
}
