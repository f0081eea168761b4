package search_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/pipelines/serving/query"
	"github.com/reignpipe/reignpipe/pipelines/serving/search"
	"github.com/reignpipe/reignpipe/pipelines/serving/search/searchtest"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// bruteForce ranks the newest stored vectors against q by dot product, leaving out skip, best
// first and ties by id: what an exact search must return.
func bruteForce(t *testing.T, dir string, q []float32, skip ...string) []string {
	t.Helper()
	latest, err := vectorfile.Latest(dir)
	if err != nil {
		t.Fatal(err)
	}
	type scored struct {
		id string
		s  float64
	}
	var all []scored
	for id, v := range latest {
		if slices.Contains(skip, id) {
			continue
		}
		var s float64
		for i := range q {
			s += float64(q[i]) * float64(v.Vector[i])
		}
		all = append(all, scored{id, s})
	}
	slices.SortFunc(all, func(a, b scored) int {
		if a.s != b.s {
			if a.s > b.s {
				return -1
			}
			return 1
		}
		return strings.Compare(a.id, b.id)
	})
	ids := make([]string, len(all))
	for i, a := range all {
		ids[i] = a.id
	}
	return ids
}

func hitIDs(r *search.Result) []string {
	ids := make([]string, len(r.Hits))
	for i, h := range r.Hits {
		ids[i] = h.DocID
	}
	return ids
}

