package wordpiece

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"html"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// fixtureVocab is a tiny vocabulary whose expected encodings follow from the WordPiece rules
// by hand.
var fixtureVocab = map[string]int{
	"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4,
	"un": 5, "##aff": 6, "##able": 7, "a": 8, "##a": 9, ".": 10, "cafe": 11, "i": 12, "##̇": 13,
	"中": 14, "x": 15, "##x": 16, "##": 17, "#": 18,
}

func fixtureJSON(t testing.TB, normalizer map[string]any, mutate func(map[string]any)) []byte {
	t.Helper()
	if normalizer == nil {
		normalizer = map[string]any{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": nil, "lowercase": true}
	}
	added := []map[string]any{}
	for _, name := range []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"} {
		added = append(added, map[string]any{"id": fixtureVocab[name], "content": name, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true})
	}
	f := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added,
		"normalizer":     normalizer,
		"pre_tokenizer":  map[string]any{"type": "BertPreTokenizer"},
		"post_processor": nil, "decoder": nil,
		"model": map[string]any{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
			"max_input_chars_per_word": 100, "vocab": fixtureVocab},
	}
	if mutate != nil {
		mutate(f)
	}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func fixture(t testing.TB, normalizer map[string]any) *Tokenizer {
	t.Helper()
	tok, err := Parse(fixtureJSON(t, normalizer, nil))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestEncodeFixture(t *testing.T) {
	keepAccents := map[string]any{"type": "BertNormalizer", "strip_accents": false, "lowercase": true}
	for _, tc := range []struct {
		name string
		norm map[string]any
		text string
		want []int32
	}{
		{"empty", nil, "", []int32{}},
		{"only whitespace", nil, " \t\n\u00a0\u3000", []int32{}},
		{"greedy longest match", nil, "unaffable", []int32{5, 6, 7}},
		{"lowercased first", nil, "UNAFFABLE", []int32{5, 6, 7}},
		{"one failing piece makes the whole word unknown", nil, "unaffablez", []int32{1}},
		{"punctuation is its own word", nil, "a.un", []int32{8, 10, 5}},
		{"accent stripped", nil, "Café.", []int32{11, 10}},
		{"combining accent stripped", nil, "Cafe\u0301", []int32{11}},
		{"control characters removed inside a word", nil, "ca\x00f\u200be", []int32{11}},
		{"tab and newline separate words", nil, "a\ta\na", []int32{8, 8, 8}},
		{"chinese characters are split out", nil, "a中a", []int32{8, 14, 8}},
		{"added tokens are matched before normalisation", nil, "[CLS]un[SEP]", []int32{2, 5, 3}},
		{"lowercase spelling is not an added token", nil, "[cls]", []int32{1, 1, 1}},
		{"100 characters fit", nil, strings.Repeat("a", 100), append([]int32{8}, slices.Repeat([]int32{9}, 99)...)},
		{"101 characters are unknown", nil, strings.Repeat("a", 101), []int32{1}},
		{"continuation prefix alone", nil, "##", []int32{18, 18}},
		{"dotted capital I strips to i", nil, "İ", []int32{12}},
		{"dotted capital I keeps its dot without stripping", keepAccents, "İ", []int32{12, 13}},
		{"invalid UTF-8 is dropped as U+FFFD", nil, "a\xffa", []int32{8, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fixture(t, tc.norm).Encode(tc.text)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}
}

func TestAccessors(t *testing.T) {
	data := fixtureJSON(t, nil, nil)
	tok, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"CLS", tok.CLS(), int32(2)},
		{"SEP", tok.SEP(), int32(3)},
		{"PAD", tok.PAD(), int32(0)},
		{"UNK", tok.UNK(), int32(1)},
		{"VocabSize", tok.VocabSize(), len(fixtureVocab)},
		{"FileHash", tok.FileHash(), hex.EncodeToString(sum[:])},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	set := func(path string, v any) func(map[string]any) {
		return func(f map[string]any) {
			keys := strings.Split(path, ".")
			m := f
			for _, k := range keys[:len(keys)-1] {
				m = m[k].(map[string]any)
			}
			m[keys[len(keys)-1]] = v
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(map[string]any)
		want   string
	}{
		{"normalizer null", set("normalizer", nil), "normalizer is null"},
		{"other normalizer", set("normalizer", map[string]any{"type": "NFKC"}), `"NFKC" is not supported`},
		{"pre-tokenizer null", set("pre_tokenizer", nil), "pre_tokenizer is null"},
		{"other pre-tokenizer", set("pre_tokenizer", map[string]any{"type": "Whitespace"}), `"Whitespace" is not supported`},
		{"other model", set("model.type", "BPE"), `"BPE" is not supported`},
		{"unk not in vocab", set("model.unk_token", "<unk>"), `"<unk>" is not in the vocab`},
		{"negative id", set("model.vocab", map[string]any{"[UNK]": -1}), "out of range"},
		{"empty vocab", set("model.vocab", map[string]any{}), "vocab is empty"},
		{"negative max chars", set("model.max_input_chars_per_word", -1), "out of range"},
		{"lstrip added token", func(f map[string]any) {
			f["added_tokens"].([]map[string]any)[4]["lstrip"] = true
		}, "not supported"},
		{"no CLS", func(f map[string]any) {
			f["added_tokens"] = f["added_tokens"].([]map[string]any)[:2]
			delete(fixtureCopy(f), "[CLS]")
		}, "no [CLS]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(fixtureJSON(t, nil, tc.mutate))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := Parse([]byte("{")); err == nil {
		t.Error("Parse accepted truncated JSON")
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("Load accepted a missing file")
	}
}

// fixtureCopy gives the test case its own vocab map so deleting from it leaves the shared
// fixture intact.
func fixtureCopy(f map[string]any) map[string]int {
	m := f["model"].(map[string]any)
	v := map[string]int{}
	for k, id := range fixtureVocab {
		v[k] = id
	}
	m["vocab"] = v
	return v
}

func TestAppendEncodeKeepsPrefix(t *testing.T) {
	tok := fixture(t, nil)
	prefix := []int32{99, 98}
	got := tok.AppendEncode(slices.Clone(prefix), "unaffable a")
	if want := append(slices.Clone(prefix), tok.Encode("unaffable a")...); !slices.Equal(got, want) {
		t.Errorf("AppendEncode = %v, want %v", got, want)
	}
}

func TestEncodeDoesNotAllocate(t *testing.T) {
	tok := realOrFixture(t)
	text := benchText()[:20000]
	dst := tok.AppendEncode(nil, text)
	if n := testing.AllocsPerRun(20, func() { dst = tok.AppendEncode(dst[:0], text) }); n > 0 {
		t.Errorf("AppendEncode allocates %.1f times per call with a warm buffer", n)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := realOrFixture(t)
	texts := strings.SplitAfter(benchText(), "\n")
	if len(texts) < 400 {
		t.Fatalf("bench text has %d lines, want at least 400", len(texts))
	}
	texts = texts[:400]
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i, s := range texts {
				if got := tok.Encode(s); !slices.Equal(got, want[i]) {
					t.Errorf("concurrent Encode of text %d differs", i)
					return
				}
			}
		})
	}
	wg.Wait()
}

// realOrFixture returns the bge tokenizer when it has been fetched, else the fixture, so that
// fuzzing and benchmarks run everywhere.
func realOrFixture(t testing.TB) *Tokenizer {
	t.Helper()
	p := filepath.Join(testenv.Home(), "gn", gnTokenizers[0], "tokenizer.json")
	if _, err := os.Stat(p); err != nil {
		return fixture(t, nil)
	}
	tok, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

var (
	benchOnce sync.Once
	benchData string
)

// benchText is real Wikipedia article text when the shared data is present, else generated
// prose; either way it has one article (paragraph) per line, which the tests below rely on.
func benchText() string {
	benchOnce.Do(func() {
		p := filepath.Join(testenv.SharedDataDir(), "wikipedia",
			"enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
		if data, err := readBzip2(p); err == nil {
			var b strings.Builder
			for _, m := range textRe.FindAllSubmatch(data, -1) {
				b.WriteString(html.UnescapeString(string(m[1])))
				b.WriteByte('\n')
			}
			benchData = b.String()
			return
		}
		benchData = generatedText(4 << 20)
	})
	return benchData
}

// generatedText is n bytes of prose that exercises accents, CJK, punctuation and subwords, in
// lines of 20 to 200 words so that it splits into many documents as the real text does.
func generatedText(n int) string {
	words := []string{"The", "tokenizer", "splits", "unaffable", "café", "words,", "into", "pieces.", "中文", "(1998)"}
	var b strings.Builder
	for i, line := 0, 0; b.Len() < n; i++ {
		b.WriteString(words[(i*7+i/3)%len(words)])
		if i-line >= 20+(line*13)%180 {
			b.WriteByte('\n')
			line = i + 1
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

func BenchmarkEncode(b *testing.B) {
	tok := realOrFixture(b)
	text := benchText()
	docs := strings.SplitAfter(text, "\n")
	var dst []int32
	tokens := 0
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		for _, d := range docs {
			dst = tok.AppendEncode(dst[:0], d)
			tokens += len(dst)
		}
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
}

func FuzzEncode(f *testing.F) {
	for _, s := range edgeCases {
		f.Add(s)
	}
	tok := realOrFixture(f)
	f.Fuzz(func(t *testing.T, text string) {
		got := tok.Encode(text)
		for i, id := range got {
			if id < 0 || int(id) >= tok.VocabSize() {
				t.Fatalf("id %d at %d out of range [0,%d)", id, i, tok.VocabSize())
			}
		}
		if again := tok.Encode(text); !slices.Equal(got, again) {
			t.Fatalf("Encode not deterministic: %v then %v", got, again)
		}
		prefix := []int32{7}
		if app := tok.AppendEncode(prefix, text); !slices.Equal(app[1:], got) || app[0] != 7 {
			t.Fatalf("AppendEncode %v != Encode %v", app, got)
		}
	})
}

func FuzzParse(f *testing.F) {
	valid := fixtureJSON(f, nil, nil)
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add([]byte(`{"normalizer":{"type":"BertNormalizer"},"pre_tokenizer":{"type":"BertPreTokenizer"},"model":{"type":"WordPiece","vocab":{"[UNK]":0,"[CLS]":1,"[SEP]":2,"[PAD]":3}}}`))
	f.Add([]byte(`{"added_tokens":[{"id":5,"content":"x"}],"model":null}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data)
		if err != nil {
			return
		}
		for _, id := range tok.Encode("Hello, World! [CLS] café 中文 unaffable") {
			if id < 0 || int(id) >= tok.VocabSize() {
				t.Fatalf("id %d out of range [0,%d)", id, tok.VocabSize())
			}
		}
	})
}
