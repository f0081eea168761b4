package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/serving/query"
	"github.com/reignpipe/reignpipe/schemas"
)

// TestEveryModeSameVectorsAndRows: one corpus through every mode that makes vectors --
// embedded, the three distributed stages (ingest, embed, aggregate), `stage process`,
// `reaggregate` from the cache, and the query side (what search --doc embeds) -- gives
// bit-identical vectors, and every corpus mode's chunk cache holds the same rows (key, n_tokens,
// embedding bits; the query side writes none), because they all run the engine's one embed step and one publish step. The
// GN is the row-wise int8 variant, batch-invariant by construction, so a window's vector does
// not depend on which batch, process or mode embedded it; any difference left is the code's.
func TestEveryModeSameVectorsAndRows(t *testing.T) {
	s := newStageSetup(t)
	s.model, s.tok = testenv.GN(t, "bge-small-en-v15-int8r")
	input, ids := stageCorpus(t, s.dir, 14)
	parquet := func(name string) string {
		return fmt.Sprintf("  - {type: parquet, dir: %q}", filepath.Join(s.dir, name))
	}

	// Embedded.
	embCfg := s.config(t, "emb", input, "embedded", parquet("vec-emb"))
	cfg, err := pipelines.Load(embCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(context.Background(), cfg, false); err != nil {
		t.Fatal(err)
	}

	// Distributed: ingest, embed, aggregate; then stage process on topics of its own.
	wait := func(label string, cmd *exec.Cmd) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
		case <-time.After(4 * time.Minute):
			t.Fatalf("%s still running after 4 minutes", label)
		}
	}
	distCfg := s.config(t, "dist", input, "kafka", parquet("vec-dist"))
	ingest := s.start(t, "ingest", "ingest", "--idle-exit", "3s", distCfg)
	embed := s.start(t, "embed", "embed", "--idle-exit", "8s", "--cache-dir", filepath.Join(s.dir, "cache-embed"), distCfg)
	agg := s.start(t, "aggregate", "aggregate", "--idle-exit", "8s", distCfg)
	wait("ingest", ingest)
	wait("embed", embed)
	wait("aggregate", agg)
	s.topics = kafkatest.Topic(t, "process")
	procCfg := s.config(t, "proc", input, "kafka", parquet("vec-proc"))
	ingest = s.start(t, "ingest-proc", "ingest", "--idle-exit", "3s", procCfg)
	proc := s.start(t, "process", "process", "--idle-exit", "8s", "--cache-dir", filepath.Join(s.dir, "cache-process"), procCfg)
	wait("ingest-proc", ingest)
	wait("process", proc)

	// Re-aggregation from the embedded run's cache.
	if out, err := exec.Command(s.bin, "reaggregate", "--out", filepath.Join(s.dir, "vec-reagg"), embCfg).CombinedOutput(); err != nil {
		t.Fatalf("reaggregate: %v\n%s", err, out)
	}

	want, err := vectorfile.Latest(filepath.Join(s.dir, "vec-emb"))
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != len(ids) {
		t.Fatalf("the embedded run wrote %d of %d documents", len(want), len(ids))
	}
	for _, mode := range []string{"vec-dist", "vec-proc", "vec-reagg"} {
		got, err := vectorfile.Latest(filepath.Join(s.dir, mode))
		if err != nil {
			t.Fatal(err)
		}
		sameBits(t, mode, want, got)
	}

	// The query side: each document's text embedded as a query over an empty cache of its own,
	// so every window goes to the GN; the query writes none of them to that cache.
	qcfg := *cfg
	qcfg.Cache.Dir = filepath.Join(s.dir, "cache-query")
	texts := jsonlTexts(t, input)
	e, err := query.Open(context.Background(), &qcfg, query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The process has one ONNX Runtime environment: a test that fails must release it too.
	t.Cleanup(func() { e.Close() })
	got := map[string]schemas.DocVector{}
	for _, id := range ids {
		res, err := e.Embed(context.Background(), schemas.Document{ID: id, Source: "t", Title: want[id].Title, Version: want[id].Version, Text: texts[id]})
		if err != nil {
			t.Fatal(err)
		}
		if res.CacheHits != 0 || res.GNWindows == 0 {
			t.Fatalf("query %s over an empty cache: %+v", id, res)
		}
		got[id] = res.Vector
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "query", want, got)

	// The rows: every cache holds the same windows with the same n_tokens and embedding bits.
	rows := map[string][]string{}
	if r := cacheRows(t, qcfg.Cache.Dir); len(r) != 0 {
		t.Errorf("the query side wrote %d query windows into the chunk cache", len(r))
	}
	for _, dir := range []string{cfg.Cache.Dir, filepath.Join(s.dir, "cache-embed"), filepath.Join(s.dir, "cache-process")} {
		rows[filepath.Base(dir)] = cacheRows(t, dir)
	}
	ref := rows[filepath.Base(cfg.Cache.Dir)]
	if len(ref) == 0 {
		t.Fatal("the embedded run's cache holds no rows")
	}
	for name, r := range rows {
		if strings.Join(r, "\n") != strings.Join(ref, "\n") {
			t.Errorf("cache %s holds %d rows, the embedded run's %d, and they differ (first: %v vs %v)", name, len(r), len(ref), first(r), first(ref))
		}
	}
	t.Logf("%d documents, %d windows: the same bits in 5 modes and 3 caches", len(want), len(ref))
}

