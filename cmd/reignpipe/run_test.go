package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine"
)

// corpusTexts are the test documents: short, empty-ish and one long enough for three windows.
func corpusTexts() map[string]string {
	long := strings.Repeat("The guidance network embeds every window of a long document once; "+
		"REIGN reads the sequence of chunk embeddings and returns one vector. ", 60)
	return map[string]string{
		"a": "Anarchism is a political philosophy and movement that is skeptical of all justifications for authority.",
		"b": "Café Ångström: naïve façade, Dvořák's 交响曲 No. 9 — [SEP] inside text.",
		"c": long,
		"d": "x",
	}
}

func writeCorpus(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "corpus.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for id, text := range corpusTexts() {
		b, _ := json.Marshal(map[string]string{"id": id, "title": "doc " + id, "text": text})
		fmt.Fprintln(f, string(b))
	}
	fmt.Fprintln(f, `{"id": "broken", "text": `) // a bad input: dead-lettered, the run goes on
	f.Close()
	return path
}

func testConfig(t *testing.T, dir, input string) *pipelines.Config {
	t.Helper()
	yaml := fmt.Sprintf(`version: 1
name: e2e
source: {type: jsonl, path: %q, name: t}
gn: {name: bge-small-en-v15}
batching: {max_wait: 5ms}
cache: {dir: %q, rows_per_shard: 2}
sinks:
  - {type: parquet, dir: %q}
  - {type: jsonl, dir: %q}
run: {state_dir: %q, summary: %q, progress: off, commit_every: 2}
`, input, filepath.Join(dir, "cache"), filepath.Join(dir, "vectors"), filepath.Join(dir, "vectors-jsonl"),
		filepath.Join(dir, "state"), filepath.Join(dir, "summary.json"))
	cfg, err := pipelines.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestRunEndToEnd runs the real pipeline (our tokenizer, the real GN on ONNX Runtime, shards,
// both sinks) on a small corpus and checks the document vectors against the Python reference
// (HF tokenizers + onnxruntime chunk embeddings, mean-pooled), then re-runs it: the second run
// must send no window to the GN and write identical vectors.
func TestRunEndToEnd(t *testing.T) {
	model, tokPath := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	py := testenv.Python(t, "onnxruntime", "tokenizers", "numpy")
	dir := t.TempDir()
	cfg := testConfig(t, dir, writeCorpus(t, dir))
	cfg.GN.Model, cfg.GN.Tokenizer = model, tokPath

	sum, err := run(context.Background(), cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	if sum.InputsRead != 5 || sum.DocsWritten != 4 || sum.DocsFailed != 1 || sum.Stopped != "completed" {
		t.Fatalf("summary %+v", sum)
	}
	if sum.GNWindows != sum.Windows || sum.Windows < 6 {
		t.Fatalf("first run: %d windows, %d to the GN", sum.Windows, sum.GNWindows)
	}
	dl, _ := os.ReadFile(filepath.Join(dir, "state", "e2e.deadletter.jsonl"))
	if !strings.Contains(string(dl), "line 5") {
		t.Fatalf("dead letter does not name the bad line: %s", dl)
	}
	first, err := vectorfile.Latest(filepath.Join(dir, "vectors"))
	if err != nil || len(first) != 4 {
		t.Fatalf("parquet vectors: %d, %v", len(first), err)
	}
	fromJSONL, err := vectorfile.Latest(filepath.Join(dir, "vectors-jsonl"))
	if err != nil || len(fromJSONL) != 4 {
		t.Fatalf("jsonl vectors: %d, %v", len(fromJSONL), err)
	}

	// The reference: chunk embeddings from the Python oracle, mean-pooled and normalised.
	ids := []string{"a", "b", "c", "d"}
	var in strings.Builder
	for _, id := range ids {
		b, _ := json.Marshal(map[string]string{"text": corpusTexts()[id]})
		in.Write(append(b, '\n'))
	}
	cmd := exec.Command(py, filepath.Join(testenv.Root(), "ops", "oracles", "gn_reference.py"), model, tokPath, "512")
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 64<<20)
	for _, id := range ids {
		if !sc.Scan() {
			t.Fatal("oracle output ended early")
		}
		var ref struct {
			Windows    [][]int32   `json:"windows"`
			Embeddings [][]float64 `json:"embeddings"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ref); err != nil {
			t.Fatal(err)
		}
		mean := make([]float64, len(ref.Embeddings[0]))
		for _, e := range ref.Embeddings {
			for j, v := range e {
				mean[j] += v
			}
		}
		got := first["t:"+id]
		if got.NChunks != len(ref.Windows) {
			t.Fatalf("%s: %d chunks, reference %d", id, got.NChunks, len(ref.Windows))
		}
		var dot, nm, ng float64
		for j := range mean {
			dot += mean[j] * float64(got.Vector[j])
			nm += mean[j] * mean[j]
			ng += float64(got.Vector[j]) * float64(got.Vector[j])
		}
		if cos := dot / math.Sqrt(nm*ng); cos < 0.99999 {
			t.Fatalf("%s: cosine to reference %.7f", id, cos)
		}
		if j := fromJSONL["t:"+id]; j.ContentHash != got.ContentHash || j.Vector[0] != got.Vector[0] {
			t.Fatalf("%s: jsonl and parquet sinks disagree", id)
		}
	}

	// Same input again from scratch: everything from the cache.
	sum2, err := run(context.Background(), cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	if sum2.GNWindows != 0 || sum2.CacheHits != sum.Windows || sum2.DocsWritten != 4 {
		t.Fatalf("second run: %+v", sum2)
	}
	second, err := vectorfile.Latest(filepath.Join(dir, "vectors"))
	if err != nil {
		t.Fatal(err)
	}
	for id, v := range first {
		for j := range v.Vector {
			if second[id].Vector[j] != v.Vector[j] {
				t.Fatalf("%s: vector from cache differs", id)
			}
		}
	}

	// Without --from-scratch the checkpoint says everything is done: nothing is reprocessed.
	sum3, err := run(context.Background(), cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	if sum3.DocsResumed != 5 || sum3.DocsWritten != 0 || sum3.Windows != 0 {
		t.Fatalf("resumed run: %+v", sum3)
	}
}

// A folder's checkpoint counts inputs over its files in name order: a file added later that
// sorts first must not shift the watermark over its documents (they would never be written).
func TestRunFolderCheckpointSeesAnEarlierFile(t *testing.T) {
	model, tokPath := testenv.GN(t, "all-minilm-l6-v2")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	dir := t.TempDir()
	feed := filepath.Join(dir, "feed")
	write := func(name string, ids ...string) {
		t.Helper()
		var b strings.Builder
		for _, id := range ids {
			line, _ := json.Marshal(map[string]string{"id": id, "title": id, "text": "document " + id + " about windows and vectors"})
			b.Write(append(line, '\n'))
		}
		if err := os.MkdirAll(feed, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(feed, name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runOnce := func() *engine.Summary {
		t.Helper()
		cfg := testConfig(t, dir, feed)
		cfg.GN.Model, cfg.GN.Tokenizer = model, tokPath
		sum, err := run(context.Background(), cfg, false)
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	write("b.jsonl", "b1", "b2")
	if s := runOnce(); s.DocsWritten != 2 {
		t.Fatalf("first run wrote %d", s.DocsWritten)
	}
	write("a.jsonl", "a1", "a2")
	s := runOnce()
	if s.DocsResumed != 0 || s.DocsWritten != 4 {
		t.Fatalf("after adding an earlier file: resumed %d written %d, want 0 and 4", s.DocsResumed, s.DocsWritten)
	}
	got, err := vectorfile.Latest(filepath.Join(dir, "vectors"))
	if err != nil || len(got) != 4 {
		t.Fatalf("vectors: %d, %v", len(got), err)
	}
	write("c.jsonl", "c1")
	if s := runOnce(); s.DocsResumed != 4 || s.DocsWritten != 1 {
		t.Fatalf("after appending a later file: resumed %d written %d, want 4 and 1", s.DocsResumed, s.DocsWritten)
	}
}
