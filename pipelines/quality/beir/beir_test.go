package beir

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, content string, gz bool) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	data := []byte(content)
	if gz {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write(data)
		w.Close()
		data = b.Bytes()
		path += ".gz"
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("x", 200<<10) // past bufio.Scanner's 64 KiB token limit
	writeFile(t, filepath.Join(dir, "corpus.jsonl"),
		`{"_id": "d1", "title": "T1", "text": "one"}`+"\r\n"+
			"\n"+
			`{"_id": 42, "text": "`+long+`", "extra": [1]}`+"\n"+
			`{"_id":"d3","title":"","text":"three"}`, false)
	writeFile(t, filepath.Join(dir, "queries.jsonl"),
		`{"_id": "q1", "text": "first"}`+"\n"+`{"_id": 7, "text": "second"}`+"\n", true)
	writeFile(t, filepath.Join(dir, "qrels", "test.tsv"),
		"query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\t42\t1\n7\td3\t1\n", false)
	writeFile(t, filepath.Join(dir, "qrels", "dev.tsv"), "q1\td3\t1\n", true)

	ds, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantCorpus := []Doc{{"d1", "T1", "one"}, {"42", "", long}, {"d3", "", "three"}}
	if !reflect.DeepEqual(ds.Corpus, wantCorpus) {
		t.Errorf("corpus ids %v", ds.Corpus[0])
	}
	if !reflect.DeepEqual(ds.Queries, []Query{{"q1", "first"}, {"7", "second"}}) {
		t.Errorf("queries %v", ds.Queries)
	}
	wantQrels := Qrels{"q1": {"d1": 2, "42": 1}, "7": {"d3": 1}}
	if !reflect.DeepEqual(ds.Qrels, wantQrels) {
		t.Errorf("qrels %v", ds.Qrels)
	}
	dev, err := LoadSplit(dir, "dev")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dev.Qrels, Qrels{"q1": {"d3": 1}}) {
		t.Errorf("dev qrels %v", dev.Qrels)
	}
	if _, err := LoadSplit(dir, "../x"); err == nil {
		t.Error("path-like split accepted")
	}
	if _, err := LoadSplit(dir, "train"); err == nil || !strings.Contains(err.Error(), "train.tsv") {
		t.Errorf("missing split: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	okQ := `{"_id":"q1","text":"a"}` + "\n"
	okC := `{"_id":"d1","text":"a"}` + "\n"
	cases := []struct {
		name, corpus, queries, qrels, want string
	}{
		{"bad json", okC + "{oops\n", okQ, "q1\td1\t1\n", "corpus.jsonl:2"},
		{"no id", okC + `{"text":"a"}` + "\n", okQ, "q1\td1\t1\n", "corpus.jsonl:2"},
		{"bool id", `{"_id":true}` + "\n", okQ, "q1\td1\t1\n", "corpus.jsonl:1"},
		{"no text", okC + `{"_id":"d2"}` + "\n", okQ, "q1\td1\t1\n", "corpus.jsonl:2"},
		{"dup corpus", okC + okC, okQ, "q1\td1\t1\n", "corpus.jsonl:2"},
		{"dup query", okC, okQ + "\n" + okQ, "q1\td1\t1\n", "queries.jsonl:3"},
		{"bad qrel", okC, okQ, "query-id\tcorpus-id\tscore\nq1\td1\tx\n", "test.tsv:2"},
		{"dup qrel", okC, okQ, "q1\td1\t1\nq1\td1\t2\n", "test.tsv:2"},
		{"late header", okC, okQ, "q1\td1\t1\nquery-id\tcorpus-id\tscore\n", "test.tsv:2"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "corpus.jsonl"), c.corpus, false)
		writeFile(t, filepath.Join(dir, "queries.jsonl"), c.queries, false)
		writeFile(t, filepath.Join(dir, "qrels", "test.tsv"), c.qrels, false)
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want mention of %q", c.name, err, c.want)
		}
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "corpus.jsonl.gz"), []byte("not gzip"), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "corpus.jsonl.gz") {
		t.Errorf("bad gzip: %v", err)
	}
}

// Documents are named as the jsonl connector names them, so eval ranks the ids a pipeline run
// over the same corpus.jsonl writes: "id" wins over "_id", and either alone will do.
func TestReadDocsIDRule(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "corpus.jsonl")
	writeFile(t, path, `{"id":"a","_id":"b","text":"x"}`+"\n"+`{"id":3,"text":"y"}`+"\n"+`{"_id":"c","text":"z"}`+"\n", false)
	docs, err := ReadDocs(path, "corpus")
	if err != nil {
		t.Fatal(err)
	}
	if want := []Doc{{"a", "", "x"}, {"3", "", "y"}, {"c", "", "z"}}; !reflect.DeepEqual(docs, want) {
		t.Errorf("docs %v, want %v", docs, want)
	}
}

func TestParseQrelsLine(t *testing.T) {
	cases := []struct {
		line    string
		q, d    string
		score   int
		wantErr bool
	}{
		{"q1\td1\t1", "q1", "d1", 1, false},
		{"q1\td1\t0\r\n", "q1", "d1", 0, false},
		{"q1\td1\t-1", "q1", "d1", -1, false},
		{"q1\td1\t2.0", "q1", "d1", 2, false},
		{" q1 \t d1 \t 3 ", "q1", "d1", 3, false},
		{"q1\td1\t1.5", "", "", 0, true},
		{"q1\td1\tNaN", "", "", 0, true},
		{"q1\td1\t1e300", "", "", 0, true},
		{"q1\td1", "", "", 0, true},
		{"q1\td1\t1\textra", "", "", 0, true},
		{"q1\t\t1", "", "", 0, true},
		{"", "", "", 0, true},
	}
	for _, c := range cases {
		q, d, s, err := ParseQrelsLine(c.line)
		if (err != nil) != c.wantErr || q != c.q || d != c.d || s != c.score {
			t.Errorf("ParseQrelsLine(%q) = %q, %q, %d, %v", c.line, q, d, s, err)
		}
	}
}
