package wordpiece

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// normalizerVariants rewrites the normaliser flags of a real tokenizer.json so that every branch
// (lowercase without accent stripping, no normalisation at all) is checked against Hugging Face,
// not only the uncased setting the GNs use.
func normalizerVariants(t *testing.T, base string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	variants := map[string]string{"as-shipped": base}
	for name, flags := range map[string]map[string]any{
		"lowercase-keep-accents": {"clean_text": true, "handle_chinese_chars": true, "strip_accents": false, "lowercase": true},
		"strip-only":             {"clean_text": false, "handle_chinese_chars": false, "strip_accents": true, "lowercase": false},
		"all-off":                {"clean_text": false, "handle_chinese_chars": false, "strip_accents": false, "lowercase": false},
	} {
		var f map[string]any
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatal(err)
		}
		n := f["normalizer"].(map[string]any)
		for k, v := range flags {
			n[k] = v
		}
		out, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), name+".json")
		if err := os.WriteFile(p, out, 0o644); err != nil {
			t.Fatal(err)
		}
		variants[name] = p
	}
	return variants
}

// TestCodepointParity checks the normaliser and pre-tokenizer on every Unicode scalar value
// (each between two letters, so that combining marks have a base) against Hugging Face. This
// is what pins the Unicode-version quirks in unicode.go.
func TestCodepointParity(t *testing.T) {
	if testing.Short() {
		t.Skip("exhaustive code point check skipped in -short mode")
	}
	base := testenv.Tokenizer(t, gnTokenizers[0])
	// Code points go 256 to a text, each as "a<c>b" between spaces, so the oracle makes one
	// call per block rather than per code point; a unit cannot affect its neighbours.
	var texts []string
	var first []rune
	var b strings.Builder
	n := 0
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		if n == 0 {
			first = append(first, r)
		}
		b.WriteString(" a")
		b.WriteRune(r)
		b.WriteString("b")
		if n++; n == 256 || r == utf8.MaxRune {
			texts = append(texts, b.String())
			b.Reset()
			n = 0
		}
	}
	for name, path := range normalizerVariants(t, base) {
		t.Run(name, func(t *testing.T) {
			tok, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			want := oracleWords(t, path, texts)
			bad := 0
			for i, text := range texts {
				got := tok.preTokens(text)
				if slices.Equal(got, want[i]) {
					continue
				}
				j := 0
				for j < len(got) && j < len(want[i]) && got[j] == want[i][j] {
					j++
				}
				if bad++; bad <= 20 {
					t.Errorf("block from U+%04X: first difference at pre-token %d: go %q, hf %q",
						first[i], j, got[j:min(j+3, len(got))], want[i][j:min(j+3, len(want[i]))])
				}
			}
			t.Logf("%d code points in %d blocks, %d blocks differ", utf8.MaxRune+1-2048, len(texts), bad)
		})
	}
}

// TestRandomParity compares ids on random strings built from the characters that exercise the
// tricky paths together: combining sequences that NFD reorders, added tokens glued to words,
// CJK next to Latin, controls inside words, words near the 100-character limit.
func TestRandomParity(t *testing.T) {
	atoms := []string{
		"a", "e", "Z", "q", "the", "ing", "##", "un", "able", " ", "  ", "\t", "\n", "\r\n", "\u00a0",
		"\u0301", "\u0316", "\u0327", "\u0345", "\u05b0", "\u1734", "\u1885", "\u0f39", "\U0001D165",
		"é", "Å", "İ", "ı", "ß", "Σ", "ς", "ǅ", "Ⅻ", "ﬁ", "Ａ", "ａ", "中", "国", "日本", "한국", "カタ",
		"\uf900", "\U0002F800", ".", ",", "-", "'", "\"", "(", "¿", "‖", "\u166d", "$", "€", "^", "`", "~",
		"\x00", "\x01", "\x7f", "\u0085", "\u200b", "\u200d", "\ufeff", "\ufffd", "\ue000", "\u0890",
		"😀", "👩\u200d💻", "٣", "١٢", "अ", "\u093f", "ไทย", "\u0e31", "[CLS]", "[SEP]", "[MASK]", "[UNK]",
		"[PAD]", "[cls]", "[SEP", "CLS]", "\xff", "\xe2\x82", strings.Repeat("x", 99), strings.Repeat("é", 50),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	texts := make([]string, 20000)
	for i := range texts {
		var b strings.Builder
		for n := rng.IntN(12); n >= 0; n-- {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		texts[i] = b.String()
	}
	for _, gn := range gnTokenizers {
		t.Run(gn, func(t *testing.T) {
			compareIDs(t, testenv.Tokenizer(t, gn), "random", texts)
		})
	}
}
