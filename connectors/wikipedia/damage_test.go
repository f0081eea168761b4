package wikipedia

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/multistream"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitest"
)

// articlePages returns n article pages with ids 100.. (as writeMultistream's index has them).
func articlePages(n int) []string {
	var pages []string
	for i := range n {
		text := strings.Repeat(fmt.Sprintf("Article %d tells of place %d and river %d. ", i, i*7, i*13), 20)
		pages = append(pages, pageXML(100+i, 0, fmt.Sprintf("Title %d: with colon", i), text, false))
	}
	return pages
}

func docIDs(res result) []string {
	var ids []string
	for _, d := range res.docs {
		ids = append(ids, strings.TrimPrefix(d.ID, "testwiki:"))
	}
	return ids
}

func wantIDs(n int, lost ...int) []string {
	var ids []string
	for i := range n {
		if !contains(lost, i) {
			ids = append(ids, fmt.Sprint(100+i))
		}
	}
	return ids
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// With an index, a damaged stream's pages are dead-lettered by id and title and every other
// stream is read; the same holds at every worker count, and twice in a row.
func TestDamagedStreamWithIndex(t *testing.T) {
	dir := t.TempDir()
	dump, index := wikitest.WriteMultistream(t, dir, "dmgwiki", siteinfo, articlePages(12), 3)
	off, end := wikitest.Damage(t, dump, index, 2) // pages 6, 7, 8
	for _, workers := range []int{1, 4, 1} {
		res, st, err := readAll(t, Options{Path: dump, Workers: workers, Source: "testwiki"})
		if err != nil {
			t.Fatalf("workers %d: run failed: %v", workers, err)
		}
		if got, want := fmt.Sprint(docIDs(res)), fmt.Sprint(wantIDs(12, 6, 7, 8)); got != want {
			t.Fatalf("workers %d: docs %s, want %s", workers, got, want)
		}
		if len(res.bad) != 3 {
			t.Fatalf("workers %d: %d dead letters, want 3: %v", workers, len(res.bad), res.bad)
		}
		for i, b := range res.bad {
			if b.DocID != fmt.Sprintf("testwiki:%d", 106+i) || !strings.Contains(b.Position, fmt.Sprintf("Title %d: with colon", 6+i)) {
				t.Errorf("dead letter %d: id %q position %q", i, b.DocID, b.Position)
			}
			msg := b.Reason.Error()
			for _, want := range []string{fmt.Sprintf("bytes %d-%d", off, end), `106 "Title 6: with colon"`, `108 "Title 8: with colon"`, "damaged"} {
				if !strings.Contains(msg, want) {
					t.Errorf("reason %q lacks %q", msg, want)
				}
			}
		}
		if st.BytesRead != st.BytesTotal {
			t.Errorf("bytes read %d of %d", st.BytesRead, st.BytesTotal)
		}
	}
}

// Without an index the reader resynchronises at the next stream header: one dead letter for
// the damaged stream, naming its byte range and the last page read before it.
func TestDamagedStreamWithoutIndex(t *testing.T) {
	dir := t.TempDir()
	dump, index := wikitest.WriteMultistream(t, dir, "dmgwiki", siteinfo, articlePages(12), 3)
	off, end := wikitest.Damage(t, dump, index, 2)
	res, _, err := readAll(t, Options{Path: dump, Sequential: true, Source: "testwiki"})
	if err != nil {
		t.Fatalf("run failed: %v", err)
	}
	if got, want := fmt.Sprint(docIDs(res)), fmt.Sprint(wantIDs(12, 6, 7, 8)); got != want {
		t.Fatalf("docs %s, want %s", got, want)
	}
	if len(res.bad) != 1 {
		t.Fatalf("%d dead letters, want 1: %v", len(res.bad), res.bad)
	}
	msg := res.bad[0].Error()
	for _, want := range []string{fmt.Sprintf("bytes %d-%d", off, end), "damaged", `"Title 5: with colon" (id 105)`} {
		if !strings.Contains(msg, want) {
			t.Errorf("dead letter %q lacks %q", msg, want)
		}
	}
}

// A dump cut short: with the full index every page it lost is dead-lettered and the error
// says truncated; without the index, one dead letter says so.
func TestTruncatedDump(t *testing.T) {
	dir := t.TempDir()
	full, index := wikitest.WriteMultistream(t, dir, "fullwiki", siteinfo, articlePages(12), 3)
	offs, err := multistream.ReadIndex(index)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(full)
	cut := offs[2] + (offs[3]-offs[2])/2 // inside the stream of pages 6-8
	dump := filepath.Join(dir, "cutwiki-multistream.xml.bz2")
	if err := os.WriteFile(dump, b[:cut], 0o644); err != nil {
		t.Fatal(err)
	}
	cutIndex := filepath.Join(dir, "cutwiki-multistream-index.txt.bz2")
	ib, _ := os.ReadFile(index)
	os.WriteFile(cutIndex, ib, 0o644)

	res, _, err := readAll(t, Options{Path: dump, Source: "testwiki"})
	if err != nil {
		t.Fatalf("with index: %v", err)
	}
	if got, want := fmt.Sprint(docIDs(res)), fmt.Sprint(wantIDs(6)); got != want {
		t.Fatalf("docs %s, want %s", got, want)
	}
	if len(res.bad) != 6 {
		t.Fatalf("%d dead letters, want 6 (pages 6-11)", len(res.bad))
	}
	for i, bad := range res.bad {
		if bad.DocID != fmt.Sprintf("testwiki:%d", 106+i) || !strings.Contains(bad.Error(), "truncated") {
			t.Errorf("dead letter %d: %v", i, bad)
		}
	}
	t.Logf("first loss: %v\nlast loss: %v", res.bad[0], res.bad[len(res.bad)-1])
	if !strings.Contains(res.bad[0].Error(), fmt.Sprintf("bytes %d-%d", offs[2], cut)) {
		t.Errorf("first loss does not name its range: %v", res.bad[0])
	}

	res, _, err = readAll(t, Options{Path: dump, Sequential: true, Source: "testwiki"})
	if err != nil {
		t.Fatalf("without index: %v", err)
	}
	if len(res.docs) != 6 || len(res.bad) != 1 || !strings.Contains(res.bad[0].Error(), "truncated") ||
		!strings.Contains(res.bad[0].Error(), fmt.Sprintf("bytes %d-%d", offs[2], cut)) {
		t.Fatalf("docs %d, dead letters %v", len(res.docs), res.bad)
	}
}

// A file of one bz2 stream cut short keeps the pages before the cut and names the first page
// it lost.
func TestTruncatedSingleStream(t *testing.T) {
	dir := t.TempDir()
	pages := articlePages(400) // several 100k blocks at level 1
	data := wikitest.BZ2(t, siteinfo+strings.Join(pages, "")+footer)
	res, _, err := readAll(t, Options{Path: wikitest.WriteFile(t, dir, "one.xml.bz2", data[:len(data)-40]), Source: "testwiki"})
	if err != nil {
		t.Fatalf("run failed: %v", err)
	}
	if len(res.docs) == 0 || len(res.docs) == 400 {
		t.Fatalf("%d docs: the blocks before the cut should be read, the last lost", len(res.docs))
	}
	if got, want := fmt.Sprint(docIDs(res)), fmt.Sprint(wantIDs(len(res.docs))); got != want {
		t.Fatalf("docs %s, want %s", got, want)
	}
	next := 100 + len(res.docs)
	if len(res.bad) != 1 || !strings.Contains(res.bad[0].Error(), "truncated") ||
		!strings.Contains(res.bad[0].Error(), fmt.Sprintf("last page read before it was \"Title %d: with colon\"", next-101)) {
		t.Fatalf("dead letters %v", res.bad)
	}
	t.Logf("%d docs before the cut; %v", len(res.docs), res.bad[0])
}

// FuzzResync damages a multistream dump read without its index at a fuzzed place: the read
// never fails as a whole, never hands out a page twice or out of order, and the stream header
// search agrees with a naive one.
func FuzzResync(f *testing.F) {
	dir := f.TempDir()
	var pages []string
	for i := range 6 {
		pages = append(pages, pageXML(100+i, 0, fmt.Sprint("P", i), fmt.Sprint("Short text ", i), false))
	}
	dump, _ := wikitest.WriteMultistream(f, dir, "fuzzwiki", siteinfo, pages, 2)
	clean, err := os.ReadFile(dump)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint16(400), []byte{0xff, 0, 0xff, 0, 0xff, 0, 0xff, 0})
	f.Add(uint16(0), []byte("BZh1"))
	f.Add(uint16(len(clean)/2), []byte("BZh91AY&SY"))
	f.Fuzz(func(t *testing.T, at uint16, patch []byte) {
		b := bytes.Clone(clean)
		p := int(at) % len(b)
		copy(b[p:], patch)
		if n := len(b) - len(patch); int(at)%7 == 0 && n > 0 {
			b = b[:max(p, 1)] // sometimes truncate there instead
		}
		naive := int64(-1)
		for i := 1; i+multistream.HeaderLen <= len(b); i++ {
			if multistream.IsStreamHeader(b[i:]) {
				naive = int64(i)
				break
			}
		}
		got, found, _ := multistream.NextStreamHeader(bytes.NewReader(b), 1, int64(len(b)))
		if (naive >= 0) != found || found && got != naive {
			t.Fatalf("multistream.NextStreamHeader = %d %v, naive %d", got, found, naive)
		}
		// One file per fuzzing process, rewritten each time: a temporary directory per input
		// costs more than the read.
		path := filepath.Join(dir, fmt.Sprintf("d%d.xml.bz2", os.Getpid()))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Open(Options{Path: path, Sequential: true})
		if err != nil {
			return // not bz2 any more, or unreadable at its head: refused up front
		}
		defer r.Close(t.Context())
		last := 0
		for {
			d, _, err := r.Read(t.Context())
			if err == io.EOF {
				return
			}
			var bad *connectors.BadInputError
			if errors.As(err, &bad) {
				continue
			}
			if err != nil {
				if strings.Contains(err.Error(), "ends inside") || strings.Contains(err.Error(), "no <page>") || strings.Contains(err.Error(), "no pages") {
					return // the XML itself was cut where bz2 could not tell
				}
				t.Fatalf("read failed: %v", err)
			}
			var id int
			fmt.Sscanf(d.ID[strings.IndexByte(d.ID, ':')+1:], "%d", &id)
			if id <= last {
				t.Fatalf("page %d after %d", id, last)
			}
			last = id
		}
	})
}

