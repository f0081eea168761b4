package gn

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"encoding/json"
	"html"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

var (
	wikiText  = regexp.MustCompile(`(?s)<text[^>]*>(.*?)</text>`)
	xmlTag    = regexp.MustCompile(`(?s)<[^>]*>`)
	manySpace = regexp.MustCompile(`\s+`)
)

// cut keeps at most n bytes of s, ending on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// wikiPages crudely pulls the raw wikitext of the first non-redirect pages of a bz2 dump.
func wikiPages(t *testing.T, rel string, limit int) []string {
	t.Helper()
	f, err := os.Open(testenv.SharedData(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(bzip2.NewReader(f), 3<<20))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range wikiText.FindAllSubmatch(raw, -1) {
		s := html.UnescapeString(string(m[1]))
		if len(s) < 500 || strings.HasPrefix(strings.ToUpper(s), "#REDIRECT") {
			continue
		}
		if out = append(out, s); len(out) == limit {
			break
		}
	}
	return out
}

// patentText strips the tags of one patent file, from its abstract on (the bibliographic
// header before it is mostly numbers).
func patentText(t *testing.T, rel string) string {
	t.Helper()
	raw, err := os.ReadFile(testenv.SharedData(t, filepath.Join("patents", "uspto", rel)))
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.Index(raw, []byte("<abstract")); i > 0 {
		raw = raw[i:]
	}
	s := html.UnescapeString(xmlTag.ReplaceAllString(string(raw), " "))
	return strings.TrimSpace(manySpace.ReplaceAllString(s, " "))
}

// parityTexts is ~10 real texts: empty, one-sentence and one-window texts, and texts of
// several full 512-token windows plus a short tail.
func parityTexts(t *testing.T) []string {
	en := wikiPages(t, "wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2", 5)
	fat := wikiPages(t, "wikipedia/fatwiki-20240920-pages-articles-multistream.xml.bz2", 1)
	if len(en) < 5 || len(fat) < 1 {
		t.Fatalf("found %d English and %d Fante pages, want 5 and 1", len(en), len(fat))
	}
	return []string{
		"",
		"The quick brown fox jumps over the lazy dog.",
		cut(en[0], 400),
		cut(en[1], 1800),
		cut(en[2], 3000),
		cut(en[3], 4500),
		cut(en[4], 5000),
		cut(fat[0], 2000),
		cut(patentText(t, "single/grant-v4-5-B1.xml"), 8000),
		cut(patentText(t, "single/application-v4-5-A2.xml"), 2500),
	}
}

type oracleDoc struct {
	Windows    [][]int32   `json:"windows"`
	Embeddings [][]float64 `json:"embeddings"`
}

func runOracle(t *testing.T, model, tok string, texts []string) []oracleDoc {
	t.Helper()
	py := testenv.Python(t, "onnxruntime", "tokenizers", "numpy")
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, s := range texts {
		if err := enc.Encode(map[string]string{"text": s}); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(py, filepath.Join(testenv.Root(), "ops", "oracles", "gn_reference.py"), model, tok, "512")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, stderr.String())
	}
	var docs []oracleDoc
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var d oracleDoc
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, d)
	}
	if len(docs) != len(texts) {
		t.Fatalf("oracle answered %d of %d texts", len(docs), len(texts))
	}
	return docs
}

// TestParityWithPythonReference embeds the oracle's own windows in shuffled, mixed-length
// batches, so that padding is exercised, and compares every vector with the oracle's
// batch-1, unpadded one.
func TestParityWithPythonReference(t *testing.T) {
	texts := parityTexts(t)
	for _, name := range gns {
		t.Run(name, func(t *testing.T) {
			m := loadGN(t, name)
			model, tok := testenv.GN(t, name)
			docs := runOracle(t, model, tok, texts)
			type ref struct {
				w    []int32
				want []float64
			}
			var refs []ref
			full, short := 0, 0
			for _, d := range docs {
				for i, w := range d.Windows {
					refs = append(refs, ref{w, d.Embeddings[i]})
					if len(w) == 512 {
						full++
					} else {
						short++
					}
				}
			}
			if full < 3 || short < 3 || len(docs[0].Windows) != 1 || len(docs[0].Windows[0]) != 2 {
				t.Fatalf("texts give %d full and %d short windows; empty text gave %v", full, short, docs[0].Windows)
			}
			rng := rand.New(rand.NewPCG(11, 12))
			rng.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
			minCos, sizes := math.Inf(1), []int{3, 1, 5, 2, 4}
			for start, k := 0, 0; start < len(refs); k++ {
				end := min(start+sizes[k%len(sizes)], len(refs))
				ws := make([][]int32, 0, end-start)
				for _, r := range refs[start:end] {
					ws = append(ws, r.w)
				}
				got := embedOne(t, m, ws...)
				for i, r := range refs[start:end] {
					c := cosine(got[i], r.want)
					minCos = min(minCos, c)
					if c < 0.99999 {
						t.Errorf("window of %d tokens (batch of %d): cosine %.7f < 0.99999", len(r.w), len(ws), c)
					}
				}
				start = end
			}
			st := m.Stats()
			t.Logf("%s: %d windows (%d full, %d short) in %d passes, padding ratio %.2f: min cosine %.9f (1-min %.1e)",
				name, len(refs), full, short, st.ForwardPasses, float64(st.PaddedTokens)/float64(st.RealTokens), minCos, 1-minCos)
		})
	}
}
