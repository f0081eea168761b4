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
	"github.com/reignpipe/reignpipe/stages/reign"
)

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
	cfg.Aggregate.Type, cfg.Aggregate.Checkpoint = "reign", ckDir
	out := filepath.Join(dir, "eval")

	sum, err := evaluate(context.Background(), cfg, data, "test", 10, true, out)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]SystemResult{}
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

	again, err := evaluate(context.Background(), cfg, data, "test", 10, true, out)
	if err != nil {
		t.Fatal(err)
	}
	if again.GNWindows != 0 || again.Systems[2].NDCG != got["gn-meanpool"].NDCG {
		t.Fatalf("second evaluation: %d GN windows, %+v", again.GNWindows, again.Systems[2])
	}
}
