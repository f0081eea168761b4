package exportxml

import (
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
	ns, declared, err := ParseNamespaces([]byte(siteinfoNS))
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

func FuzzParseNamespaces(f *testing.F) {
	f.Add([]byte(siteinfoNS))
	f.Add([]byte(`<namespaces><namespace key="14">Nkyekyεmu</namespace></namespaces>`))
	f.Add([]byte(`<namespace key="6"`))
	f.Add([]byte(`<namespace key="6">a<b</namespace><namespace key="-2">&amp;</namespace>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ns, declared, _ := ParseNamespaces(b)
		if ns == nil || declared < 0 || ns.Len() < declared {
			t.Fatalf("table %v, declared %d", ns, declared)
		}
		// Canonical names survive whatever a dump declares for other keys.
		if _, ok := ns.Lookup("Category"); !ok {
			t.Fatal("canonical name lost")
		}
	})
}

func TestDBName(t *testing.T) {
	for in, want := range map[string]string{
		"<siteinfo><dbname> dsbwiki </dbname></siteinfo>": "dsbwiki",
		"<siteinfo><dbname>a&amp;b</dbname></siteinfo>":   "a&b",
		"<siteinfo><dbname>open":                          "",
		"<siteinfo></siteinfo>":                           "",
	} {
		if got := DBName([]byte(in)); got != want {
			t.Errorf("DBName(%q) = %q, want %q", in, got, want)
		}
	}
}
