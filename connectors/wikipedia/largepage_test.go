package wikipedia

import (
	"bytes"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/schemas"
)

// A page over MaxPageBytes is a bad input that names the page, and the pages after it are read:
// one that fits the scanner's first read (refused after the fact), one longer than the buffer
// (skipped while reading, never held), and one that loses its end tag inside the skip.
func TestLargePageIsBadInput(t *testing.T) {
	huge := strings.Repeat("word ", 600_000) // 3 MB, past the 1 MiB read buffer
	for _, tc := range []struct {
		name, page string
		max        int
	}{
		{"fits the buffer", pageXML(2, 0, "Big", strings.Repeat("word ", 20_000), false), 50_000},
		{"past the buffer", pageXML(2, 0, "Big", huge, false), 1 << 20},
		{"past the buffer, end tag lost", strings.TrimSuffix(pageXML(2, 0, "Big", huge, false), "  </page>\n"), 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dump := siteinfo + pageXML(1, 0, "Alpha", "first", false) + tc.page + pageXML(3, 0, "Gamma", "last", false) + footer
			path := writeFile(t, t.TempDir(), "testwiki-pages.xml", []byte(dump))
			res, _, err := readAll(t, Options{Path: path, MaxPageBytes: tc.max})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.docs) != 2 || res.docs[0].ID != "testwiki:1" || res.docs[1].ID != "testwiki:3" {
				t.Fatalf("documents %v, want testwiki:1 and testwiki:3", ids(res.docs))
			}
			if len(res.bad) != 1 {
				t.Fatalf("bad inputs %v, want the large page", res.bad)
			}
			b := res.bad[0]
			if b.DocID != "testwiki:2" || !strings.Contains(b.Position, `"Big"`) || !strings.Contains(b.Error(), "over the bound") {
				t.Errorf("bad input %v", b)
			}
		})
	}
	// Without a bound the same page is read.
	dump := siteinfo + pageXML(2, 0, "Big", huge, false) + footer
	path := writeFile(t, t.TempDir(), "testwiki-pages.xml", []byte(dump))
	if res, _, err := readAll(t, Options{Path: path}); err != nil || len(res.docs) != 1 {
		t.Fatalf("unbounded: %d documents, %v", len(res.docs), err)
	}
}

func ids(docs []schemas.Document) []string {
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = d.ID
	}
	return out
}

// Skipping a page keeps the scanner's buffer at its size: a 12 MB page under a 1 MiB bound
// never grows it past twice the first read.
func TestSkipPageHoldsNoMore(t *testing.T) {
	in := "<page><title>Big</title><id>7</id>" + strings.Repeat("x", 12<<20) + "</page><page><title>Next</title></page>"
	sc := newScanner(strings.NewReader(in), 1<<20)
	kind, head, err := sc.next()
	if err != nil || kind != elemLargePage {
		t.Fatalf("first element: kind %d, %v", kind, err)
	}
	if title, id := pageHead(head); title != "Big" || id != "7" || sc.skippedBytes != int64(len(in)-len("<page><title>Next</title></page>")) {
		t.Errorf("head %q/%q, skipped %d", title, id, sc.skippedBytes)
	}
	if kind, elem, err := sc.next(); err != nil || kind != elemPage || string(elem) != "<page><title>Next</title></page>" {
		t.Errorf("second element: kind %d %q %v", kind, elem, err)
	}
	if len(sc.buf) > 2<<20 {
		t.Errorf("buffer grew to %d bytes", len(sc.buf))
	}
}

// Under a small page bound every page handed out is within it, and what is skipped is named
// from its head without panicking, whatever the input.
func FuzzScanBounded(f *testing.F) {
	f.Add([]byte(`<page><title>T</title><id>1</id>`+strings.Repeat("x", 200)+`</page><page><title>U</title></page>`), 64)
	f.Add([]byte(`<page><page></page>`), 8)
	f.Add([]byte(`<page>`+strings.Repeat("</pag", 50)), 16)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max < 0 {
			max = -max
		}
		sc := newScanner(bytes.NewReader(in), max%4096)
		for range len(in) + 1 {
			kind, elem, err := sc.next()
			if err != nil {
				return
			}
			switch kind {
			case elemPage:
				if len(elem) > sc.maxPage {
					t.Fatalf("page of %d bytes handed out under a bound of %d", len(elem), sc.maxPage)
				}
			case elemLargePage:
				_, _ = pageHead(elem)
				if sc.skippedBytes <= int64(sc.maxPage) || len(elem) > headBytes {
					t.Fatalf("skipped %d bytes under a bound of %d, head %d", sc.skippedBytes, sc.maxPage, len(elem))
				}
			}
		}
		t.Fatal("the scanner did not end")
	})
}
