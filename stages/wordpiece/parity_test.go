package wordpiece

import (
	"bytes"
	"compress/bzip2"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

type doc struct {
	source string
	text   string
}

// edgeCases are hand-written inputs for the corners of the Bert pipeline; the expected ids
// always come from the live oracle, never from this file.
var edgeCases = []string{
	"",
	" ",
	" \t\n\r\u00a0\u3000 ",
	"café Ångström Dvořák naïve façade",
	"CAFÉ ÅNGSTRÖM DVOŘÁK",
	"İstanbul ıslak İİİ ı",
	"Straße STRASSE ß ẞ",
	"ΟΔΥΣΣΕΥΣ Σίσυφος ς σ",
	"中文English混合text日本語カタカナ한국어",
	"emoji 😀👍🏽 🇺🇸 👩\u200d💻",
	"zero\u200dwidth\u200cjoiner\u200bspace\ufeffbom",
	"ctrl\x00nul\x01soh\x07bel\x1besc\x7fdel\u0085nel\u009fapc",
	"non\u00a0breaking\u2009thin\u202fnarrow",
	"\u0301\u0302\u0303 alone \u0301",
	"e\u0301 vs é, a\u0316\u0301 vs a\u0301\u0316",
	strings.Repeat("a", 100),
	strings.Repeat("a", 101),
	strings.Repeat("é", 100),
	strings.Repeat("é", 101),
	"x" + strings.Repeat("\u0301", 150),
	strings.Repeat("qzxv", 300),
	"[CLS] [SEP] [MASK] [UNK] [PAD]",
	"[CLS][SEP]x[MASK]y [cls] [Sep] [SEP [CLS]]",
	"##abc ## #",
	"1,234,567.89 3.14159 1e-10 50% $5 €10 ٣٫١٤",
	"العربية עברית हिन्दी ภาษาไทย",
	"Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
	"replacement \ufffd char",
	"ǅungla ǈ ǋ ﬁne ﬂow Ⅻ ①",
	"\ue000private\U000F0000use",
	"tabs\tand\nnewlines\r\nand\vvertical\fform",
	"mixed—dashes–and…ellipsis «quotes» „German“ ‘single’",
	"\xff\xfe invalid \xe2\x82 utf8 \xc3",
	"x\u166dy\U000111C9z\u1734w\u1885v",
}

func TestParityWithHuggingFace(t *testing.T) {
	if testing.Short() {
		t.Skip("parity over the shared data is skipped in -short mode")
	}
	docs := []doc{}
	for i, s := range edgeCases {
		docs = append(docs, doc{source: fmt.Sprintf("edge case %d", i), text: s})
	}
	docs = append(docs, wikipediaDocs(t)...)
	docs = append(docs, patentDocs(t)...)
	texts := make([]string, len(docs))
	for i, d := range docs {
		texts[i] = d.text
	}
	for _, gn := range gnTokenizers {
		t.Run(gn, func(t *testing.T) {
			compareIDs(t, testenv.Tokenizer(t, gn), "", texts, docs...)
		})
	}
}

// compareIDs encodes texts with both tokenizers and fails on any difference. docs, when given,
// name the source of each text.
func compareIDs(t *testing.T, path, source string, texts []string, docs ...doc) {
	t.Helper()
	tok, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := oracleIDs(t, path, texts)
	names := tok.pieces()
	tokens, bad := 0, 0
	for i, text := range texts {
		got := tok.Encode(text)
		tokens += len(want[i])
		if slices.Equal(got, want[i]) {
			continue
		}
		src := source
		if docs != nil {
			src = docs[i].source
		}
		if bad++; bad <= 10 {
			t.Errorf("%s", describeMismatch(tok, names, src, text, got, want[i]))
		}
	}
	t.Logf("%s: %d docs, %d tokens, %d mismatches", filepath.Base(filepath.Dir(path)), len(texts), tokens, bad)
}

var (
	pageRe  = regexp.MustCompile(`(?s)<page>.*?</page>`)
	titleRe = regexp.MustCompile(`(?s)<title>(.*?)</title>`)
	textRe  = regexp.MustCompile(`(?s)<text[^>]*>(.*?)</text>`)
	tagRe   = regexp.MustCompile(`<[^>]*>`)
)

func wikipediaDocs(t *testing.T) []doc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.SharedData(t, "wikipedia"), "*.bz2"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no wikipedia files: %v", err)
	}
	var docs []doc
	for _, f := range files {
		data, err := readBzip2(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		pages := pageRe.FindAll(data, -1)
		if len(pages) > 0 && !bytes.HasSuffix(bytes.TrimSpace(data), []byte("</mediawiki>")) {
			t.Fatalf("%s: decompressed text does not end with </mediawiki>: a bz2 stream was lost", name)
		}
		if len(pages) == 0 {
			// The multistream offset index has no pages: its title lines are text too.
			lines := strings.Split(string(data), "\n")
			for i := 0; i < len(lines); i += 500 {
				docs = append(docs, doc{name + " lines " + strconv.Itoa(i), strings.Join(lines[i:min(i+500, len(lines))], "\n")})
			}
			continue
		}
		t.Logf("%s: %d pages", name, len(pages))
		for i, p := range pages {
			if m := titleRe.FindSubmatch(p); m != nil {
				docs = append(docs, doc{name + " page " + strconv.Itoa(i) + " title", html.UnescapeString(string(m[1]))})
			}
			if m := textRe.FindSubmatch(p); m != nil {
				docs = append(docs, doc{name + " page " + strconv.Itoa(i) + " text", html.UnescapeString(string(m[1]))})
			}
		}
	}
	return docs
}

// readBzip2 decompresses a whole file (Go's reader continues across the concatenated streams
// of a multistream dump) and decodes UTF-16LE when the file starts with its byte order mark.
func readBzip2(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(bzip2.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if bytes.HasPrefix(data, []byte{0xFF, 0xFE}) {
		u := make([]uint16, (len(data)-2)/2)
		for i := range u {
			u[i] = uint16(data[2+2*i]) | uint16(data[3+2*i])<<8
		}
		data = []byte(string(utf16.Decode(u)))
	}
	return data, nil
}

func patentDocs(t *testing.T) []doc {
	t.Helper()
	root := testenv.SharedData(t, "patents/uspto")
	var docs []doc
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".xml") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for i, part := range strings.Split(string(data), "<?xml") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			raw := "<?xml" + part
			plain := html.UnescapeString(tagRe.ReplaceAllString(raw, " "))
			docs = append(docs, doc{rel + " doc " + strconv.Itoa(i) + " raw", raw}, doc{rel + " doc " + strconv.Itoa(i) + " plain", plain})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}
