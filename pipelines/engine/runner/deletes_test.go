package runner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/jsonl"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

func upsert(id, version, text string) schemas.Document {
	return schemas.Document{ID: id, Source: "t", Version: version, Title: id, Text: text}
}

func deletion(id, version string) schemas.Document {
	return schemas.Document{ID: id, Source: "t", Version: version, Deleted: true}
}

// runDeletes runs docs over the cache in dir and returns the sink and the summary, checking
// that every input is accounted for and acked.
func runDeletes(t *testing.T, dir string, docs []schemas.Document) (*rig, engine.Summary) {
	t.Helper()
	rg := newRig(t, dir, docs, Options{CommitEvery: 3})
	if err := rg.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := rg.cache.Close(); err != nil { // the next run opens it again
		t.Fatal(err)
	}
	var s engine.Summary
	rg.r.Summarize(&s, rg.src.Stats())
	if s.InputsRead != int64(len(docs)) || s.Accounted() != s.InputsRead {
		t.Fatalf("read %d of %d inputs, accounted %d: %+v", s.InputsRead, len(docs), s.Accounted(), s)
	}
	if rg.src.acked.Load() != s.InputsRead {
		t.Fatalf("acked %d of %d", rg.src.acked.Load(), s.InputsRead)
	}
	return rg, s
}

// The version rule end to end through the runner: an upsert, its deletion in the same input
// (applied after it, whatever order they finish in), a stale upsert after the deletion (in
// the same input and in the next run: not embedded, not written, counted), and a newer
// upsert, which brings the document back.
func TestRunnerAppliesDeletes(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("many words make a long document so it finishes last ", 12)
	first := []schemas.Document{
		upsert("t:a", "1", long), // several windows: finishes after the deletion behind it is read
		deletion("t:a", "2"),
		upsert("t:b", "1", "a short one"),
		upsert("t:a", "2", "stale: the deletion at 2 supersedes it"),
		deletion("t:c", "5"), // a document this run never saw: remembered all the same
		upsert("t:b", "2", "b again, newer"),
	}
	rg, s := runDeletes(t, dir, first)
	if s.DocsWritten != 3 || s.DocsDeleted != 2 || s.Superseded != 1 {
		t.Fatalf("written %d deleted %d superseded %d, want 3 2 1", s.DocsWritten, s.DocsDeleted, s.Superseded)
	}
	// The sink saw t:a's upsert before its deletion, and never the stale version.
	if got := sinkOrder(rg.sink, "t:a"); got != "t:a@1 -t:a@2" {
		t.Fatalf("t:a reached the sink as %q", got)
	}
	if got := sinkOrder(rg.sink, "t:c"); got != "-t:c@5" {
		t.Fatalf("t:c reached the sink as %q", got)
	}
	cache := reopen(t, dir)
	for id, want := range map[string]string{"t:a": "-", "t:b": "2", "t:c": "-"} {
		if got := manifestVersion(t, cache, id); got != want {
			t.Errorf("after run 1 the cache's manifest of %s is %q, want %q", id, got, want)
		}
	}
	cache.Close()

	// Run 2: t:a re-delivered at old versions stays deleted (texts never embedded before: had
	// they been embedded, the GN would have been called), then comes back at version 3 with
	// the text of version 1, whose windows the cache still holds.
	second := []schemas.Document{
		upsert("t:a", "1", "late re-delivery of version 1 with text never seen"),
		upsert("t:a", "2", "and of version 2, also new text"),
		upsert("t:c", "4", "an older t:c than its deletion"),
		upsert("t:a", "3", long),
	}
	rg, s = runDeletes(t, dir, second)
	if s.DocsWritten != 1 || s.DocsDeleted != 0 || s.Superseded != 3 {
		t.Fatalf("run 2: written %d deleted %d superseded %d, want 1 0 3", s.DocsWritten, s.DocsDeleted, s.Superseded)
	}
	if n := rg.gn.calls.Load(); n != 0 {
		t.Fatalf("run 2 sent %d windows to the GN; the superseded upserts must not be embedded and t:a@3's windows are cached", n)
	}
	if got := strings.Join(rg.sink.order, " "); got != "t:a@3" {
		t.Fatalf("run 2's sink saw %q, want only t:a@3", got)
	}
	cache = reopen(t, dir)
	defer cache.Close()
	for id, want := range map[string]string{"t:a": "3", "t:c": "-"} {
		if got := manifestVersion(t, cache, id); got != want {
			t.Errorf("after run 2 the cache's manifest of %s is %q, want %q", id, got, want)
		}
	}
}

// sinkOrder is what s was given for id, in order: "id@version" a vector, "-id@version" a
// deletion. Only one id's order is the input's; different ids finish in any order.
func sinkOrder(s *memSink, id string) string {
	var out []string
	for _, e := range s.order {
		if strings.TrimPrefix(e[:strings.LastIndex(e, "@")], "-") == id {
			out = append(out, e)
		}
	}
	return strings.Join(out, " ")
}

func reopen(t *testing.T, dir string) *shardcache.Cache {
	t.Helper()
	c, err := shardcache.Open(shardcache.Options{Dir: dir, Fingerprint: "fake-gn", Dim: dim, K: 10, S: 10, RowsPerShard: 16})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// manifestVersion is the version of id's manifest in c, "-" when it has none.
func manifestVersion(t *testing.T, c *shardcache.Cache, id string) string {
	t.Helper()
	m, ok, err := c.Manifest(id)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "-"
	}
	return m.Version
}

// A JSONL feed's deletion lines take the same path: the file's own upsert, deletion, stale
// re-delivery and return of one document, in one input.
func TestRunnerAppliesJSONLDeletions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "feed.jsonl")
	feed := `{"id":"a","text":"first version of a","version":"1"}
{"id":"b","text":"b stays","version":"1"}
{"id":"a","deleted":true,"version":"1"}
{"id":"a","text":"first version of a","version":"1"}
{"id":"c","deleted":true,"text":"a deletion with text is a bad input"}
{"id":"a","text":"a is back","version":"2"}
`
	if err := os.WriteFile(path, []byte(feed), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := jsonl.Open(jsonl.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	rg := newRig(t, t.TempDir(), nil, Options{CommitEvery: 2})
	rg.r.parts.Source = src
	if err := rg.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var s engine.Summary
	rg.r.Summarize(&s, src.Stats())
	if s.InputsRead != 6 || s.Accounted() != 6 || s.DocsWritten != 3 || s.DocsDeleted != 1 || s.Superseded != 1 || s.DocsFailed != 1 {
		t.Fatalf("summary %+v", s)
	}
	if got := sinkOrder(rg.sink, "feed:a"); got != "feed:a@1 -feed:a@1 feed:a@2" {
		t.Fatalf("the sink saw feed:a as %q", got)
	}
	if len(rg.dl.d) != 1 || rg.dl.d[0].DocID != "feed:c" || !strings.Contains(rg.dl.d[0].Position, "line 5") {
		t.Fatalf("dead letters %+v", rg.dl.d)
	}
	if got := manifestVersion(t, rg.cache, "feed:a"); got != "2" {
		t.Fatalf("feed:a's manifest is at %q, want 2", got)
	}
}
