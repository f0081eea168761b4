package wikitext

import (
	"strings"
	"unicode"
)

// Namespace numbers that MediaWiki fixes in every language.
const (
	NSMedia    = -2
	NSSpecial  = -1
	NSMain     = 0
	NSFile     = 6
	NSCategory = 14
)

// Namespaces maps the prefixes a wiki accepts in a link target ("Kategorie", "Image", "Fael")
// to namespace numbers. A wiki names its namespaces in its own language (declared in the dump's
// <siteinfo><namespaces>), and every wiki also accepts the canonical English names and their
// old aliases, so a table is built from both: links written in either form must render alike.
type Namespaces struct {
	byName map[string]int
}

// canonical are the names every MediaWiki installation accepts whatever its language.
var canonical = map[string]int{
	"media": NSMedia, "special": NSSpecial,
	"talk": 1, "user": 2, "user talk": 3, "project": 4, "project talk": 5,
	"file": NSFile, "image": NSFile, "file talk": 7, "image talk": 7,
	"mediawiki": 8, "mediawiki talk": 9, "template": 10, "template talk": 11,
	"help": 12, "help talk": 13, "category": NSCategory, "category talk": 15,
}

// localised are names of the file and category namespaces in widely used languages. A dump
// without <siteinfo> (an excerpt, a hand-made file) still declares nothing, and wikis copy
// text between languages, so these are accepted everywhere; a dump's own declarations win.
var localised = map[string]int{
	"fael": NSFile, "nkyekyɛmu": NSCategory, "fáil": NSFile, "datei": NSFile, "bild": NSFile,
	"kategorie": NSCategory, "fichier": NSFile, "catégorie": NSCategory, "archivo": NSFile,
	"imagen": NSFile, "categoría": NSCategory, "файл": NSFile, "изображение": NSFile,
	"категория": NSCategory, "plik": NSFile, "kategoria": NSCategory, "immagine": NSFile,
	"categoria": NSCategory, "ficheiro": NSFile, "arquivo": NSFile, "bestand": NSFile,
	"categorie": NSCategory, "afbeelding": NSFile, "kategori": NSCategory, "berkas": NSFile,
}

// DefaultNamespaces is the table for text whose wiki declares nothing: canonical and common
// localised names.
func DefaultNamespaces() *Namespaces {
	n := &Namespaces{byName: make(map[string]int, len(canonical)+len(localised))}
	for k, v := range canonical {
		n.byName[k] = v
	}
	for k, v := range localised {
		n.byName[NormalizeNamespace(k)] = v
	}
	return n
}

var defaultNamespaces = DefaultNamespaces()

// Add declares name (a namespace's local name or an alias) for namespace key. Names that
// normalise to nothing are ignored: the main namespace has no prefix.
func (n *Namespaces) Add(key int, name string) {
	if k := NormalizeNamespace(name); k != "" {
		n.byName[k] = key
	}
}

// Lookup returns the namespace a link prefix names.
func (n *Namespaces) Lookup(prefix string) (int, bool) {
	if n == nil {
		n = defaultNamespaces
	}
	k, ok := n.byName[NormalizeNamespace(prefix)]
	return k, ok
}

// Len is the number of names known.
func (n *Namespaces) Len() int { return len(n.byName) }

// NormalizeNamespace folds a prefix the way MediaWiki compares namespace names: case-blind,
// underscores as spaces, runs of spaces as one, no surrounding space. Greek epsilon and Latin
// open e are folded together too: Akan-language wikis declare "Nkyekyεmu" with the Greek letter
// in siteinfo while editors type the Latin ɛ, and both must name the category namespace.
func NormalizeNamespace(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		switch {
		case r == '_' || unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		case r == 'ε' || r == 'Ε' || r == 'Ɛ':
			r = 'ɛ'
		default:
			r = unicode.ToLower(r)
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// dropsWhole reports whether links into namespace key render as something other than text:
// an embedded file, a media player, or the page's category list.
func dropsWhole(key int) bool {
	return key == NSFile || key == NSCategory || key == NSMedia
}
