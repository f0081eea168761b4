package wikipedia

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitext"
)

const siteinfoNS = `<siteinfo>
    <dbname>dsbwiki</dbname>
    <namespaces>
      <namespace key="-2" case="first-letter">Medija</namespace>
      <namespace key="0" case="first-letter" />
      <namespace key="6" case="first-letter">Dataja</namespace>
      <namespace key="14" case="first-letter">Kategor&#x69;ja</namespace>
      <namespace key='15' case="first-letter">Diskusija wó kategoriji</namespace>
      <namespacealias id="6">Wobraz</namespacealias>
      <namespace key="x">Bad</namespace>
    </namespaces>
  </siteinfo>`

func TestParseNamespaces(t *testing.T) {
	ns, declared, err := parseNamespaces([]byte(siteinfoNS))
	if err == nil || !strings.Contains(err.Error(), `key="x"`) {
		t.Errorf("err = %v, want the malformed key named", err)
	}
	if declared != 5 {
		t.Errorf("declared = %d, want 5", declared)
	}
	for name, want := range map[string]int{
		"Medija": wikitext.NSMedia, "dataja": wikitext.NSFile, "Kategorija": wikitext.NSCategory,
		"Diskusija_wó_kategoriji": 15, "Wobraz": wikitext.NSFile, "Category": wikitext.NSCategory,
		"Image": wikitext.NSFile,
	} {
		if k, ok := ns.Lookup(name); !ok || k != want {
			t.Errorf("Lookup(%q) = %d, %v; want %d", name, k, ok, want)
		}
	}
	if _, ok := ns.Lookup("Bad"); ok {
		t.Error("a declaration with a bad key was kept")
	}
}

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
		got, _ := readSiteinfo(strings.NewReader(tc.in))
		if (got != nil) != tc.want {
			t.Errorf("%s: readSiteinfo = %q", tc.name, got)
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
	ms.Write(bz2(t, head))
	off := ms.Len()
	ms.Write(bz2(t, pages))
	ms.Write(bz2(t, footer))
	writeFile(t, dir, "ms-multistream-index.txt", []byte(fmt.Sprintf("%d:1:A\n%d:2:B\n", off, off)))
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"plain.xml", []byte(head + pages + footer)},
		{"plain.xml.bz2", bz2(t, head+pages+footer)},
		{"ms-multistream.xml.bz2", ms.Bytes()},
	} {
		res, st, err := readAll(t, Options{Path: writeFile(t, dir, tc.name, tc.data), Workers: 2})
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

func FuzzParseNamespaces(f *testing.F) {
	f.Add([]byte(siteinfoNS))
	f.Add([]byte(`<namespaces><namespace key="14">Nkyekyεmu</namespace></namespaces>`))
	f.Add([]byte(`<namespace key="6"`))
	f.Add([]byte(`<namespace key="6">a<b</namespace><namespace key="-2">&amp;</namespace>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ns, declared, _ := parseNamespaces(b)
		if ns == nil || declared < 0 || ns.Len() < declared {
			t.Fatalf("table %v, declared %d", ns, declared)
		}
		// Canonical names survive whatever a dump declares for other keys.
		if _, ok := ns.Lookup("Category"); !ok {
			t.Fatal("canonical name lost")
		}
	})
}
