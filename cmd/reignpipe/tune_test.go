package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines/quality/tune"
)

// writeTuneCorpus writes n documents of six topic paragraphs each as pipeline input.
func writeTuneCorpus(t *testing.T, dir string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < n; i++ {
		topic := trainTopics[i%len(trainTopics)]
		var paras []string
		for p := 0; p < 6; p++ {
			w := func(j int) string { return topic[(i*3+p*5+j)%len(topic)] }
			paras = append(paras, fmt.Sprintf("In part %d %s of %s writes about the %s and the %s, and why the %s matters to every %s.",
				p, trainNames[(i+p/3)%len(trainNames)], trainPlaces[(i*2+p/3)%len(trainPlaces)], w(0), w(1), w(2), w(3)))
		}
		line, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("doc%02d", i), "title": "", "text": strings.Join(paras, "\n\n")})
		b.Write(append(line, '\n'))
	}
	path := filepath.Join(dir, "corpus.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTune runs the pipeline once to fill the chunk cache, then tune with a tiny REIGN: tune
// adds no window to the cache (0 GN windows), its split is the seeded hash of the doc ids,
// tune-summary.json holds the figures and per-query scores, and its decision is the rule's.
func TestTune(t *testing.T) {
	model, tokPath := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	trainPython(t)
	dir := t.TempDir()
	cfg := testConfig(t, dir, writeTuneCorpus(t, dir, 40))
	cfg.GN.Model, cfg.GN.Tokenizer = model, tokPath
	cfg.Chunking.K, cfg.Chunking.S = 48, 40
	cfg.Cache.RowsPerShard = 64
	if _, err := run(context.Background(), cfg, false); err != nil {
		t.Fatal(err)
	}
	shards := func() []string {
		m, _ := filepath.Glob(filepath.Join(cfg.Cache.Dir, "shards", "*.parquet"))
		return m
	}
	before := shards()

	out := filepath.Join(dir, "tune")
	var log bytes.Buffer
	start := time.Now()
	sum, err := tune.Run(context.Background(), cfg, tune.Options{Out: out, Size: "tiny-l1", Epochs: 2, Seed: 42,
		ValPct: 20, TestPct: 30, Apply: true, Extra: []string{"--lr", "1e-3", "--threads", "2"}, Stdout: &log, Stderr: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Logf("tune on %d documents took %s (training %.1fs)", sum.Documents, time.Since(start).Round(time.Millisecond), sum.TrainSeconds)
	if after := shards(); sum.GNWindows != 0 || len(after) != len(before) {
		t.Fatalf("gn_windows %d, shards %d -> %d: tune embedded windows", sum.GNWindows, len(before), len(after))
	}
	if sum.Documents != 40 || sum.Usable != 40 {
		t.Fatalf("documents %d, usable %d", sum.Documents, sum.Usable)
	}
	// The split is the seeded hash of the cache's doc ids ("t:docNN").
	want := map[string]int{}
	for i := 0; i < 40; i++ {
		want[tune.Assign(fmt.Sprintf("t:doc%02d", i), 42, 20, 30)]++
	}
	for _, s := range []string{tune.Train, tune.Val, tune.Test} {
		if sum.Splits[s] != want[s] {
			t.Fatalf("splits %v, the hash gives %v", sum.Splits, want)
		}
	}
	qrels := readFile(t, filepath.Join(out, "splits", "qrels", "val.tsv"))
	if strings.Count(qrels, "\n")-1 != want[tune.Val] {
		t.Fatalf("val qrels:\n%s", qrels)
	}

	var got tune.Summary
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(out, "tune-summary.json"))), &got); err != nil {
		t.Fatal(err)
	}
	if got.TestQueries != want[tune.Test] || len(got.PerQuery) != got.TestQueries || got.Figures == nil || got.Reason == "" {
		t.Fatalf("summary %+v", got)
	}
	f := got.Figures
	promote, _ := tune.Decide(f.Diff, f.CILow, f.CIHigh, nil)
	if got.Promoted != promote {
		t.Fatalf("promoted %v, the rule says %v for %+v", got.Promoted, promote, f)
	}
	if _, err := os.Stat(filepath.Join(out, "checkpoint", "model.safetensors")); (err == nil) != got.Promoted {
		t.Fatalf("promoted %v, checkpoint written: %v", got.Promoted, err == nil)
	}
	t.Logf("decision: %s", got.Reason)

	// Scoring the same checkpoint again (--checkpoint) trains nothing and gives the same
	// figures; --only narrows the documents, and a prefix that matches none is an error.
	again, err := tune.Run(context.Background(), cfg, tune.Options{Out: filepath.Join(dir, "tune-again"), Checkpoint: got.Scored,
		Seed: 7, SplitSeed: 42, ValPct: 20, TestPct: 30, Only: []string{"t:doc"}})
	if err != nil {
		t.Fatal(err)
	}
	if again.TrainSeconds != 0 || *again.Figures != *got.Figures || again.Promoted != got.Promoted {
		t.Fatalf("scoring the checkpoint again: %+v, first %+v", again.Figures, got.Figures)
	}
	if _, err := tune.Run(context.Background(), cfg, tune.Options{Out: filepath.Join(dir, "tune-none"), Checkpoint: got.Scored,
		SplitSeed: 42, ValPct: 20, TestPct: 30, Only: []string{"x:"}}); err == nil || !strings.Contains(err.Error(), "need at least 2") {
		t.Fatalf("--only matching no document: %v", err)
	}

	// Promotion, whichever way the rule went on this corpus: the checkpoint is copied and
	// --apply re-aggregates every cached document into the configured sinks, with no GN pass.
	ckpt, applied, err := tune.Promote(context.Background(), cfg, got.Scored, out, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ckpt, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	// Promoting that checkpoint again in place (tune --checkpoint DIR/checkpoint --out DIR)
	// leaves it there rather than copying it onto itself.
	if again, _, err := tune.Promote(context.Background(), cfg, ckpt, out, false); err != nil || again != ckpt {
		t.Fatalf("promoting in place: %q, %v", again, err)
	}
	if _, err := os.Stat(filepath.Join(ckpt, "model.safetensors")); err != nil {
		t.Fatalf("promoting in place lost the checkpoint: %v", err)
	}
	if applied == nil || applied.Written != 40 || applied.Failed != 0 || applied.GNWindows != 0 {
		t.Fatalf("--apply: %+v", applied)
	}
	if after := shards(); len(after) != len(before) {
		t.Fatalf("--apply embedded windows: shards %d -> %d", len(before), len(after))
	}
	for _, sink := range cfg.Sinks {
		latest, err := vectorfile.Latest(sink.Dir())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, v := range latest {
			if strings.HasPrefix(v.Space, "reign") && v.GNSpace != "" {
				n++
			}
		}
		if len(latest) != 40 || n != 40 {
			t.Fatalf("%s sink %s: %d documents, %d of them REIGN vectors", sink.Type, sink.Dir(), len(latest), n)
		}
	}
}

func TestCmdTuneUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"p.yaml"}, {"--out", "x"}} {
		if err := cmdTune(context.Background(), args); err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("%v: %v", args, err)
		}
	}
}
