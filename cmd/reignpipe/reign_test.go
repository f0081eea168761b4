package main

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/engine/reaggregate"
	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/reign"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// TestRunWithREIGN runs the pipeline with a REIGN checkpoint (random small-l2 weights from the
// NumPy oracle): checkpoints from another GN or without a manifest are refused, multi-chunk
// documents get the REIGN vector the oracle computes from the cached chunk embeddings, and
// with single_chunk: gn one-chunk documents get the GN mean-pool vector, labelled as such.
func TestRunWithREIGN(t *testing.T) {
	model, tokPath := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	py := testenv.Python(t, "numpy")
	oracle := filepath.Join(testenv.Root(), "ops", "oracles", "reign_reference.py")
	dir := t.TempDir()
	ckDir := filepath.Join(dir, "ckpt")
	if out, err := exec.Command(py, oracle, "make", "small-l2", "7", ckDir, "--gn-dim", "384").CombinedOutput(); err != nil {
		t.Fatalf("oracle make: %v\n%s", err, out)
	}
	cfg := testConfig(t, dir, writeCorpus(t, dir))
	cfg.GN.Model, cfg.GN.Tokenizer = model, tokPath
	cfg.Aggregate = components.WithCheckpoint(cfg.Aggregate, ckDir)
	cfg.Aggregate.Settings.(*components.ReignConfig).SingleChunk = "gn"

	// No manifest and no trained_on: refused before anything runs.
	if _, err := run(context.Background(), cfg, true); err == nil || !strings.Contains(err.Error(), "trained_on") {
		t.Fatalf("checkpoint without manifest: %v", err)
	}
	// A manifest from another GN: refused.
	reign.WriteManifest(ckDir, reign.Manifest{GNName: "all-minilm-l6-v2", GNFingerprint: "not-this-gn", GNDim: 384, K: 512, S: 512})
	if _, err := run(context.Background(), cfg, true); err == nil || !strings.Contains(err.Error(), "mixing GN spaces") {
		t.Fatalf("checkpoint of another GN: %v", err)
	}
	fp := gnFingerprint(t, model, tokPath)
	reign.WriteManifest(ckDir, reign.Manifest{GNName: "bge-small-en-v15", GNFingerprint: fp, GNDim: 384, K: 512, S: 512})
	sum, err := run(context.Background(), cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	if sum.DocsWritten != 4 || !strings.HasPrefix(sum.Space, "reign:") {
		t.Fatalf("summary %+v", sum)
	}
	vecs, err := vectorfile.Latest(filepath.Join(dir, "vectors"))
	if err != nil {
		t.Fatal(err)
	}
	for id, v := range vecs {
		wantPrefix := "gn-meanpool:"
		if v.NChunks > 1 {
			wantPrefix = "reign:"
		}
		if !strings.HasPrefix(v.Space, wantPrefix) {
			t.Fatalf("%s (%d chunks) is in space %s", id, v.NChunks, v.Space)
		}
		// Every row carries the GN mean-pool companion; for routed one-chunk documents it is
		// the vector itself.
		if !strings.HasPrefix(v.GNSpace, "gn-meanpool:") || len(v.GNVector) != 384 {
			t.Fatalf("%s: companion %q of %d dims", id, v.GNSpace, len(v.GNVector))
		}
		if v.NChunks == 1 && (v.GNSpace != v.Space || v.GNVector[0] != v.Vector[0]) {
			t.Fatalf("%s: one-chunk document's companion differs from its vector", id)
		}
	}

	// Re-aggregation from the shards alone: no GN forward pass, the same vectors.
	rsum, err := reaggregate.Run(context.Background(), cfg, filepath.Join(dir, "reagg"))
	if err != nil {
		t.Fatal(err)
	}
	if rsum.Written != 4 || rsum.Failed != 0 || rsum.GNForward != 0 || rsum.GNWindows != 0 {
		t.Fatalf("reaggregate summary %+v", rsum)
	}
	again, err := vectorfile.Latest(filepath.Join(dir, "reagg"))
	if err != nil {
		t.Fatal(err)
	}
	for id, v := range vecs {
		w := again[id]
		if w.Space != v.Space || w.GNSpace != v.GNSpace || len(w.GNVector) != len(v.GNVector) ||
			w.Version != v.Version || w.ContentHash != v.ContentHash ||
			w.Title != v.Title || w.Source != v.Source || w.NTokens != v.NTokens || w.NChunks != v.NChunks {
			t.Fatalf("%s: reaggregated %+v, ran %+v", id, w, v)
		}
		for i := range v.Vector {
			if math.Abs(float64(w.Vector[i]-v.Vector[i])) > 1e-6 {
				t.Fatalf("%s: reaggregated vector differs", id)
			}
		}
	}

	// The multi-chunk document against the oracle, from the cached chunk embeddings.
	c := vecs["t:c"]
	if c.NChunks < 2 {
		t.Fatalf("t:c has %d chunks", c.NChunks)
	}
	cache, err := shardcache.Open(shardcache.Options{Dir: filepath.Join(dir, "cache"), Fingerprint: fp, Dim: 384, K: 512, S: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	m, ok, err := cache.Manifest("t:c")
	if err != nil || !ok {
		t.Fatalf("manifest: %v %v", ok, err)
	}
	chunks := make([][]float32, len(m.Keys))
	for i, k := range m.Keys {
		chunks[i] = make([]float32, 384)
		if hit, err := cache.Get(k, chunks[i]); err != nil || !hit {
			t.Fatalf("chunk %d not cached: %v", i, err)
		}
	}
	// Its GN companion is the normalised mean of those chunks.
	mean := make([]float64, 384)
	for _, ch := range chunks {
		for j, x := range ch {
			mean[j] += float64(x)
		}
	}
	var norm float64
	for _, x := range mean {
		norm += x * x
	}
	for j := range mean {
		if d := math.Abs(mean[j]/math.Sqrt(norm) - float64(c.GNVector[j])); d > 1e-6 {
			t.Fatalf("GN companion of t:c differs from the mean-pool by %g", d)
		}
	}
	in, _ := json.Marshal(map[string]any{"chunks": chunks})
	cmd := exec.Command(py, oracle, "run", ckDir)
	cmd.Stdin = strings.NewReader(string(in) + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle run: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 16<<20)
	sc.Scan()
	var ref struct{ Vector []float64 }
	if err := json.Unmarshal(sc.Bytes(), &ref); err != nil {
		t.Fatal(err)
	}
	var maxDiff float64
	for i := range ref.Vector {
		maxDiff = math.Max(maxDiff, math.Abs(ref.Vector[i]-float64(c.Vector[i])))
	}
	if maxDiff > 1e-5 {
		t.Fatalf("REIGN vector differs from the reference by %g", maxDiff)
	}
}

func gnFingerprint(t *testing.T, model, tok string) string {
	t.Helper()
	lib := testenv.ORTLibrary(t)
	rt, err := gn.NewRuntime(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	m, err := rt.Load(gn.Config{Model: model, Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	return m.Fingerprint()
}