func TestLossMessages(t *testing.T) {
	dir := t.TempDir()
	dump, index := wikitest.WriteMultistream(t, dir, "dmgwiki", siteinfo, articlePages(6), 3)
	wikitest.Damage(t, dump, index, 1)
	for _, opts := range []Options{{Path: dump}, {Path: dump, Sequential: true}} {
		res, _, err := readAll(t, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range res.bad {
			t.Logf("sequential=%v: %v", opts.Sequential, b)
		}
	}
}

// Streams too long to hold are read as they decompress: a truncated one keeps the pages of
// its complete blocks, a damaged one in a multistream file resumes at the next stream header.
func TestStreamingFallback(t *testing.T) {
	defer func(n int64) { wholeStreamSearch = n }(wholeStreamSearch)
	wholeStreamSearch = 64 // no stream ends within reach
	dir := t.TempDir()

	data := wikitest.BZ2(t, siteinfo+strings.Join(articlePages(400), "")+footer)
	res, _, err := readAll(t, Options{Path: wikitest.WriteFile(t, dir, "one.xml.bz2", data[:len(data)-40]), Source: "testwiki"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.docs); n == 0 || n == 400 || fmt.Sprint(docIDs(res)) != fmt.Sprint(wantIDs(n)) {
		t.Fatalf("truncated single stream: %d docs", n)
	}
	if len(res.bad) != 1 || !strings.Contains(res.bad[0].Error(), "truncated") {
		t.Fatalf("dead letters %v", res.bad)
	}

	dump, index := wikitest.WriteMultistream(t, dir, "dmgwiki", siteinfo, articlePages(12), 3)
	off, end := wikitest.Damage(t, dump, index, 2)
	res, _, err = readAll(t, Options{Path: dump, Sequential: true, Source: "testwiki"})
	if err != nil {
		t.Fatal(err)
	}
	// One reader runs across the stream boundaries until the damage, then resumes after it.
	if got := fmt.Sprint(docIDs(res)); got != fmt.Sprint(wantIDs(12, 6, 7, 8)) {
		t.Fatalf("docs %s", got)
	}
	if len(res.bad) != 1 || !strings.Contains(res.bad[0].Error(), fmt.Sprintf("bytes %d-%d", off, end)) {
		t.Fatalf("dead letters %v", res.bad)
	}
}
