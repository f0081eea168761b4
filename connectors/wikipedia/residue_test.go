package wikipedia

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// residueNames returns the names a dump declares for its file, media and category namespaces,
// found with a regular expression rather than the reader's own parser so that a parser that
// misses a name cannot also hide the residue it leaves.
func residueNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var head [4]byte
	n, _ := io.ReadFull(f, head[:])
	comp := sniffCompression(head[:n])
	f.Seek(0, io.SeekStart)
	dec, closeDec, err := decompress(f, comp)
	if err != nil {
		t.Fatal(err)
	}
	defer closeDec()
	raw := make([]byte, 4)
	io.ReadFull(dec, raw)
	enc, _ := sniffEncoding(raw)
	text, err := decode(io.MultiReader(strings.NewReader(string(raw)), dec), enc, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	m, _ := io.ReadFull(text, buf)
	names := []string{"File", "Image", "Media", "Category"}
	re := regexp.MustCompile(`<namespace key="(-2|6|14)"[^>]*>([^<]+)</namespace>`)
	for _, sm := range re.FindAllStringSubmatch(string(buf[:m]), -1) {
		names = append(names, sm[2])
	}
	return names
}

// residueOf reports which kinds of namespace residue a converted article still holds: a
// "Name:" prefix of a file/media/category namespace at a word start, or a file link's
// options ("thumb|", "250px|") left as text.
func residueOf(text string, nsRe *regexp.Regexp) (ns, fileOpts bool) {
	return nsRe.MatchString(text), fileOptRe.MatchString(text)
}

var fileOptRe = regexp.MustCompile(`(?i)(^|[\s|])(thumb|thumbnail|frameless|upright|miniatur|vignette|\d+px)\s*\|`)

// TestRealNamespaceResidue measures, on every real dump, the share of articles whose text still
// holds file, media or category link residue, and logs the table kept in README.md.
func TestRealNamespaceResidue(t *testing.T) {
	files := []string{
		"enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
		"enwiki-table-markup.xml.bz2",
		"fatwiki-20240920-pages-articles-multistream.xml.bz2",
		"bgwiki-latest-pages-articles-shortened-utf16.xml.bz2",
	}
	var table strings.Builder
	table.WriteString("| dump | articles | namespace prefix left | file options left | share with residue |\n|---|---|---|---|---|\n")
	for _, file := range files {
		path := testenv.SharedData(t, "wikipedia/"+file)
		names := residueNames(t, path)
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = regexp.QuoteMeta(strings.TrimSpace(n))
		}
		nsRe := regexp.MustCompile(`(?i)(^|[^\pL\pN])(` + strings.Join(quoted, "|") + `)\s*:\S`)
		res, _, err := readAll(t, Options{Path: path})
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var nsLeft, optLeft, any int
		for _, d := range res.docs {
			ns, opts := residueOf(d.Text, nsRe)
			if ns {
				nsLeft++
				loc := nsRe.FindStringIndex(d.Text)
				t.Logf("%s %q: namespace residue ...%s...", file, d.Title, d.Text[max(0, loc[0]-40):min(len(d.Text), loc[1]+40)])
			}
			if opts {
				optLeft++
				loc := fileOptRe.FindStringIndex(d.Text)
				t.Logf("%s %q: file options ...%s...", file, d.Title, d.Text[max(0, loc[0]-40):min(len(d.Text), loc[1]+40)])
			}
			if ns || opts {
				any++
			}
		}
		share := 0.0
		if len(res.docs) > 0 {
			share = 100 * float64(any) / float64(len(res.docs))
		}
		fmt.Fprintf(&table, "| %s | %d | %d | %d | %.1f %% |\n", file, len(res.docs), nsLeft, optLeft, share)
		if any != 0 {
			t.Errorf("%s: %d of %d articles hold namespace residue", file, any, len(res.docs))
		}
	}
	t.Logf("namespace residue per dump:\n%s", table.String())
}
