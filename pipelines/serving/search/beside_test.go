package search_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/launch"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/pipelines/serving/query"
	"github.com/reignpipe/reignpipe/pipelines/serving/search/searchtest"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// watchingPipeline writes a pipeline whose source watches dir/inbox, committing after every
// document, and returns its path and config.
func watchingPipeline(t *testing.T, dir string) (string, *pipelines.Config) {
	t.Helper()
	model, tok := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	if err := os.MkdirAll(filepath.Join(dir, "inbox"), 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`version: 1
name: besidetest
source: {type: jsonl, path: %q, name: t, watch: true, pattern: "*.jsonl", poll: 50ms, settle: 0s}
gn: {name: bge-small-en-v15, model: %q, tokenizer: %q}
batching: {max_wait: 5ms}
cache: {dir: %q}
sinks: [{type: parquet, dir: %q}]
run: {state_dir: %q, progress: off, commit_every: 1, commit_interval: 100ms}
`, filepath.Join(dir, "inbox"), model, tok, filepath.Join(dir, "cache"), filepath.Join(dir, "vectors"), filepath.Join(dir, "state"))
	path := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := pipelines.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return path, cfg
}

// drop renames a JSONL file of docs (id -> text) into the inbox, as a feed delivers files.
func drop(t *testing.T, dir, name string, docs map[string]string) {
	t.Helper()
	var b strings.Builder
	for id, text := range docs {
		line, _ := json.Marshal(map[string]string{"id": id, "text": text})
		b.Write(append(line, '\n'))
	}
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "inbox", name)); err != nil {
		t.Fatal(err)
	}
}

