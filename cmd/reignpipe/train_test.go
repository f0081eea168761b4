package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/quality/train"
	"github.com/reignpipe/reignpipe/stages/reign"
)

// trainPython returns the trainer's interpreter, or skips (fails under REIGNPIPE_STRICT=1)
// when `make train-deps` has not built it.
func trainPython(t *testing.T) string {
	t.Helper()
	py, err := train.Python("")
	if err == nil {
		var out []byte
		if out, err = exec.Command(py, "-c", "import torch, safetensors, pyarrow, numpy").CombinedOutput(); err != nil {
			err = fmt.Errorf("%s cannot import the trainer's packages: %v\n%s", py, err, out)
		}
	}
	if err != nil {
		if os.Getenv("REIGNPIPE_STRICT") == "1" {
			t.Fatalf("trainer Python missing: %v (make train-deps installs ops/train/requirements.txt)", err)
		}
		t.Skipf("trainer Python missing: %v (make train-deps installs ops/train/requirements.txt)", err)
	}
	return py
}

// TestTrainerUnitTests runs the trainer's Python unit tests (parameter counts per size, the
// PyTorch encoder against the NumPy reference, loss values on hand-made vectors, metrics,
// seeded determinism, input validation).
func TestTrainerUnitTests(t *testing.T) {
	py := trainPython(t)
	dir := filepath.Join(testenv.Root(), "ops", "train")
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "tests", "-t", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("\nOK")) {
		t.Fatalf("python -m unittest: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("Ran ")) || bytes.Contains(out, []byte("Ran 0 tests")) {
		t.Fatalf("no Python test ran:\n%s", out)
	}
}

// Topic words for the synthetic training set: documents of one topic are the partials of
// each other's queries.
var trainTopics = [][]string{
	{"volcano", "magma", "lava", "crater", "eruption", "ash", "basalt", "caldera"},
	{"violin", "orchestra", "symphony", "melody", "conductor", "harmony", "concerto", "rehearsal"},
	{"bread", "dough", "yeast", "oven", "flour", "crust", "bakery", "sourdough"},
	{"telescope", "galaxy", "nebula", "orbit", "comet", "planet", "astronomer", "eclipse"},
	{"chess", "bishop", "gambit", "endgame", "knight", "tournament", "checkmate", "opening"},
	{"beehive", "nectar", "pollen", "queen", "honeycomb", "swarm", "beekeeper", "wax"},
	{"sailboat", "harbour", "mast", "keel", "regatta", "tide", "anchor", "voyage"},
	{"surgeon", "clinic", "vaccine", "diagnosis", "patient", "fever", "therapy", "hospital"},
}

var (
	trainNames  = []string{"Arvel", "Brisa", "Corwin", "Delphine", "Eskil", "Fenna", "Gideon"}
	trainPlaces = []string{"Oskarby", "Quellin", "Ravensmoor", "Sundvik", "Tarrow", "Ulmbridge"}
)

