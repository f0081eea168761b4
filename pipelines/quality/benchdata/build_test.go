package benchdata

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// article is a long text of distinct paragraphs, so every fixture document has its own
// halves.
func article(name string, paras int) string {
	var ps []string
	for i := range paras {
		ps = append(ps, fmt.Sprintf("%s paragraph %d says something about %s that no other paragraph says.", name, i, name))
	}
	return strings.Join(ps, "\n\n")
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func jsonlLine(id, version, text string) string {
	b, _ := json.Marshal(map[string]string{"id": id, "version": version, "text": text})
	return string(b) + "\n"
}

// loadSplits loads every split through the eval loader and checks what holds for any
// benchmark: each query has exactly its counterpart as relevant, the corpus and queries are
// complete, and the splits partition the documents.
func loadSplits(t *testing.T, dir string, sum *Summary) map[string]*beir.Dataset {
	t.Helper()
	out := map[string]*beir.Dataset{}
	inSplit := map[string]string{}
	for _, s := range SplitNames {
		ds, err := beir.LoadSplit(dir, s)
		if err != nil {
			t.Fatalf("split %s: %v", s, err)
		}
		if len(ds.Corpus) != sum.Docs || len(ds.Queries) != sum.Docs || len(ds.Qrels) != sum.Splits[s].Queries {
			t.Fatalf("split %s: corpus %d, queries %d, qrels %d; summary %+v", s, len(ds.Corpus), len(ds.Queries), len(ds.Qrels), sum)
		}
		for q, row := range ds.Qrels {
			id := strings.TrimSuffix(q, QuerySuffix)
			if len(row) != 1 || row[id] != Relevance || id == q {
				t.Fatalf("split %s: qrels of %s = %v", s, q, row)
			}
			if prev, dup := inSplit[id]; dup {
				t.Fatalf("%s in %s and %s", id, prev, s)
			}
			inSplit[id] = s
		}
		out[s] = ds
	}
	if len(inSplit) != sum.Docs {
		t.Fatalf("%d documents in the splits, %d kept", len(inSplit), sum.Docs)
	}
	return out
}

func TestHalvesJSONL(t *testing.T) {
	dir := t.TempDir()
	long := map[string]string{}
	var in strings.Builder
	for i := range 10 {
		id := fmt.Sprintf("d%d", i)
		long[id] = article(id, 12)
		in.WriteString(jsonlLine(id, "1", long[id]))
	}
	in.WriteString(jsonlLine("short", "1", "Too short to halve.\n\nReally."))
	in.WriteString(jsonlLine("d3", "0", "an older version of d3, replaced by the one read before it"))
	in.WriteString(jsonlLine("tab\tid", "1", article("tab", 12)))
	in.WriteString(jsonlLine("copy", "1", long["d1"]))
	in.WriteString(jsonlLine("nocut", "1", strings.Repeat("x", 600)))
	input := writeFile(t, filepath.Join(dir, "wiki.jsonl"), in.String())
	out := filepath.Join(dir, "bench")

	sum, err := Build(context.Background(), Options{Kind: KindHalves, Source: SourceJSONL, Input: input, Out: out, Seed: 42, MinChars: 500})
	if err != nil {
		t.Fatal(err)
	}
	wantSkipped := map[string]int{SkipShort: 1, SkipDuplicateID: 1, SkipBadID: 1, SkipDuplicateQuery: 1, SkipNoCut: 1}
	if sum.Docs != 10 || sum.Candidates != 14 || !reflect.DeepEqual(sum.Skipped, wantSkipped) || sum.Cuts[CutParagraph] != 10 {
		t.Fatalf("summary %+v", sum)
	}
	if sum.Splits["train"].Queries != 6 || sum.Splits["val"].Queries != 2 || sum.Splits["test"].Queries != 2 {
		t.Fatalf("splits %+v", sum.Splits)
	}
	sets := loadSplits(t, out, sum)
	test := sets["test"]
	for i, d := range test.Corpus {
		q := test.Queries[i]
		if q.ID != d.ID+QuerySuffix || d.Title != "" {
			t.Fatalf("row %d: query %q, doc %q title %q", i, q.ID, d.ID, d.Title)
		}
		// The halves are the article, cut at a paragraph boundary near its middle.
		id := strings.TrimPrefix(d.ID, "wiki:")
		if q.Text+"\n\n"+d.Text != long[id] || strings.Count(q.Text, "\n\n") != 5 {
			t.Fatalf("%s: halves %q | %q", id, q.Text, d.Text)
		}
	}
	var written Summary
	b, err := os.ReadFile(filepath.Join(out, SummaryFile))
	if err != nil || json.Unmarshal(b, &written) != nil || !reflect.DeepEqual(&written, sum) {
		t.Fatalf("benchdata.json %v:\n%s", err, b)
	}
}

func grant(num, kind, date, appNum, claims, desc string) string {
	s := `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE us-patent-grant SYSTEM "us-patent-grant-v42-2006-08-23.dtd" [ ]>
<us-patent-grant lang="EN" dtd-version="v4.2 2006-08-23">
<us-bibliographic-data-grant>
<publication-reference><document-id><country>US</country><doc-number>` + num + `</doc-number><kind>` + kind + `</kind><date>` + date + `</date></document-id></publication-reference>
<application-reference><document-id><country>US</country><doc-number>` + appNum + `</doc-number><date>20040102</date></document-id></application-reference>
<invention-title>Title ` + num + `</invention-title>
</us-bibliographic-data-grant>
<abstract><p>Abstract ` + num + `.</p></abstract>
`
	if desc != "" {
		s += "<description><heading>FIELD</heading><p>" + desc + "</p><p>More on " + num + ".</p></description>\n"
	}
	if claims != "" {
		s += "<claims><claim><claim-text>1. " + claims + "</claim-text></claim><claim><claim-text>2. The thing of claim 1.</claim-text></claim></claims>\n"
	}
	return s + "</us-patent-grant>\n"
}

const sequence = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE sequence-cwu SYSTEM "us-sequence-listing-2004-03-09.dtd" [ ]>
<sequence-cwu><s100>ACGT</s100></sequence-cwu>
`

func TestPatentClaims(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "in", "ipg1.xml"),
		grant("07000001", "B1", "20060103", "10000001", "A widget with a sprocket.", "Widgets are described.")+
			sequence+
			grant("07000002", "B2", "20060103", "10000002", "A lamp.", "")+ // no description
			grant("07000003", "B2", "20060103", "10000003", "", "Only a description.")+ // no claims
			grant("D0500001", "S1", "20060103", "29000001", "The ornamental design for a chair.", "FIG. 1 is a chair.")+
			grant("D0500002", "S1", "20060103", "29000002", "The ornamental design for a chair.", "FIG. 1 is another chair."))
	writeFile(t, filepath.Join(dir, "in", "ipg2.xml"),
		grant("07000004", "B1", "20060110", "10000004", "A valve.", "Valves are described.")+
			// The same application published again later: only the later one stays.
			grant("07000005", "B1", "20070102", "10000004", "A valve, improved.", "Valves are described again.")+
			grant("07000006", "B1", "20060110", "10000006", "A gear.", "Gears are described."))
	out := filepath.Join(dir, "bench")
	sum, err := Build(context.Background(), Options{Kind: KindPatentClaims, Source: SourceUSPTO, Input: filepath.Join(dir, "in"), Out: out, Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	wantSkipped := map[string]int{SkipNoDescription: 1, SkipNoClaims: 1, SkipSameWork: 1, SkipDuplicateQuery: 1}
	if sum.Docs != 4 || sum.Candidates != 8 || !reflect.DeepEqual(sum.Skipped, wantSkipped) {
		t.Fatalf("summary %+v", sum)
	}
	if len(sum.Passes) != 2 || sum.Passes[0].Read != 7 || sum.Passes[0].Skipped["sequence-listing"] != 1 || sum.Passes[1].Read != 7 {
		t.Fatalf("passes %+v", sum.Passes)
	}
	loadSplits(t, out, sum)
	ds, err := beir.LoadSplit(out, "train")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, d := range ds.Corpus {
		ids = append(ids, d.ID)
		q := ds.Queries[i].Text
		if d.ID == "uspto:US07000001B1" && (q != "1. A widget with a sprocket.\n2. The thing of claim 1." || d.Text != "FIELD\nWidgets are described.\nMore on 07000001.") {
			t.Fatalf("pair of %s: %q | %q", d.ID, q, d.Text)
		}
	}
	if strings.Join(ids, " ") != "uspto:US07000001B1 uspto:USD0500001S1 uspto:US07000005B1 uspto:US07000006B1" {
		t.Fatalf("corpus %v", ids)
	}

	// Asking for long descriptions leaves the short ones out.
	sum, err = Build(context.Background(), Options{Kind: KindPatentClaims, Source: SourceUSPTO, Input: filepath.Join(dir, "in"), Out: out, Seed: 42, MinChars: 50})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Docs != 1 || sum.Skipped[SkipShort] != 4 {
		t.Fatalf("min-chars 50: %+v", sum)
	}
}

func TestTextDir(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "Documentation")
	writeFile(t, filepath.Join(root, "admin-guide", "README.rst"), article("readme", 10))
	writeFile(t, filepath.Join(root, "process", "howto.TXT"), article("howto", 10))
	writeFile(t, filepath.Join(root, "index.rst"), article("index", 10))
	writeFile(t, filepath.Join(root, "Makefile"), article("make", 10))
	writeFile(t, filepath.Join(root, "conf.py"), article("conf", 10))
	writeFile(t, filepath.Join(root, "bad.rst"), article("bad", 10)+"\xff")
	if err := os.Symlink(filepath.Join(root, "index.rst"), filepath.Join(root, "link.rst")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bench")
	sum, err := Build(context.Background(), Options{Kind: KindHalves, Source: SourceTextDir, Input: root, Out: out, Seed: 42, MinChars: 100})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Docs != 4 || sum.Passes[0].Read != 4 {
		t.Fatalf("summary %+v", sum)
	}
	ds := loadSplits(t, out, sum)["test"]
	var ids []string
	for _, d := range ds.Corpus {
		ids = append(ids, d.ID)
		if d.ID == "bad.rst" && !strings.HasSuffix(d.Text, "\uFFFD") {
			t.Fatalf("invalid UTF-8 kept as %q", d.Text[len(d.Text)-8:])
		}
	}
	if strings.Join(ids, " ") != "admin-guide/README.rst bad.rst index.rst process/howto.TXT" {
		t.Fatalf("ids %v", ids)
	}

	if _, err := Build(context.Background(), Options{Kind: KindHalves, Source: SourceTextDir, Input: filepath.Join(root, "conf.py"), Out: out}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("file as textdir: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	if _, err := Build(context.Background(), Options{Kind: KindHalves, Source: SourceTextDir, Input: empty, Out: out}); err == nil || !strings.Contains(err.Error(), "no *.rst or *.txt") {
		t.Fatalf("empty textdir: %v", err)
	}
}

func TestWikipedia(t *testing.T) {
	dir := t.TempDir()
	page := func(id int, title, text string, redirect bool) string {
		red := ""
		if redirect {
			red = `<redirect title="Elsewhere" />`
		}
		return fmt.Sprintf("<page><title>%s</title><ns>0</ns><id>%d</id>%s<revision><id>%d</id><text xml:space=\"preserve\">%s</text></revision></page>\n",
			title, id, red, 100+id, text)
	}
	dump := `<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11"><siteinfo><dbname>testwiki</dbname></siteinfo>` + "\n" +
		page(1, "Alpha", article("Alpha", 8), false) +
		page(2, "Beta", "#REDIRECT [[Alpha]]", true) +
		page(3, "Gamma", article("Gamma", 8), false) +
		page(4, "Delta", "Delta is short.", false) +
		page(5, "Epsilon", article("Epsilon", 8), false) +
		"</mediawiki>\n"
	input := writeFile(t, filepath.Join(dir, "testwiki.xml"), dump)
	out := filepath.Join(dir, "bench")
	sum, err := Build(context.Background(), Options{Kind: KindHalves, Source: SourceWikipedia, Input: input, Out: out, Seed: 42, MinChars: 200})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Docs != 3 || sum.Skipped[SkipShort] != 1 || sum.Passes[0].Skipped["redirect"] != 1 {
		t.Fatalf("summary %+v", sum)
	}
	ds := loadSplits(t, out, sum)["test"]
	if ds.Corpus[0].ID != "testwiki:1" || !strings.HasPrefix(ds.Queries[0].Text, "Alpha paragraph 0") {
		t.Fatalf("first pair %+v %+v", ds.Corpus[0], ds.Queries[0])
	}
}

