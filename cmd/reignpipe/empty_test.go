package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// TestEvalEmptyDocuments evaluates a BEIR corpus holding an empty, a whitespace-only and a
// zero-width-only document (none judged): the evaluation completes, and each of them is
// encoded the reference's way, as the one window [CLS][SEP], so all three share one window key.
func TestEvalEmptyDocuments(t *testing.T) {
	model, tokPath := testenv.GN(t, "all-minilm-l6-v2")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	dir := t.TempDir()
	data := filepath.Join(dir, "beir")
	writeBEIR(t, data)
	f, err := os.OpenFile(filepath.Join(data, "corpus.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for id, text := range map[string]string{"d1": "", "d2": "   \n ", "d3": "\u200b\ufeff"} {
		b, _ := json.Marshal(map[string]string{"_id": id, "title": "", "text": text})
		f.Write(append(b, '\n'))
	}
	f.Close()
	cfg := testConfig(t, dir, filepath.Join(dir, "unused.jsonl"))
	cfg.GN.Name, cfg.GN.Model, cfg.GN.Tokenizer = "all-minilm-l6-v2", model, tokPath
	cfg.Aggregate = pipelines.AggregateConfig{Type: "meanpool"}
	sum, err := evaluateDir(context.Background(), cfg, data, "test", 10, true, filepath.Join(dir, "eval"))
	if err != nil {
		t.Fatalf("eval with empty documents: %v", err)
	}
	if sum.Corpus != 9 {
		t.Fatalf("corpus %d, want 9", sum.Corpus)
	}
	for _, s := range sum.Systems {
		if s.System == "gn-meanpool" && s.NDCG < 0.8 {
			t.Errorf("gn-meanpool nDCG %v: empty documents outrank real ones?", s.NDCG)
		}
	}
	cache, err := shardcache.Open(shardcache.Options{Dir: cfg.Cache.Dir, Fingerprint: gnFingerprint(t, model, tokPath), Dim: 384, K: cfg.Chunking.K, S: cfg.Chunking.S})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	var key uint64
	for i, id := range []string{"c:d1", "c:d2", "c:d3"} {
		m, ok, err := cache.Manifest(id)
		if err != nil || !ok || len(m.Keys) != 1 {
			t.Fatalf("%s: manifest %+v %v %v, want one window", id, m, ok, err)
		}
		if i > 0 && m.Keys[0] != key {
			t.Fatalf("%s: window key %x differs from c:d1's %x: not the same [CLS][SEP] window", id, m.Keys[0], key)
		}
		key = m.Keys[0]
	}
}
