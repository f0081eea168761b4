package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
	"github.com/reignpipe/reignpipe/pipelines/quality/dataset"
	"github.com/reignpipe/reignpipe/pipelines/quality/eval"
	"github.com/reignpipe/reignpipe/stages/reign"
)

// evaluateDir evaluates the benchmark in dir, read with the format detected, by its own
// conventions except for split, k and self-match removal.
func evaluateDir(ctx context.Context, cfg *pipelines.Config, dir, split string, k int, dropSelf bool, outDir string) (*eval.Summary, error) {
	src, err := dataset.Open(dir, dataset.Options{})
	if err != nil {
		return nil, err
	}
	return eval.Evaluate(ctx, cfg, src, dir, eval.Options{Split: split, K: k, DropSelf: dropSelf, Out: outDir, Encode: encodeInProcess})
}

func writeBEIR(t *testing.T, dir string) {
	t.Helper()
	corpus := map[string]string{
		"volcano": "Volcanoes erupt molten rock called lava, ash and gases from a magma chamber beneath the crust.",
		"piano":   "The piano is a keyboard instrument whose hammers strike strings when the keys are pressed.",
		"bread":   "Bread dough of flour, water and yeast rises as the yeast ferments, then it is baked in an oven.",
		"orbit":   "A satellite stays in orbit because its forward speed balances the pull of the planet's gravity.",
		"chess":   "In chess each player moves sixteen pieces; the game ends when a king is checkmated.",
		"bees":    "Honey bees collect nectar from flowers and store it as honey in wax combs inside the hive.",
	}
	queries := map[string]string{
		"q1": "how does magma reach the surface in an eruption",
		"q2": "baking with yeast and flour",
		"q3": "why do satellites not fall down to earth",
	}
	qrels := "query-id\tcorpus-id\tscore\nq1\tvolcano\t2\nq2\tbread\t2\nq3\torbit\t2\nq3\tvolcano\t1\n"
	var c, q strings.Builder
	for id, text := range corpus {
		b, _ := json.Marshal(map[string]string{"_id": id, "title": id, "text": text})
		c.Write(append(b, '\n'))
	}
	for id, text := range queries {
		b, _ := json.Marshal(map[string]string{"_id": id, "text": text})
		q.Write(append(b, '\n'))
	}
	os.MkdirAll(filepath.Join(dir, "qrels"), 0o755)
	for name, body := range map[string]string{"corpus.jsonl": c.String(), "queries.jsonl": q.String(), "qrels/test.tsv": qrels} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEvalComparesSystems runs `reignpipe eval` on a small BEIR dataset written here: BM25,
// the truncated GN, the GN mean-pool and a (random-weight) REIGN checkpoint are scored on the
// same queries, REIGN gets a paired CI and p against the mean-pool, and a second evaluation
// embeds nothing (the cache serves every window).
func TestEvalComparesSystems(t *testing.T) {
	model, tokPath := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	py := testenv.Python(t, "numpy")
	dir := t.TempDir()
	data := filepath.Join(dir, "beir")
	writeBEIR(t, data)
	ckDir := filepath.Join(dir, "ckpt")
	if out, err := exec.Command(py, filepath.Join(testenv.Root(), "ops", "oracles", "reign_reference.py"), "make", "small-l2", "3", ckDir, "--gn-dim", "384").CombinedOutput(); err != nil {
		t.Fatalf("oracle make: %v\n%s", err, out)
	}
	reign.WriteManifest(ckDir, reign.Manifest{GNName: "bge-small-en-v15", GNFingerprint: gnFingerprint(t, model, tokPath), GNDim: 384, K: 512, S: 512})
	cfg := testConfig(t, dir, filepath.Join(dir, "unused.jsonl"))
	cfg.GN.Model, cfg.GN.Tokenizer = model, tokPath
	cfg.Aggregate = components.WithCheckpoint(cfg.Aggregate, ckDir)
	out := filepath.Join(dir, "eval")

	sum, err := evaluateDir(context.Background(), cfg, data, "test", 10, true, out)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]eval.SystemResult{}
	var names []string
	for _, s := range sum.Systems {
		got[s.System] = s
		names = append(names, s.System)
	}
	if fmt.Sprint(names) != "[bm25 gn-truncated gn-meanpool reign]" || sum.Corpus != 6 || sum.Queries != 3 || sum.GNWindows != 9 {
		t.Fatalf("summary %+v", sum)
	}
	// Every document is one window: the truncated GN is the mean-pool.
	if got["gn-truncated"].NDCG != got["gn-meanpool"].NDCG {
		t.Fatalf("truncated %v != mean-pool %v on one-window documents", got["gn-truncated"].NDCG, got["gn-meanpool"].NDCG)
	}
	// The GN finds the topical document for these paraphrased queries.
	if mp := got["gn-meanpool"]; mp.NDCG < 0.8 || mp.Queries != 3 {
		t.Fatalf("gn-meanpool %+v", mp)
	}
	for _, s := range sum.Systems {
		if s.NDCG < 0 || s.NDCG > 1 || s.R < 0 || s.R > 1 {
			t.Fatalf("%s: metrics out of range %+v", s.System, s)
		}
	}
	if r := got["reign"]; r.DiffVsMeanPool == nil || r.PValue == nil || *r.CILow > *r.DiffVsMeanPool || *r.CIHigh < *r.DiffVsMeanPool {
		t.Fatalf("reign significance %+v", r)
	}
	tsv, err := os.ReadFile(filepath.Join(out, "per-query-reign.tsv"))
	if err != nil || strings.Count(string(tsv), "\n") != 4 {
		t.Fatalf("per-query file: %v\n%s", err, tsv)
	}

	again, err := evaluateDir(context.Background(), cfg, data, "test", 10, true, out)
	if err != nil {
		t.Fatal(err)
	}
	if again.GNWindows != 0 || again.Systems[2].NDCG != got["gn-meanpool"].NDCG {
		t.Fatalf("second evaluation: %d GN windows, %+v", again.GNWindows, again.Systems[2])
	}
}

