package launch_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/launch"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// A JSONL feed folder through the embedded run with the real GN into Parquet: a deletion line
// takes its document out of the vectors and the cache's manifests; in the next file, a late
// re-delivery of the deleted version stays out without a GN pass, and a newer version comes
// back from cached windows.
func TestJSONLDeletionsToParquet(t *testing.T) {
	model, tok := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	dir := t.TempDir()
	feed := filepath.Join(dir, "feed")
	if err := os.MkdirAll(feed, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, lines string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(feed, name), []byte(lines), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.jsonl", `{"id":"oven","text":"a bread oven with a steam injector","version":"1"}
{"id":"hub","text":"a bicycle gear hub with seven speeds","version":"1"}
{"id":"nozzle","text":"a rocket nozzle cooled by its own fuel","version":"1"}
{"id":"hub","deleted":true,"version":"1"}
`)
	cfg, err := pipelines.Parse([]byte(fmt.Sprintf(`version: 1
name: feed
source: {type: jsonl, path: %q, name: feed}
gn: {name: bge-small-en-v15, model: %q, tokenizer: %q}
batching: {max_wait: 5ms}
cache: {dir: %q}
sinks:
  - {type: parquet, dir: %q}
run: {state_dir: %q, progress: off, commit_every: 2}
`, feed, model, tok, filepath.Join(dir, "cache"), filepath.Join(dir, "vectors"), filepath.Join(dir, "state"))))
	if err != nil {
		t.Fatal(err)
	}
	run := func(wantWritten, wantDeleted, wantSuperseded int64) (gnWindows int64) {
		t.Helper()
		sum, err := launch.Run(context.Background(), cfg, launch.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if sum.DocsWritten != wantWritten || sum.DocsDeleted != wantDeleted || sum.Superseded != wantSuperseded || sum.Accounted() != sum.InputsRead {
			t.Fatalf("summary: written %d deleted %d superseded %d of %d read (accounted %d); want %d %d %d",
				sum.DocsWritten, sum.DocsDeleted, sum.Superseded, sum.InputsRead, sum.Accounted(), wantWritten, wantDeleted, wantSuperseded)
		}
		return sum.GNWindows
	}
	live := func() []string {
		t.Helper()
		latest, err := vectorfile.Latest(cfg.Sinks[0].Dir())
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for id, v := range latest {
			ids = append(ids, id+"@"+v.Version)
		}
		slices.Sort(ids)
		return ids
	}
	run(3, 1, 0)
	if got, want := live(), []string{"feed:nozzle@1", "feed:oven@1"}; !slices.Equal(got, want) {
		t.Fatalf("after the first file the vectors hold %v, want %v", got, want)
	}

	write("b.jsonl", `{"id":"hub","text":"a late copy of the deleted version, never embedded","version":"1"}
{"id":"hub","text":"a bicycle gear hub with seven speeds","version":"2"}
{"id":"nozzle","deleted":true}
`)
	if gn := run(1, 1, 1); gn != 0 {
		t.Fatalf("the second file sent %d windows to the GN; the stale copy must not be embedded and hub@2's windows are cached", gn)
	}
	if got, want := live(), []string{"feed:hub@2", "feed:oven@1"}; !slices.Equal(got, want) {
		t.Fatalf("after the second file the vectors hold %v, want %v", got, want)
	}
	fp, dim, k, s, err := shardcache.ReadSpace(cfg.Cache.Dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := shardcache.Open(shardcache.Options{Dir: cfg.Cache.Dir, Fingerprint: fp, Dim: dim, K: k, S: s})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mans []string
	if err := c.ScanManifests(func(m shardcache.Manifest) error { mans = append(mans, m.DocID+"@"+m.Version); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"feed:hub@2", "feed:oven@1"}; !slices.Equal(mans, want) {
		t.Fatalf("the cache's manifests are %v, want %v", mans, want)
	}
}