// writeTrainBEIR writes n documents of six paragraphs each: a query is a document's first
// three paragraphs, its positive (score 2) the last three, and one document of the same topic
// is a partial (score 1). Queries are split by document into train, val and test.
func writeTrainBEIR(t *testing.T, dir string, n int) {
	t.Helper()
	para := func(doc, p int) string {
		// A query (first half) and its positive (second half) share the topic and word order
		// patterns but not the narrator or the place, so the GN alone does not rank every
		// positive first and the per-query scores spread.
		topic := trainTopics[doc%len(trainTopics)]
		name, place := trainNames[doc%len(trainNames)], trainPlaces[doc%len(trainPlaces)]
		if p >= 3 {
			name, place = trainNames[(doc+5)%len(trainNames)], trainPlaces[(doc+1)%len(trainPlaces)]
		}
		var b strings.Builder
		for s := 0; s < 3; s++ {
			w := func(i int) string { return topic[(doc*3+doc/len(trainTopics)+p*5+s*7+i)%len(topic)] }
			fmt.Fprintf(&b, "In the %s chapter %s of %s describes the %s and the %s, and why the %s matters to every %s. ",
				[]string{"first", "second", "third", "fourth", "fifth", "sixth"}[p], name, place, w(0), w(1), w(2), w(3))
		}
		return b.String()
	}
	var corpus, queries strings.Builder
	qrels := map[string]*strings.Builder{"train": {}, "val": {}, "test": {}}
	for i := 0; i < n; i++ {
		var head, tail []string
		for p := 0; p < 6; p++ {
			if p < 3 {
				head = append(head, para(i, p))
			} else {
				tail = append(tail, para(i, p))
			}
		}
		c, _ := json.Marshal(map[string]string{"_id": fmt.Sprintf("d%02d", i), "title": "", "text": strings.Join(tail, "\n\n")})
		q, _ := json.Marshal(map[string]string{"_id": fmt.Sprintf("q%02d", i), "text": strings.Join(head, "\n\n")})
		corpus.Write(append(c, '\n'))
		queries.Write(append(q, '\n'))
		split := "train"
		if i >= n/2 {
			split = "val"
		}
		if i >= 3*n/4 {
			split = "test"
		}
		partial := (i + len(trainTopics)) % n
		fmt.Fprintf(qrels[split], "q%02d\td%02d\t2\nq%02d\td%02d\t1\n", i, i, i, partial)
	}
	if err := os.MkdirAll(filepath.Join(dir, "qrels"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"corpus.jsonl": corpus.String(), "queries.jsonl": queries.String()}
	for s, b := range qrels {
		files["qrels/"+s+".tsv"] = "query-id\tcorpus-id\tscore\n" + b.String()
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTrainREIGN trains tiny-l1 on a small dataset encoded through the real pipeline (real GN,
// chunk cache): the checkpoint loads in the Go REIGN stage, `reignpipe eval` with it gives the
// per-query nDCG@10 the trainer computed for itself on val and test, and a second training run
// embeds no window (all served from the cache).
func TestTrainREIGN(t *testing.T) {
	model, tokPath := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	trainPython(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "beir")
	writeTrainBEIR(t, data, 24)
	cfg := testConfig(t, dir, filepath.Join(dir, "unused.jsonl"))
	cfg.GN.Model, cfg.GN.Tokenizer = model, tokPath
	// Short windows make every document several chunks without long texts to embed.
	cfg.Chunking.K, cfg.Chunking.S = 48, 40
	cfg.Cache.RowsPerShard = 64
	out := filepath.Join(dir, "train")
	var log bytes.Buffer
	opts := train.Options{Encode: encodeInProcess, Data: data, Out: out, Size: "tiny-l1", Loss: "cosine3", Epochs: 3, Seed: 42,
		Extra: []string{"--lr", "1e-3", "--threads", "2"}, Stdout: &log, Stderr: &log}
	sum, err := train.Run(context.Background(), cfg, opts)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Logf("trainer output:\n%s", log.String())
	if sum.Corpus != 24 || sum.Queries != 24 || sum.Encode.GNWindows == 0 || sum.Encode.Windows != sum.Encode.GNWindows+sum.Encode.GNShared+sum.Encode.CacheHits {
		t.Fatalf("summary %+v", sum)
	}
	if sum.IndexWindows != sum.Encode.Windows || sum.IndexWindows < 2*48 { // every document is 2+ windows
		t.Fatalf("%d windows in the sequences index, %d encoded", sum.IndexWindows, sum.Encode.Windows)
	}
	if !strings.Contains(log.String(), "device ") || !strings.Contains(log.String(), "12 training pairs") {
		t.Fatalf("trainer output:\n%s", log.String())
	}
	for _, f := range []string{"best/config.json", "best/model.safetensors", "best/reignpipe-manifest.json",
		"last/model.safetensors", "train-log.jsonl", "eval-trainer.json", "train-summary.json", train.SequencesFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
	logLines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(out, "train-log.jsonl"))), "\n")
	if len(logLines) != 3 {
		t.Fatalf("train-log.jsonl has %d lines", len(logLines))
	}
	m, ok, err := reign.ReadManifest(filepath.Join(out, "best"))
	if err != nil || !ok || m.GNName != "bge-small-en-v15" || m.GNDim != 384 || m.K != 48 || m.S != 40 ||
		m.GNFingerprint != gnFingerprint(t, model, tokPath) {
		t.Fatalf("manifest %+v ok=%v err=%v", m, ok, err)
	}

	var rep struct {
		K      int `json:"k"`
		Splits map[string]struct {
			PerQuery map[string]float64 `json:"per_query"`
		} `json:"splits"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(out, "eval-trainer.json"))), &rep); err != nil {
		t.Fatal(err)
	}
	// The Go side loads the checkpoint (buildAggregator checks its space) and evaluates it.
	cfg.Aggregate = components.WithCheckpoint(cfg.Aggregate, filepath.Join(out, "best"))
	for _, split := range []string{"val", "test"} {
		want := rep.Splits[split].PerQuery
		if len(want) != 6 {
			t.Fatalf("%s: trainer scored %d queries, want 6", split, len(want))
		}
		evalOut := filepath.Join(dir, "eval-"+split)
		es, err := evaluateDir(context.Background(), cfg, data, split, rep.K, true, evalOut)
		if err != nil {
			t.Fatal(err)
		}
		if es.GNWindows != 0 {
			t.Fatalf("%s: eval embedded %d windows; the cache should serve all", split, es.GNWindows)
		}
		got := readPerQuery(t, filepath.Join(evalOut, "per-query-reign.tsv"))
		if len(got) != len(want) {
			t.Fatalf("%s: Go scored %d queries, trainer %d", split, len(got), len(want))
		}
		for q, w := range want {
			g, ok := got[q]
			if !ok || math.Abs(g-w) > 1e-4 {
				t.Fatalf("%s %s: Go nDCG@10 %v (present %v), trainer %v", split, q, g, ok, w)
			}
		}
		t.Logf("%s: per-query nDCG@10 of %d queries agree (Go %v)", split, len(got), got)
	}

	// Training again: the chunk cache serves every window.
	log.Reset()
	opts.Out, opts.Epochs = filepath.Join(dir, "train2"), 1
	again, err := train.Run(context.Background(), cfg, opts)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if again.Encode.GNWindows != 0 || again.Encode.CacheHits != sum.Encode.Windows {
		t.Fatalf("second training: %+v, first %+v", again.Encode, sum.Encode)
	}
}

func TestCmdTrainUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"--data", "x", "p.yaml"}, {"--out", "x", "p.yaml"}, {"--data", "x", "--out", "y"}} {
		if err := cmdTrain(context.Background(), args); err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readPerQuery reads a per-query TSV of `reignpipe eval`: query id -> nDCG.
func readPerQuery(t *testing.T, path string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(readFile(t, path)))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < 2 {
			t.Fatalf("%s: row %q", path, sc.Text())
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", path, sc.Text(), err)
		}
		out[f[0]] = v
	}
	return out
}
