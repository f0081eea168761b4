package textpolicy

import (
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/stages/wordpiece"
)

var blankCases = []struct {
	in    string
	blank bool
}{
	{"", true},
	{" \t\n\r\u00a0\u3000", true},
	{"\x00\x01\u0085", true},
	{"\u200b\u200d\ufeff\u2060", true},
	{"\ue000\uFFFD", true},
	{" \u200b x", false},
	{"\u0301", false}, // a lone accent is text for a cased tokenizer
	{"。", false},
	{"[", false},
}

func TestIsBlank(t *testing.T) {
	for _, tc := range blankCases {
		if got := IsBlank(tc.in); got != tc.blank {
			t.Errorf("IsBlank(%q) = %v, want %v", tc.in, got, tc.blank)
		}
	}
}

// A blank text is exactly one the GN's tokenizer turns into no token: the reference then
// embeds it as the single window [CLS][SEP].
func TestIsBlankMatchesTokenizer(t *testing.T) {
	for _, gn := range []string{"all-minilm-l6-v2", "bge-small-en-v15"} {
		tok, err := wordpiece.Load(testenv.Tokenizer(t, gn))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range blankCases {
			if tc.in == "\u0301" {
				continue // uncased tokenizers strip accents; IsBlank does not assume that
			}
			if n := len(tok.AppendEncode(nil, tc.in)); (n == 0) != tc.blank {
				t.Errorf("%s: %q tokenizes to %d tokens, IsBlank %v", gn, tc.in, n, tc.blank)
			}
		}
	}
}
