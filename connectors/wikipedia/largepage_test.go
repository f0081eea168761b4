package wikipedia

import (
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitest"
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
			path := wikitest.WriteFile(t, t.TempDir(), "testwiki-pages.xml", []byte(dump))
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
	path := wikitest.WriteFile(t, t.TempDir(), "testwiki-pages.xml", []byte(dump))
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