func textDoc(t *testing.T, id, text string) *schemas.Document {
	t.Helper()
	d, err := search.TextDocument(strings.NewReader(text), id, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return &d
}

// TestSearchFiles runs the query side against a real run's parquet output: a corpus text as the
// query gets the vector the run published for it, from cached windows only, is left out of its
// own answer (with its twin of the same text), and the ranking is the exact one.
func TestSearchFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := searchtest.Corpus(t, dir, "")
	vectors := filepath.Join(dir, "vectors")
	ctx := context.Background()
	s, err := search.Open(ctx, cfg, search.Options{Sink: -1, Query: query.Options{QueryCacheWindows: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	latest, err := vectorfile.Latest(vectors)
	if err != nil {
		t.Fatal(err)
	}

	// A corpus document's text: every window is cached, the vector is the published one.
	res, err := s.Search(ctx, search.Request{Doc: textDoc(t, "query:bread", searchtest.Texts()["bread"]), K: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Query.GNWindows != 0 || res.Query.CacheHits != res.Query.Windows || res.Query.Windows != 1 {
		t.Fatalf("a corpus text should cost no GN pass: %+v", res.Query)
	}
	emb, err := s.Embedder.Embed(ctx, *textDoc(t, "query:bread", searchtest.Texts()["bread"]))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(emb.Vector.Vector, latest["t:bread"].Vector) || emb.Vector.Space != latest["t:bread"].Space {
		t.Fatal("the query side's vector for a corpus text differs from the one the run published")
	}
	want := bruteForce(t, vectors, emb.Vector.Vector, "t:bread", "t:twin")[:3]
	if got := hitIDs(res); !slices.Equal(got, want) {
		t.Fatalf("hits %v, want %v (the query and its same-text twin left out)", got, want)
	}
	if res.Hits[0].DocID != "t:long" {
		t.Errorf("the sourdough document should be nearest to bread: %v", hitIDs(res))
	}
	if res.Excluded != 2 || res.Among != 6 || !res.Exact {
		t.Errorf("answer counts: among %d excluded %d exact %v", res.Among, res.Excluded, res.Exact)
	}

	// A stored document by id: its published vector, itself and its twin left out.
	res, err = s.Search(ctx, search.Request{ID: "t:rocket", K: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hitIDs(res), bruteForce(t, vectors, latest["t:rocket"].Vector, "t:rocket"); !res.Query.Stored || !slices.Equal(got, want) {
		t.Fatalf("by id: hits %v, want %v", got, want)
	}
	// The id without its source prefix names the one document that has it.
	bare, err := s.Search(ctx, search.Request{ID: "rocket", K: 10})
	if err != nil || bare.Query.DocID != "t:rocket" || !slices.Equal(hitIDs(bare), hitIDs(res)) {
		t.Fatalf("a bare id: %+v %v", bare, err)
	}
	if _, err = s.Search(ctx, search.Request{ID: "nope", K: 3}); !errors.As(err, new(*connectors.NotFoundError)) || strings.Contains(err.Error(), "did you mean") {
		t.Fatalf("an unknown id: %v", err)
	}

	// A new text: the GN embeds it once; a repeat in the same process finds it in the query
	// cache; another process embeds it again, since no query window enters the corpus cache.
	novel := "Glaciers carve U-shaped valleys as the ice moves downhill under its own weight."
	res, err = s.Search(ctx, search.Request{Doc: textDoc(t, "query:glacier", novel), K: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Query.GNWindows != 1 || len(res.Hits) != 2 {
		t.Fatalf("a new text: %+v, %d hits", res.Query, len(res.Hits))
	}
	again, err := s.Search(ctx, search.Request{Doc: textDoc(t, "query:glacier", novel), K: 2})
	if err != nil {
		t.Fatal(err)
	}
	if again.Query.GNWindows != 0 || again.Query.CacheHits != 1 || s.Embedder.Stats().QueryCacheHits != 1 || !slices.Equal(hitIDs(again), hitIDs(res)) {
		t.Fatalf("a repeated text should come from the query cache with the same answer: %+v %+v", again.Query, s.Embedder.Stats())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := search.Open(ctx, cfg, search.Options{Sink: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	res2, err := s2.Search(ctx, search.Request{Doc: textDoc(t, "query:glacier", novel), K: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Query.GNWindows != 1 || !slices.Equal(hitIDs(res2), hitIDs(res)) {
		t.Fatalf("another process should embed the query again (it is not in the corpus cache), same answer: %+v %v", res2.Query, hitIDs(res2))
	}
	if _, err := s2.Search(ctx, search.Request{Doc: textDoc(t, "q", novel), K: 1, GN: true}); err == nil || !strings.Contains(err.Error(), "meanpool") {
		t.Fatalf("asking a mean-pool pipeline for its GN companion: %v", err)
	}
}

// TestQueryBesideAHeldCache: a running pipeline holds the chunk cache (its writer's lock); a
// query next to it reads the cache anyway, without the lock, and a corpus document costs no
// GN pass.
func TestQueryBesideAHeldCache(t *testing.T) {
	dir := t.TempDir()
	cfg := searchtest.Corpus(t, dir, "")
	// What a running pipeline holds: the cache open in another process.
	holdCache(t, cfg)
	e, err := query.Open(context.Background(), cfg, query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !strings.Contains(e.CacheNote, cfg.Cache.Dir+", read beside any pipeline writing it") {
		t.Fatalf("cache note %q", e.CacheNote)
	}
	res, err := e.Embed(context.Background(), *textDoc(t, "q", searchtest.Texts()["long"]))
	if err != nil {
		t.Fatal(err)
	}
	if res.CacheHits != res.Windows || res.GNWindows != 0 || res.Windows < 2 {
		t.Fatalf("a corpus document beside the writer: %d windows, %d hits, %d GN", res.Windows, res.CacheHits, res.GNWindows)
	}
	if err := e.Close(); err != nil { // one ONNX Runtime environment per process
		t.Fatal(err)
	}
	// --no-cache: every distinct window goes to the GN (identical windows of the query share
	// one pass, as a corpus document's do).
	nc, err := query.Open(context.Background(), cfg, query.Options{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if res, err = nc.Embed(context.Background(), *textDoc(t, "q", searchtest.Texts()["long"])); err != nil {
		t.Fatal(err)
	}
	if res.CacheHits != 0 || res.GNWindows == 0 {
		t.Fatalf("without the cache every window goes to the GN: %d windows, %d hits, %d GN", res.Windows, res.CacheHits, res.GNWindows)
	}
}

// holdCache opens cfg's chunk cache in a child process (this test binary, re-run as
// TestHoldCache) until the test ends, as a running pipeline would.
func holdCache(t *testing.T, cfg *pipelines.Config) {
	t.Helper()
	_, stdout := child(t, "TestHoldCache", "SEARCHTEST_HOLD_DIR="+cfg.Cache.Dir, "SEARCHTEST_HOLD_FP="+fingerprint(t, cfg))
	line, err := stdout.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "holding") {
		t.Fatalf("cache holder: %q %v", line, err)
	}
}

// child runs this test binary's test run as another process, with env added to its
// environment and its standard error to the test's, and returns its standard output and stop,
// which closes its standard input (the helpers' signal to end) and returns how it exited; the
// test's end stops it too.
func child(t *testing.T, run string, env ...string) (stop func() error, stdout *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceValue(func() error { stdin.Close(); return cmd.Wait() })
	t.Cleanup(func() { stop() })
	return stop, bufio.NewReader(out)
}

// TestHoldCache is the child of holdCache: it holds the cache open until stdin closes.
func TestHoldCache(t *testing.T) {
	dir := os.Getenv("SEARCHTEST_HOLD_DIR")
	if dir == "" {
		t.Skip("runs as the child process of TestQueryBesideAHeldCache")
	}
	c, err := shardcache.Open(shardcache.Options{Dir: dir, Fingerprint: os.Getenv("SEARCHTEST_HOLD_FP"), Dim: 384, K: 512, S: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Println("holding")
	io.Copy(io.Discard, os.Stdin)
}

// fingerprint is the GN fingerprint the pipeline's cache is keyed by.
func fingerprint(t *testing.T, cfg *pipelines.Config) string {
	t.Helper()
	pp, err := parts.Open(cfg, parts.Want{})
	if err != nil {
		t.Fatal(err)
	}
	defer pp.Close()
	return pp.GN.Fingerprint
}

func TestReadDocument(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, file, content, format string
		wantID, wantErr             string
	}{
		{"text", "q.txt", "Some text\x00 here.\n", "", "query:q.txt", ""},
		{"jsonl one line", "q.jsonl", `{"id":"x","title":"T","text":"hello there"}` + "\n", "", "q:x", ""},
		{"jsonl two lines", "two.jsonl", `{"id":"x","text":"a"}` + "\n" + `{"id":"y","text":"b"}` + "\n", "", "", "more than one document"},
		{"jsonl broken", "bad.jsonl", `{"id":"x","text":` + "\n", "", "", "bad.jsonl"},
		{"blank text", "blank.txt", " \n\t\n", "", "", "no text"},
		{"forced text", "q.jsonl", `{"id":"x","text":"hello there"}`, "text", "query:q.jsonl", ""},
		{"unknown format", "q.txt", "x", "pdf", "", "is not uspto, jsonl, text"},
		{"patent", "p.xml", patent, "", "uspto:US07000001B2", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := search.ReadDocument(write(tc.file, tc.content), search.DocOptions{Format: tc.format})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.ID != tc.wantID || d.Text == "" || strings.ContainsRune(d.Text, 0) {
				t.Fatalf("document %+v", d)
			}
		})
	}
}

const patent = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE us-patent-grant SYSTEM "us-patent-grant-v42-2006-08-23.dtd" [ ]>
<us-patent-grant lang="EN" dtd-version="v4.2 2006-08-23">
<us-bibliographic-data-grant>
<publication-reference><document-id><country>US</country><doc-number>07000001</doc-number><kind>B2</kind><date>20060101</date></document-id></publication-reference>
<invention-title>Bread oven</invention-title>
</us-bibliographic-data-grant>
<abstract><p>An oven for bread.</p></abstract>
<description><p>The oven bakes bread evenly.</p></description>
<claims><claim><claim-text>1. An oven.</claim-text></claim></claims>
</us-patent-grant>
`