// TestDeterministic builds twice from the same input, into fresh and into used directories:
// every file must be byte-identical.
func TestDeterministic(t *testing.T) {
	dir := t.TempDir()
	var in strings.Builder
	for i := range 37 {
		in.WriteString(jsonlLine(fmt.Sprintf("doc-%02d", i), "1", article(fmt.Sprintf("doc %d", i), 6+i%5)))
	}
	input := writeFile(t, filepath.Join(dir, "c.jsonl"), in.String())
	build := func(out string, seed uint64) map[string][]byte {
		t.Helper()
		if _, err := Build(context.Background(), Options{Kind: KindHalves, Source: SourceJSONL, Input: input, Out: out, Seed: seed, MinChars: 10}); err != nil {
			t.Fatal(err)
		}
		files := map[string][]byte{}
		err := filepath.WalkDir(out, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			rel, _ := filepath.Rel(out, p)
			files[rel] = b
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return files
	}
	a := build(filepath.Join(dir, "a"), 42)
	if len(a) != 6 {
		t.Fatalf("files %v", len(a))
	}
	for _, out := range []string{filepath.Join(dir, "b"), filepath.Join(dir, "a")} {
		b := build(out, 42)
		for name, data := range a {
			if !bytes.Equal(data, b[name]) {
				t.Fatalf("%s differs between builds into %s", name, out)
			}
		}
		if len(b) != len(a) {
			t.Fatalf("%d files, then %d", len(a), len(b))
		}
	}
	other := build(filepath.Join(dir, "c"), 7)
	if bytes.Equal(other["qrels/test.tsv"], a["qrels/test.tsv"]) || !bytes.Equal(other["corpus.jsonl"], a["corpus.jsonl"]) {
		t.Fatal("another seed must change the split and only the split")
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	input := writeFile(t, filepath.Join(dir, "c.jsonl"), jsonlLine("a", "1", article("a", 6))+jsonlLine("a#q", "1", article("b", 6)))
	ok := Options{Kind: KindHalves, Source: SourceJSONL, Input: input, Out: filepath.Join(dir, "out"), MinChars: 10}
	tests := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"kind", func(o *Options) { o.Kind = "pairs" }, `kind "pairs"`},
		{"source", func(o *Options) { o.Source = "csv" }, `source "csv"`},
		{"patents need uspto", func(o *Options) { o.Kind = KindPatentClaims }, "needs source uspto"},
		{"no input", func(o *Options) { o.Input = "" }, "input path is required"},
		{"no out", func(o *Options) { o.Out = "" }, "output directory is required"},
		{"min chars", func(o *Options) { o.MinChars = -1 }, "must not be negative"},
		{"missing input", func(o *Options) { o.Input = filepath.Join(dir, "nope.jsonl") }, "no input file matches"},
		{"nothing kept", func(o *Options) { o.MinChars = 1 << 20 }, "no document"},
		{"query id collides", func(o *Options) {}, `query id "c:a#q" is also a corpus id`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			_, err := Build(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Fatalf("a failed build wrote output: %v", err)
	}
}
