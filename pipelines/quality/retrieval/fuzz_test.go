package retrieval

import (
	"strings"
	"testing"
)

func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"The cat", "COVID-19", "İstanbul ǅ", "\xff\xfe", "a an the"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		toks := Tokenize(text)
		for _, tok := range toks {
			if tok == "" || stopWords[tok] || strings.ContainsAny(tok, " \t\n") {
				t.Fatalf("bad token %q from %q", tok, text)
			}
		}
	})
}
