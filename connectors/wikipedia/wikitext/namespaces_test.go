package wikitext

import "testing"

func TestNamespacesDeclared(t *testing.T) {
	// Names a small-language wiki declares in its siteinfo; none is on the built-in list.
	ns := DefaultNamespaces()
	ns.Add(NSCategory, "Kategoreja")
	ns.Add(NSFile, "Dataja")
	ns.Add(10, "Pśedłoga")
	tests := []struct{ in, want string }{
		{"Tekst.\n[[Kategoreja:Města]]", "Tekst."},
		{"[[kategoreja:Města|sort]]Tekst.", "Tekst."},
		{"[[Dataja:x.jpg|thumb|250px|Popis]]\nTekst.", "Tekst."},
		{"[[Datei:x.jpg|mini|Bild]]Tekst.", "Tekst."},            // a localised name of another language
		{"[[Category:X]][[File:y.png|thumb|z]]Tekst.", "Tekst."}, // canonical names
		{"[[Pśedłoga:Foo|Foo]] tekst.", "Foo tekst."},            // declared, but renders as a link
		{"[[Kategoreja]] tekst.", "Kategoreja tekst."},           // no prefix: an article
		{"see [[:Kategoreja:Města]]", "see Kategoreja:Města"},    // a colon link shows its target
	}
	for _, tc := range tests {
		if got := ns.Plain(tc.in); got != tc.want {
			t.Errorf("Plain(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// The default table knows nothing of the declared names.
	if got := Plain("Tekst.\n[[Kategoreja:Města]]"); got == "Tekst." {
		t.Errorf("default table dropped an undeclared namespace: %q", got)
	}
}

func TestNormalizeNamespace(t *testing.T) {
	for in, want := range map[string]string{
		"Category":     "category",
		"  User_talk ": "user talk",
		"User   talk":  "user talk",
		"Nkyekyεmu":    "nkyekyɛmu",
		"NKYEKYƐMU":    "nkyekyɛmu",
		"Категория":    "категория",
		"_":            "",
		"":             "",
	} {
		if got := NormalizeNamespace(in); got != want {
			t.Errorf("NormalizeNamespace(%q) = %q, want %q", in, got, want)
		}
	}
}
