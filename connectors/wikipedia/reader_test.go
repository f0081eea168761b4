package wikipedia

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitest"
	"github.com/reignpipe/reignpipe/schemas"
)

var siteinfo = wikitest.Siteinfo("testwiki")

const footer = wikitest.Footer

func pageXML(id, ns int, title, text string, redirect bool) string {
	return wikitest.Page(id, ns, 1000+id, title, text, redirect)
}

// fixturePages is a small dump's worth of pages covering every skip reason and a bad page.
func fixturePages() []string {
	return []string{
		pageXML(1, 0, "Alpha", "'''Alpha''' is a [[letter|Greek letter]].{{cite}}", false),
		pageXML(2, 0, "Beta", "#REDIRECT [[Alpha]]", true),
		pageXML(3, 4, "Wikipedia:About", "project page", false),
		`  <page><title>Broken</title><ns>0</ns><revision><id>9</id><text>no id</text></revision></page>` + "\n",
		pageXML(4, 0, "Gamma &amp; Delta", "== Heading ==\nText &amp;amp; more.", false),
		pageXML(5, 0, "Empty", "{{only a template}}", false),
		pageXML(6, 0, "Zeta", "Last [[page]]s.", false),
	}
}

type result struct {
	docs []schemas.Document
	bad  []*connectors.BadInputError
}

func readAll(t testing.TB, opts Options) (result, connectors.SourceStats, error) {
	t.Helper()
	r, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	var res result
	for {
		d, ack, err := r.Read(context.Background())
		if err == io.EOF {
			return res, r.Stats(), nil
		}
		var be *connectors.BadInputError
		if errors.As(err, &be) {
			if ack == nil || ack(context.Background(), err) != nil {
				t.Fatal("bad input needs a working no-op ack")
			}
			res.bad = append(res.bad, be)
			continue
		}
		if err != nil {
			return res, r.Stats(), err
		}
		if ack == nil {
			t.Fatal("nil ack")
		}
		res.docs = append(res.docs, d)
	}
}

func TestReadFormats(t *testing.T) {
	dir := t.TempDir()
	xml := siteinfo + strings.Join(fixturePages(), "") + footer
	u16 := utf16.Encode([]rune(xml))
	le := []byte{0xFF, 0xFE}
	for _, c := range u16 {
		le = append(le, byte(c), byte(c>>8))
	}
	ms, _ := wikitest.WriteMultistream(t, dir, "testwiki-20240101-pages-articles", siteinfo, fixturePages(), 2)
	half := len(fixturePages()) / 2
	concat := append(wikitest.BZ2(t, siteinfo+strings.Join(fixturePages()[:half], "")), wikitest.BZ2(t, strings.Join(fixturePages()[half:], "")+footer)...)
	files := map[string]Options{
		"plain xml":            {Path: wikitest.WriteFile(t, dir, "a.xml", []byte(xml))},
		"utf-8 bom":            {Path: wikitest.WriteFile(t, dir, "b.xml", append([]byte("\xEF\xBB\xBF"), xml...))},
		"bz2":                  {Path: wikitest.WriteFile(t, dir, "c.xml.bz2", wikitest.BZ2(t, xml))},
		"concatenated streams": {Path: wikitest.WriteFile(t, dir, "d.xml.bz2", concat)},
		"utf-16le bz2":         {Path: wikitest.WriteFile(t, dir, "e.xml.bz2", wikitest.BZ2(t, string(le)))},
		"multistream 1 worker": {Path: ms, Workers: 1},
		"multistream 4":        {Path: ms, Workers: 4},
		"multistream as seq":   {Path: ms, Sequential: true},
	}
	wantIDs := []string{"testwiki:1", "testwiki:4", "testwiki:6"}
	wantSkipped := map[string]int64{"redirect": 1, "namespace": 1, "markup_only": 1}
	for name, opts := range files {
		t.Run(name, func(t *testing.T) {
			res, st, err := readAll(t, opts)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, d := range res.docs {
				ids = append(ids, d.ID)
			}
			if !reflect.DeepEqual(ids, wantIDs) {
				t.Errorf("ids = %v, want %v", ids, wantIDs)
			}
			if !reflect.DeepEqual(st.Skipped, wantSkipped) {
				t.Errorf("skipped = %v, want %v", st.Skipped, wantSkipped)
			}
			if st.Read != 3 || st.BytesTotal == 0 || st.BytesRead != st.BytesTotal {
				t.Errorf("stats = %+v", st)
			}
			if len(res.bad) != 1 || !strings.Contains(res.bad[0].Position, "page 4") ||
				!strings.Contains(res.bad[0].Position, "Broken") || !strings.Contains(res.bad[0].Error(), "no numeric <id>") {
				t.Errorf("bad = %v", res.bad)
			}
			want := schemas.Document{
				ID: "testwiki:1", Source: "testwiki", Version: "1001", Title: "Alpha",
				Text: "Alpha is a Greek letter.",
				Meta: map[string]string{"ns": "0", "timestamp": "2024-01-02T00:00:00Z", "revision_id": "1001"},
			}
			if len(res.docs) > 0 && !reflect.DeepEqual(res.docs[0], want) {
				t.Errorf("doc = %+v\nwant %+v", res.docs[0], want)
			}
			if len(res.docs) > 1 && (res.docs[1].Title != "Gamma & Delta" || res.docs[1].Text != "Heading\nText & more.") {
				t.Errorf("doc 2 = %+v", res.docs[1])
			}
		})
	}
}