func sameBits(t *testing.T, mode string, want, got map[string]schemas.DocVector) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d documents, the embedded run %d", mode, len(got), len(want))
	}
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			t.Errorf("%s: %s missing", mode, id)
		case g.ContentHash != w.ContentHash || g.NChunks != w.NChunks || g.NTokens != w.NTokens || g.Space != w.Space || len(g.Vector) != len(w.Vector):
			t.Errorf("%s: %s is %+v, the embedded run's %+v", mode, id, g, w)
		default:
			for i := range w.Vector {
				if math.Float32bits(g.Vector[i]) != math.Float32bits(w.Vector[i]) {
					t.Errorf("%s: %s component %d is %v, the embedded run's %v", mode, id, i, g.Vector[i], w.Vector[i])
					break
				}
			}
		}
	}
}

// jsonlTexts maps the corpus's doc ids ("t:<id>") to their text, as the JSONL source reads it.
func jsonlTexts(t *testing.T, path string) map[string]string {
	t.Helper()
	py := testenv.Python(t, "json")
	out, err := exec.Command(py, "-c", `
import json, sys
for line in open(sys.argv[1]):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    print(json.dumps(["t:" + d["id"], d["text"]]))
`, path).Output()
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var kv []string
		if err := jsonUnmarshal(line, &kv); err != nil {
			t.Fatal(err)
		}
		texts[kv[0]] = kv[1]
	}
	return texts
}

// cacheRows reads a chunk cache's shards with pyarrow (a reader that is not reignpipe): one line
// per window, "key n_tokens sha256(embedding bytes)", sorted.
func cacheRows(t *testing.T, dir string) []string {
	t.Helper()
	py := testenv.Python(t, "pyarrow")
	out, err := exec.Command(py, "-c", `
import glob, hashlib, sys
import pyarrow.parquet as pq
rows = set()
for f in sorted(glob.glob(sys.argv[1] + "/shards/shard-*.parquet")):
    t = pq.read_table(f, columns=["key", "n_tokens", "embedding"])
    for k, n, e in zip(t.column("key").to_pylist(), t.column("n_tokens").to_pylist(), t.column("embedding").to_pylist()):
        import struct
        rows.add("%016x %d %s" % (k, n, hashlib.sha256(struct.pack("<%df" % len(e), *e)).hexdigest()[:16]))
print("\n".join(sorted(rows)))
`, dir).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("reading %s: %v\n%s", dir, err, ee.Stderr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			rows = append(rows, l)
		}
	}
	sort.Strings(rows)
	return rows
}

func first(r []string) string {
	if len(r) == 0 {
		return "(none)"
	}
	return r[0]
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
