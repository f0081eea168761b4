package verify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// A pipeline folder with a damaged shard, a changed JSONL part and crash-left temps: verify
// names each; repair quarantines the shard and removes the temps, and the changed part (which
// only a rerun from scratch rewrites) still fails the check.
func TestRunFindsAndRepairs(t *testing.T) {
	dir := t.TempDir()
	cfg, err := pipelines.Parse([]byte(fmt.Sprintf(`version: 1
name: v
source: {type: jsonl, path: in.jsonl}
cache: {dir: %q, rows_per_shard: 4}
sinks:
  - {type: jsonl, dir: %q}
run: {state_dir: %q}
`, filepath.Join(dir, "cache"), filepath.Join(dir, "vectors"), filepath.Join(dir, "state"))))
	if err != nil {
		t.Fatal(err)
	}
	c, err := shardcache.Open(shardcache.Options{Dir: cfg.Cache.Dir, Fingerprint: "fp@1", Dim: 4, K: 8, S: 8, RowsPerShard: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		if _, err := c.Add(shardcache.Row{Key: uint64(100 + i), DocID: "d", Embedding: []float32{float32(i), 1, 2, 3}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.PutManifest(shardcache.Manifest{DocID: "t:a", Version: "1", Fingerprint: "fp@1", K: 8, S: 8, Keys: []uint64{100, 101}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sink, err := vectorfile.NewJSONL(vectorfile.JSONLOptions{Dir: cfg.Sinks[0].Dir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Write(context.Background(), schemas.DocVector{DocID: "t:a", Version: "1", Space: "s", Vector: []float32{0.5, 0.5}}); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.Run.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	temp := filepath.Join(cfg.Run.StateDir, ".tmp-v.checkpoint.json-42")
	if err := os.WriteFile(temp, []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	clean, err := Run(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	if clean.OK() || len(clean.Temps) != 1 || clean.Cache == nil || clean.Cache.Shards != 2 || clean.Outputs[0].Vectors != 1 {
		t.Fatalf("report with a temp: %+v", clean)
	}
	vec := filepath.Join(cfg.Cache.Dir, "shards", "shard-00000002.vec")
	b, _ := os.ReadFile(vec)
	b[len(b)-1] ^= 1
	if err := os.WriteFile(vec, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.Cache.Damaged) != 1 || rep.ReembedWindows != 4 || !rep.Cache.Repaired {
		t.Fatalf("repair: %+v %+v", rep, rep.Cache)
	}
	if _, err := os.Stat(temp); !os.IsNotExist(err) {
		t.Fatalf("temp still there: %v", err)
	}
	if after, _ := Run(cfg, false); !after.OK() {
		t.Fatalf("after repair: %+v %+v", after, after.Cache)
	}
	part := filepath.Join(cfg.Sinks[0].Dir(), "part-00000001.jsonl")
	pb, _ := os.ReadFile(part)
	pb[len(pb)-5] ^= 1
	if err := os.WriteFile(part, pb, 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, _ := Run(cfg, true); changed.OK() || changed.Outputs[0].Error == "" {
		t.Fatalf("a changed vector part: %+v", changed)
	}
}

// An index lost or cut short (Pebble drops a damaged WAL's tail on open) loses document
// manifests without a trace in the shards: verify says so, first as a missing index and then,
// once a run has rebuilt the index from the shards, as vectors whose documents have no manifest.
func TestRunFindsLostManifests(t *testing.T) {
	dir := t.TempDir()
	cfg, err := pipelines.Parse([]byte(fmt.Sprintf(`version: 1
name: v
source: {type: jsonl, path: in.jsonl}
cache: {dir: %q, rows_per_shard: 2}
sinks:
  - {type: parquet, dir: %q}
`, filepath.Join(dir, "cache"), filepath.Join(dir, "vectors"))))
	if err != nil {
		t.Fatal(err)
	}
	opts := shardcache.Options{Dir: cfg.Cache.Dir, Fingerprint: "fp@1", Dim: 2, K: 8, S: 8, RowsPerShard: 2}
	c, err := shardcache.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := vectorfile.NewParquet(vectorfile.ParquetOptions{Dir: cfg.Sinks[0].Dir(), Dim: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"t:a", "t:b", "t:c"} {
		key := uint64(10 + i)
		if _, err := c.Add(shardcache.Row{Key: key, DocID: id, Embedding: []float32{1, float32(i)}}); err != nil {
			t.Fatal(err)
		}
		if err := c.PutManifest(shardcache.Manifest{DocID: id, Version: "1", Fingerprint: "fp@1", K: 8, S: 8, Keys: []uint64{key}}); err != nil {
			t.Fatal(err)
		}
		if err := sink.Write(context.Background(), schemas.DocVector{DocID: id, Version: "1", Space: "s", Vector: []float32{1, float32(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(c.Close(), sink.Close(context.Background())); err != nil {
		t.Fatal(err)
	}
	if rep, err := Run(cfg, false); err != nil || !rep.OK() {
		t.Fatalf("whole pipeline folder: %+v %v", rep, err)
	}
	if err := os.RemoveAll(filepath.Join(cfg.Cache.Dir, "index")); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(cfg, true)
	if err != nil || rep.OK() || !strings.Contains(rep.CacheErr, "no index") {
		t.Fatalf("index removed: %+v %v", rep, err)
	}
	// What the next run does first: Open indexes the shards again.
	if c, err = shardcache.Open(opts); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err = Run(cfg, false)
	if err != nil || rep.OK() || rep.Cache == nil || rep.Cache.Entries != 3 || rep.Outputs[0].NoManifest != 3 {
		t.Fatalf("index rebuilt from the shards, manifests gone: %+v %+v %v", rep, rep.Cache, err)
	}
}

// A deleted document's manifest goes with it while its older vector stays in the parts under
// its tombstone: verify counts the documents the folder holds and misses no manifest.
func TestRunLeavesOutDeletedDocuments(t *testing.T) {
	dir := t.TempDir()
	cfg, err := pipelines.Parse([]byte(fmt.Sprintf(`version: 1
name: v
source: {type: jsonl, path: in.jsonl}
cache: {dir: %q}
sinks:
  - {type: parquet, dir: %q}
`, filepath.Join(dir, "cache"), filepath.Join(dir, "vectors"))))
	if err != nil {
		t.Fatal(err)
	}
	c, err := shardcache.Open(shardcache.Options{Dir: cfg.Cache.Dir, Fingerprint: "fp@1", Dim: 2, K: 8, S: 8})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := vectorfile.NewParquet(vectorfile.ParquetOptions{Dir: cfg.Sinks[0].Dir(), Dim: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, id := range []string{"t:kept", "t:gone"} {
		key := uint64(10 + i)
		if _, err := c.Add(shardcache.Row{Key: key, DocID: id, Embedding: []float32{1, float32(i)}}); err != nil {
			t.Fatal(err)
		}
		if id == "t:kept" { // the deletion took t:gone's manifest
			if err := c.PutManifest(shardcache.Manifest{DocID: id, Version: "1", Fingerprint: "fp@1", K: 8, S: 8, Keys: []uint64{key}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := sink.Write(ctx, schemas.DocVector{DocID: id, Version: "1", Space: "s", Vector: []float32{1, float32(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sink.Delete(ctx, schemas.Deletion{DocID: "t:gone", Version: "1"}); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(c.Close(), sink.Close(ctx)); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(cfg, false)
	if err != nil || !rep.OK() || rep.Outputs[0].Vectors != 1 || rep.Outputs[0].NoManifest != 0 {
		t.Fatalf("a deleted document in the parts: %+v %v", rep, err)
	}
}