func TestSourceAndNamespaces(t *testing.T) {
	dir := t.TempDir()
	noSite := "<mediawiki>" + strings.Join(fixturePages(), "") + footer
	tests := []struct {
		name    string
		opts    Options
		wantIDs []string
	}{
		{"from file name", Options{Path: wikitest.WriteFile(t, dir, "dewiki-x.xml", []byte(noSite))}, []string{"dewiki:1", "dewiki:4", "dewiki:6"}},
		{"fallback", Options{Path: wikitest.WriteFile(t, dir, "dump.xml", []byte(noSite))}, []string{"wiki:1", "wiki:4", "wiki:6"}},
		{"explicit", Options{Path: filepath.Join(dir, "dump.xml"), Source: "my"}, []string{"my:1", "my:4", "my:6"}},
		{"namespaces", Options{Path: filepath.Join(dir, "dump.xml"), Namespaces: []int{4}}, []string{"wiki:3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, _, err := readAll(t, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, d := range res.docs {
				ids = append(ids, d.ID)
			}
			if !reflect.DeepEqual(ids, tc.wantIDs) {
				t.Errorf("ids = %v, want %v", ids, tc.wantIDs)
			}
		})
	}
}

func TestOptionsValidation(t *testing.T) {
	dir := t.TempDir()
	p := wikitest.WriteFile(t, dir, "a.xml", []byte(siteinfo+footer))
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"no path", Options{}, "Path is required"},
		{"missing file", Options{Path: filepath.Join(dir, "nope.xml")}, "no such file"},
		{"negative workers", Options{Path: p, Workers: -1}, "Workers"},
		{"bad source", Options{Path: p, Source: "a:b"}, "Source"},
		{"index and sequential", Options{Path: p, Index: "x", Sequential: true}, "exclusive"},
		{"index for plain xml", Options{Path: p, Index: p}, "not bz2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Open(tc.opts)
			if err == nil {
				r.Close(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestBrokenInputs(t *testing.T) {
	dir := t.TempDir()
	pages := fixturePages()
	ms, _ := wikitest.WriteMultistream(t, dir, "badwiki", siteinfo, pages, 2)
	wrongIdx := wikitest.WriteFile(t, dir, "wrong-index.txt", []byte("7:1:x\n"))
	truncated := siteinfo + strings.Join(pages[:2], "") + "<page><title>cut"
	tests := []struct {
		name     string
		opts     Options
		wantErr  string
		wantDocs int
	}{
		{"truncated xml", Options{Path: wikitest.WriteFile(t, dir, "t.xml", []byte(truncated))}, "ends inside a <page>", 1},
	}
	if _, err := Open(Options{Path: ms, Index: wrongIdx}); err == nil || !strings.Contains(err.Error(), "does not start a bz2 stream") {
		t.Errorf("Open with a wrong index: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, _, err := readAll(t, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if len(res.docs) != tc.wantDocs {
				t.Errorf("docs = %d, want %d", len(res.docs), tc.wantDocs)
			}
		})
	}
}

// TestCloseMidway stops a parallel read early: Close must end every goroutine and later
// Reads must fail rather than hang.
func TestCloseMidway(t *testing.T) {
	dir := t.TempDir()
	var pages []string
	for i := 1; i <= 400; i++ {
		pages = append(pages, pageXML(i, 0, fmt.Sprintf("P%d", i), strings.Repeat("text ", 200), false))
	}
	ms, _ := wikitest.WriteMultistream(t, dir, "closewiki", siteinfo, pages, 10)
	r, err := Open(Options{Path: ms, Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if _, _, err = r.Read(context.Background()); err != nil {
			break
		}
	}
	if !errors.Is(err, errClosed) {
		t.Fatalf("Read after Close = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r2, err := Open(Options{Path: ms})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close(context.Background())
	if _, _, err := r2.Read(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read with done ctx = %v", err)
	}
}

// TestDeterministic checks that parallel reading gives exactly the sequential order, which
// resuming by skipping acked ordinals relies on.
func TestDeterministic(t *testing.T) {
	dir := t.TempDir()
	var pages []string
	for i := 1; i <= 300; i++ {
		pages = append(pages, pageXML(i, i%3/2*4, fmt.Sprintf("P%d", i), fmt.Sprintf("Page %d {{x}}", i), i%7 == 0))
	}
	ms, _ := wikitest.WriteMultistream(t, dir, "detwiki", siteinfo, pages, 7)
	seq, seqSt, err := readAll(t, Options{Path: ms, Sequential: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []int{1, 2, 8} {
		par, parSt, err := readAll(t, Options{Path: ms, Workers: w})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(seq.docs, par.docs) || !reflect.DeepEqual(seqSt, parSt) {
			t.Fatalf("workers=%d differs from sequential: %d vs %d docs, %+v vs %+v", w, len(par.docs), len(seq.docs), parSt, seqSt)
		}
	}
}