// waitPublished waits until the run published every id (with the source's "t:" prefix).
func waitPublished(t *testing.T, dir string, timeout time.Duration, ids ...string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		latest, err := vectorfile.Latest(filepath.Join(dir, "vectors"))
		if err == nil {
			all := true
			for _, id := range ids {
				if _, ok := latest["t:"+id]; !ok {
					all = false
				}
			}
			if all {
				return time.Since(start)
			}
		}
		if time.Since(start) > timeout {
			t.Fatalf("the running pipeline did not publish %v within %s (last read: %v)", ids, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWatchingRunHelper is the child of TestQueryBesideAWatchingRun: `reignpipe run` of the
// pipeline named by SEARCHTEST_WATCH, which watches its inbox until standard input closes.
func TestWatchingRunHelper(t *testing.T) {
	path := os.Getenv("SEARCHTEST_WATCH")
	if path == "" {
		t.Skip("runs as the child process of TestQueryBesideAWatchingRun")
	}
	cfg, err := pipelines.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	fmt.Println("running")
	if _, err := launch.Run(ctx, cfg, launch.Options{}); err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}

// The query side beside a running pipeline of the same cache, the pipeline in its own process
// holding the cache's writer lock and watching a folder so it stays open:
//   - a corpus document costs no GN pass;
//   - the writer is not blocked: it keeps committing new files while queries run back to back;
//   - a document the pipeline commits after the query side opened becomes a cache hit;
//   - a query's own windows do not enter the corpus cache (a repeat finds them in the query
//     cache of its own process only).
func TestQueryBesideAWatchingRun(t *testing.T) {
	dir := t.TempDir()
	path, cfg := watchingPipeline(t, dir)
	texts := searchtest.Texts()
	drop(t, dir, "a.jsonl", map[string]string{"long": texts["long"], "rocket": texts["rocket"]})

	stopChild, stdout := child(t, "TestWatchingRunHelper", "SEARCHTEST_WATCH="+path)
	stopRun := func() {
		if err := stopChild(); err != nil {
			t.Errorf("the watching run: %v", err)
		}
	}
	if line, _ := stdout.ReadString('\n'); line != "running\n" {
		t.Fatalf("the watching run did not start: %q", line)
	}
	waitPublished(t, dir, 2*time.Minute, "long", "rocket")
	if _, err := shardcache.Open(shardcache.Options{Dir: cfg.Cache.Dir, Fingerprint: "x", Dim: 384, K: 512, S: 512}); err == nil {
		t.Fatal("the running pipeline does not hold its cache: the test proves nothing")
	}

	ctx := context.Background()
	e, err := query.Open(ctx, cfg, query.Options{QueryCacheWindows: query.DefaultQueryCacheWindows})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	res, err := e.Embed(ctx, *textDoc(t, "q", texts["long"]))
	if err != nil {
		t.Fatal(err)
	}
	if res.Windows < 2 || res.CacheHits != res.Windows || res.GNWindows != 0 {
		t.Fatalf("a corpus document beside the running pipeline: %d windows, %d hits, %d GN", res.Windows, res.CacheHits, res.GNWindows)
	}

	// Queries back to back while the pipeline takes a new file: it must publish it as it would
	// alone (the query side takes no lock it waits on).
	harbour := strings.Repeat("The harbour pilot boards the container ship outside the breakwater and guides it past the "+
		"sandbanks to its berth, where gantry cranes unload the boxes onto waiting trucks. ", 40)
	stop := make(chan struct{})
	var queries atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := e.Embed(ctx, *textDoc(t, "q", texts["rocket"])); err != nil {
				t.Errorf("query beside the run: %v", err)
				return
			}
			queries.Add(1)
		}
	}()
	drop(t, dir, "b.jsonl", map[string]string{"harbour": harbour})
	took := waitPublished(t, dir, 2*time.Minute, "harbour")
	close(stop)
	wg.Wait()
	t.Logf("the running pipeline published a new %d-byte document in %s while %d queries ran beside it", len(harbour), took.Round(time.Millisecond), queries.Load())
	if queries.Load() == 0 {
		t.Fatal("no query ran while the pipeline took the new file")
	}

	// The same size of document with no query beside it, for the log: what the queries cost the
	// run is CPU they share, not a wait.
	ferry := strings.Replace(harbour, "container ship", "car ferry", -1)
	drop(t, dir, "c.jsonl", map[string]string{"ferry": ferry})
	t.Logf("alone, the same pipeline published a %d-byte document in %s", len(ferry), waitPublished(t, dir, 2*time.Minute, "ferry").Round(time.Millisecond))

	// Committed after the query side opened: a hit now.
	res, err = e.Embed(ctx, *textDoc(t, "q", harbour))
	if err != nil {
		t.Fatal(err)
	}
	if res.Windows < 2 || res.CacheHits != res.Windows || res.GNWindows != 0 {
		t.Fatalf("a document committed after the query side opened: %d windows, %d hits, %d GN", res.Windows, res.CacheHits, res.GNWindows)
	}

	// A query the corpus does not have: embedded once, then from the query cache.
	novel := strings.Repeat("Glaciers carve U-shaped valleys as the ice moves downhill under its own weight, "+
		"plucking boulders from the bedrock and leaving moraines where it melts. ", 60)
	t0 := time.Now()
	first, err := e.Embed(ctx, *textDoc(t, "client:novel", novel))
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	second, err := e.Embed(ctx, *textDoc(t, "client:novel", novel))
	if err != nil {
		t.Fatal(err)
	}
	t2 := time.Now()
	if first.GNWindows == 0 || second.GNWindows != 0 || second.CacheHits != second.Windows {
		t.Fatalf("a new query, then its repeat: %+v, %+v", first, second)
	}
	t.Logf("a %d-window query not in the corpus: %s with %d GN windows; its repeat from the query cache: %s",
		first.Windows, t1.Sub(t0).Round(time.Millisecond), first.GNWindows, t2.Sub(t1).Round(time.Microsecond))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	// The query's windows are nowhere in the corpus cache, once the run has committed and closed.
	stopRun()
	pp, err := parts.Open(cfg, parts.Want{Tokenizer: true, Cache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pp.Close()
	windows, _ := pp.Params.Cut(pp.Tokenizer, novel, false)
	for i, w := range windows {
		if ok, err := pp.Cache.Contains(chunk.Key(pp.GN.Fingerprint, pp.Params, w)); ok || err != nil {
			t.Fatalf("query window %d is in the corpus cache (%v)", i, err)
		}
	}
	hw, _ := pp.Params.Cut(pp.Tokenizer, harbour, false)
	if ok, err := pp.Cache.Contains(chunk.Key(pp.GN.Fingerprint, pp.Params, hw[0])); !ok || err != nil {
		t.Fatalf("the corpus document's window is not in the cache: the check above proves nothing (%v)", err)
	}
}
