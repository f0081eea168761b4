package wikipedia

import (
	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitest"
	"reflect"
	"testing"
)

// The text policy on Wikipedia pages: title and text alike lose control bytes and have each
// invalid UTF-8 run replaced by one U+FFFD, and the run summary counts both.
func TestTextPolicy(t *testing.T) {
	dir := t.TempDir()
	data := siteinfo +
		pageXML(1, 0, "Nul\x00Title", "Text with a \x00 NUL and \xff\xfe bad bytes and &#1; a control.", false) +
		pageXML(2, 0, "Clean", "Nothing to repair.", false) + footer
	for _, name := range []string{"p.xml", "p.xml.bz2"} {
		b := []byte(data)
		if name == "p.xml.bz2" {
			b = wikitest.BZ2(t, data)
		}
		res, st, err := readAll(t, Options{Path: wikitest.WriteFile(t, dir, name, b)})
		if err != nil || len(res.docs) != 2 {
			t.Fatalf("%s: %v, %d docs", name, err, len(res.docs))
		}
		if d := res.docs[0]; d.Title != "NulTitle" || d.Text != "Text with a NUL and \uFFFD bad bytes and a control." {
			t.Errorf("%s: title %q text %q", name, d.Title, d.Text)
		}
		want := map[string]int64{"repaired_utf8": 1, "stripped_control": 3}
		if !reflect.DeepEqual(st.Text, want) {
			t.Errorf("%s: text counts %v, want %v", name, st.Text, want)
		}
	}
}
