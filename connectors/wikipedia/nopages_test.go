package wikipedia

import (
	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitest"
	"math/rand/v2"
	"strings"
	"testing"
)

// Inputs that hold no page at all are errors that say what the file is, not a run that
// completes with nothing.
func TestNoPagesIsAnError(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 100<<10)
	for i := range random {
		random[i] = byte(rng.UintN(256))
	}
	random[0] = 'x' // not the bz2 magic by chance
	patent := `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE us-patent-grant SYSTEM "us-patent-grant-v42-2006-08-23.dtd" [ ]>
<us-patent-grant lang="EN"><us-bibliographic-data-grant><invention-title>Widget</invention-title></us-bibliographic-data-grant></us-patent-grant>
`
	tests := []struct {
		name, file string
		data       []byte
		want       string
	}{
		{"empty file", "e.xml.bz2", nil, "is empty"},
		{"random bytes named bz2", "r.xml.bz2", random, `does not start with the bz2 magic "BZh"`},
		{"patent xml", "ipg.xml", []byte(patent), "root element is <us-patent-grant>"},
		{"patent xml in bz2", "ipg.xml.bz2", wikitest.BZ2(t, patent), "root element is <us-patent-grant>"},
		{"wiki without pages", "w.xml", []byte(siteinfo + footer), "holds no <page> element"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, _, err := readAll(t, Options{Path: wikitest.WriteFile(t, dir, tc.file, tc.data)})
			if err == nil || !strings.Contains(err.Error(), tc.want) || len(res.docs) != 0 {
				t.Fatalf("err = %v, docs %d; want %q", err, len(res.docs), tc.want)
			}
		})
	}
	// A dump whose pages are all skipped is not this source's error: the runner judges a run
	// that wrote nothing.
	only := siteinfo + pageXML(1, 0, "R", "#REDIRECT [[X]]", true) + footer
	if _, st, err := readAll(t, Options{Path: wikitest.WriteFile(t, dir, "redirects.xml", []byte(only))}); err != nil || st.Skipped["redirect"] != 1 {
		t.Fatalf("only redirects: %v %+v", err, st)
	}
}
