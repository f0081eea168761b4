package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsnet/compress/bzip2"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/deadletter"
	"github.com/reignpipe/reignpipe/connectors/wikipedia"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

func bz2Stream(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := bzip2.NewWriter(&buf, &bzip2.WriterConfig{Level: 1})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(s))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// damagedDump writes a multistream dump of 4 streams of 3 articles (ids 1..12) with its index,
// and flips 8 bytes in the middle of the third stream (pages 7, 8, 9).
func damagedDump(t *testing.T, dir string) string {
	t.Helper()
	var file, idx bytes.Buffer
	file.Write(bz2Stream(t, "<mediawiki>\n<siteinfo><dbname>dmgwiki</dbname></siteinfo>\n"))
	var damagedAt, damagedEnd int
	for s := range 4 {
		off := file.Len()
		var pages strings.Builder
		for p := range 3 {
			id := s*3 + p + 1
			fmt.Fprintf(&idx, "%d:%d:Page %d\n", off, id, id)
			fmt.Fprintf(&pages, "<page><title>Page %d</title><ns>0</ns><id>%d</id><revision><id>%d</id><text>%s</text></revision></page>\n",
				id, id, 1000+id, strings.Repeat(fmt.Sprintf("word%d river%d hill%d ", id, id*3, id*7), 30))
		}
		file.Write(bz2Stream(t, pages.String()))
		if s == 2 {
			damagedAt, damagedEnd = off, file.Len()
		}
	}
	file.Write(bz2Stream(t, "</mediawiki>\n"))
	b := file.Bytes()
	mid := damagedAt + (damagedEnd-damagedAt)/2
	for i := mid; i < mid+8; i++ {
		b[i] ^= 0x5A
	}
	dump := filepath.Join(dir, "dmgwiki-multistream.xml.bz2")
	if err := os.WriteFile(dump, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dmgwiki-multistream-index.txt.bz2"), bz2Stream(t, idx.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dump
}

// cmpNum orders "src:N" ids by N.
func cmpNum(a, b string) int {
	var x, y int
	fmt.Sscanf(a[strings.IndexByte(a, ':')+1:], "%d", &x)
	fmt.Sscanf(b[strings.IndexByte(b, ':')+1:], "%d", &y)
	return x - y
}

func readDeadLetters(t *testing.T, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]string
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// A backfill over a dump with one permanently damaged stream: the run completes with every
// other page written and the lost ones in the dead-letter file, and so does a rerun resuming
// from a watermark before the damage.
func TestDamagedWikipediaStreamRunCompletes(t *testing.T) {
	dir := t.TempDir()
	dump := damagedDump(t, dir)
	dlPath := filepath.Join(dir, "state", "dmg.deadletter.jsonl")
	p := chunk.Params{K: 10, S: 10}
	cache, err := shardcache.Open(shardcache.Options{Dir: filepath.Join(dir, "cache"), Fingerprint: "fake-gn", Dim: dim, K: p.K, S: p.S, RowsPerShard: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	run := func(resume int64) (*Runner, *memSink, int64) {
		src, err := wikipedia.Open(wikipedia.Options{Path: dump, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close(context.Background())
		dl, err := deadletter.Open(dlPath)
		if err != nil {
			t.Fatal(err)
		}
		defer dl.Close(context.Background())
		agg, _ := aggregate.NewMeanPool(dim, "fake-gn")
		sink := &memSink{}
		var wm int64
		r, err := New(Parts{Source: src, Tokenizer: wordTokenizer{}, Chunking: p, Fingerprint: "fake-gn", Dim: dim,
			Embedder: gnOf{&fakeGN{}}, Cache: cache, Aggregation: engine.Aggregation{Aggregator: agg}, Sinks: []connectors.Sink{sink}, DeadLetter: dl},
			Options{CommitEvery: 2, TokenizeWorkers: 2, Resume: resume, OnCommit: func(w int64) error { wm = w; return nil }})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Run(context.Background()); err != nil {
			t.Fatalf("run (resume %d) failed: %v", resume, err)
		}
		return r, sink, wm
	}
	written := func(s *memSink) string {
		var ids []string
		for _, v := range s.durable {
			ids = append(ids, v.DocID)
		}
		slices.SortFunc(ids, cmpNum)
		return strings.Join(ids, " ")
	}

	r, sink, wm := run(0)
	if got, want := written(sink), "dmgwiki:1 dmgwiki:2 dmgwiki:3 dmgwiki:4 dmgwiki:5 dmgwiki:6 dmgwiki:10 dmgwiki:11 dmgwiki:12"; got != want {
		t.Fatalf("written %q, want %q", got, want)
	}
	if r.C.DocsFailed.Load() != 3 || wm != 12 {
		t.Fatalf("failed %d, watermark %d; want 3 and 12", r.C.DocsFailed.Load(), wm)
	}
	dls := readDeadLetters(t, dlPath)
	if len(dls) != 3 {
		t.Fatalf("dead letters %v", dls)
	}
	slices.SortFunc(dls, func(a, b map[string]string) int { return cmpNum(a["doc_id"], b["doc_id"]) })
	for i, d := range dls {
		if d["doc_id"] != fmt.Sprintf("dmgwiki:%d", 7+i) || !strings.Contains(d["position"], fmt.Sprintf("Page %d", 7+i)) ||
			!strings.Contains(d["error"], "mismatching block checksum") || !strings.Contains(d["error"], "damaged") {
			t.Errorf("dead letter %d: %v", i, d)
		}
	}

	// A backfill that had committed the inputs before the damaged stream (1-6) resumes from
	// there and completes.
	r, sink, wm = run(6)
	if got, want := written(sink), "dmgwiki:10 dmgwiki:11 dmgwiki:12"; got != want || wm != 12 || r.C.Resumed.Load() != 6 {
		t.Fatalf("rerun wrote %q (watermark %d, resumed %d), want %q", got, wm, r.C.Resumed.Load(), want)
	}
	if n := len(readDeadLetters(t, dlPath)); n != 6 {
		t.Fatalf("%d dead letters after the rerun, want 6", n)
	}
}
