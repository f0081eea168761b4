package wikipedia

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/wikipedia/exportxml"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitest"
)

func TestReadSiteinfo(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     bool
	}{
		{"present", siteinfo + pageXML(1, 0, "A", "a", false), true},
		{"page first", "<mediawiki>" + pageXML(1, 0, "A", "a", false) + "<siteinfo></siteinfo>", false},
		{"none", "<mediawiki></mediawiki>", false},
		{"unclosed", "<mediawiki><siteinfo><dbname>x", false},
	} {
		got, _ := exportxml.ReadSiteinfo(strings.NewReader(tc.in))
		if (got != nil) != tc.want {
			t.Errorf("%s: ReadSiteinfo = %q", tc.name, got)
		}
	}
}

// The reader converts pages with the names their dump declares.
func TestDumpNamespacesUsed(t *testing.T) {
	dir := t.TempDir()
	head := strings.Replace(siteinfo, "</siteinfo>", `<namespaces>
      <namespace key="6" case="first-letter">Dataja</namespace>
      <namespace key="14" case="first-letter">Kategoreja</namespace>
    </namespaces>
  </siteinfo>`, 1)
	pages := pageXML(1, 0, "A", "Tekst.\n[[Dataja:x.jpg|thumb|250px|Popis]]\n[[Kategoreja:Města]]", false) +
		pageXML(2, 0, "B", "[[Kategoreja:Města]]\n[[Dataja:y.png|thumb|z]]", false)
	// A multistream dump converts pages on parallel workers from the first stream on.
	var ms bytes.Buffer
	ms.Write(wikitest.BZ2(t, head))
	off := ms.Len()
	ms.Write(wikitest.BZ2(t, pages))
	ms.Write(wikitest.BZ2(t, footer))
	wikitest.WriteFile(t, dir, "ms-multistream-index.txt", []byte(fmt.Sprintf("%d:1:A\n%d:2:B\n", off, off)))
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"plain.xml", []byte(head + pages + footer)},
		{"plain.xml.bz2", wikitest.BZ2(t, head+pages+footer)},
		{"ms-multistream.xml.bz2", ms.Bytes()},
	} {
		res, st, err := readAll(t, Options{Path: wikitest.WriteFile(t, dir, tc.name, tc.data), Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.docs) != 1 || res.docs[0].Text != "Tekst." {
			t.Fatalf("%s: docs %+v", tc.name, res.docs)
		}
		if st.Skipped["markup_only"] != 1 {
			t.Errorf("%s: skipped %v, want the residue-only page as markup_only", tc.name, st.Skipped)
		}
	}
}