// TestEvalLoCoSubtasks evaluates LoCoV1-layout files (documents/<subtask>_test.jsonl, binary
// answer_pids) with --subset all: each subtask is ranked against its own corpus only, self
// matches are kept (LoCo's convention) and eval-macro.json holds the unweighted mean.
func TestEvalLoCoSubtasks(t *testing.T) {
	model, tokPath := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	dir := t.TempDir()
	data := filepath.Join(dir, "loco")
	os.MkdirAll(filepath.Join(data, "LoCoV1-Documents", "documents"), 0o755)
	os.MkdirAll(filepath.Join(data, "LoCoV1-Queries", "documents"), 0o755)
	docs := map[string][]string{
		"gov_report": {"Volcanoes erupt molten rock called lava from a magma chamber.", "The piano's hammers strike strings.", "Bread dough rises as yeast ferments."},
		"qmsum":      {"A satellite stays in orbit because its speed balances gravity.", "In chess the game ends at checkmate.", "Honey bees store nectar as honey in wax combs."},
	}
	queries := map[string][][2]string{
		"gov_report": {{"how does magma reach the surface", "0"}, {"baking with yeast", "2"}},
		"qmsum":      {{"why do satellites not fall down", "0"}, {"where do bees keep honey", "2"}},
	}
	for task, texts := range docs {
		var d, q strings.Builder
		for i, text := range texts {
			b, _ := json.Marshal(map[string]any{"pid": fmt.Sprintf("%s_Passage_%d", task, i), "passage": text, "dataset": task})
			d.Write(append(b, '\n'))
		}
		for i, qa := range queries[task] {
			b, _ := json.Marshal(map[string]any{"qid": fmt.Sprintf("%s_Query_%d", task, i), "query": qa[0],
				"answer_pids": []string{task + "_Passage_" + qa[1]}, "dataset": task})
			q.Write(append(b, '\n'))
		}
		os.WriteFile(filepath.Join(data, "LoCoV1-Documents", "documents", task+"_test.jsonl"), []byte(d.String()), 0o644)
		os.WriteFile(filepath.Join(data, "LoCoV1-Queries", "documents", task+"_test.jsonl"), []byte(q.String()), 0o644)
	}
	yaml := fmt.Sprintf("version: 1\nname: loco\nsource: {type: jsonl, path: unused.jsonl}\ngn: {name: bge-small-en-v15, model: %q, tokenizer: %q}\ncache: {dir: %q}\nsinks: [{type: jsonl, dir: unused}]\n",
		model, tokPath, filepath.Join(dir, "cache"))
	pipeline := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(pipeline, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "eval")
	if err := cmdEval(context.Background(), []string{"--data", data, "--out", out, pipeline}); err == nil || !strings.Contains(err.Error(), "--subset all") {
		t.Fatalf("LoCo without --subset: %v", err)
	}
	if err := cmdEval(context.Background(), []string{"--data", data, "--subset", "all", "--out", out, pipeline}); err != nil {
		t.Fatal(err)
	}
	var ms eval.MacroSummary
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(out, "eval-macro.json"))), &ms); err != nil {
		t.Fatal(err)
	}
	if ms.Format != "loco" || ms.K != 10 || fmt.Sprint(ms.Subtasks) != "[gov_report qmsum]" {
		t.Fatalf("macro summary %+v", ms)
	}
	for _, sys := range []string{"bm25", "gn-truncated", "gn-meanpool"} {
		var sum float64
		for _, task := range ms.Subtasks {
			s := ms.PerSubset[task]
			if s.Corpus != 3 || s.Queries != 2 || s.SelfMatch || s.K != 10 {
				t.Fatalf("%s: %+v", task, s)
			}
			for _, r := range s.Systems {
				if r.System == sys {
					sum += r.NDCG
				}
			}
		}
		if got, want := ms.Macro[sys].NDCG, sum/2; got != want || ms.Macro[sys].Subtasks != 2 {
			t.Errorf("%s macro nDCG %v, want %v", sys, got, want)
		}
	}
	// Each subtask's hits come from its own corpus only.
	for _, task := range ms.Subtasks {
		if tsv := readFile(t, filepath.Join(out, task, "per-query-gn-meanpool.tsv")); strings.Count(tsv, "\n") != 3 {
			t.Errorf("%s per-query file:\n%s", task, tsv)
		}
	}
	if ms.Macro["gn-meanpool"].NDCG < 0.8 {
		t.Errorf("gn-meanpool macro nDCG %v on these easy pairs", ms.Macro["gn-meanpool"].NDCG)
	}

	// importdata writes one subtask as plain BEIR, which the evaluator's own loader reads.
	imported := filepath.Join(dir, "qmsum-beir")
	if err := cmdImportdata([]string{"--data", data, "--subset", "qmsum", "--out", imported}); err != nil {
		t.Fatal(err)
	}
	ds, err := beir.LoadSplit(imported, "test")
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Corpus) != 3 || len(ds.Queries) != 2 || ds.Qrels["qmsum_Query_1"]["qmsum_Passage_2"] != 1 {
		t.Errorf("imported qmsum: %d docs, %d queries, qrels %v", len(ds.Corpus), len(ds.Queries), ds.Qrels)
	}
}
