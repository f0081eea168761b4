package jsonl

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/schemas"
)

func TestParseLine(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Record
		wantErr string
	}{
		{"id string", `{"id":"a1","title":"T","text":"body"}`, Record{ID: "a1", Title: "T", Text: "body"}, ""},
		{"beir _id", `{"_id":"d7","title":"","text":"x","metadata":{}}`, Record{ID: "d7", Text: "x"}, ""},
		{"numeric id", `{"id":42,"text":"x"}`, Record{ID: "42", Text: "x"}, ""},
		{"id wins over _id", `{"id":"a","_id":"b","text":"x"}`, Record{ID: "a", Text: "x"}, ""},
		{"version string", `{"id":"a","text":"x","version":"v2"}`, Record{ID: "a", Text: "x", Version: "v2"}, ""},
		{"version number", `{"id":"a","text":"x","version":3}`, Record{ID: "a", Text: "x", Version: "3"}, ""},
		{"unicode escapes", `{"id":"a","text":"caf\u00e9 \ud83d\ude00"}`, Record{ID: "a", Text: "café 😀"}, ""},
		{"surrounding space", "  {\"id\":\"a\",\"text\":\"x\"}\r", Record{ID: "a", Text: "x"}, ""},
		{"invalid json", `{"id":"a","text":`, Record{}, "invalid JSON"},
		{"not an object", `["a"]`, Record{}, "not a JSON object"},
		{"missing id", `{"text":"x"}`, Record{}, "missing \"id\""},
		{"null id", `{"id":null,"text":"x"}`, Record{}, "missing \"id\""},
		{"empty id", `{"id":"","text":"x"}`, Record{}, "empty"},
		{"object id", `{"id":{},"text":"x"}`, Record{}, "id: not a string or number"},
		{"missing text", `{"id":"a","title":"T"}`, Record{ID: "a"}, "missing \"text\""},
		{"text not string", `{"id":"a","text":5}`, Record{ID: "a"}, "text: not a string"},
		{"title not string", `{"id":"a","text":"x","title":[]}`, Record{ID: "a", Text: "x"}, "title: not a string"},
		{"deletion", `{"id":"a","deleted":true,"version":"7"}`, Record{ID: "a", Version: "7", Deleted: true}, ""},
		{"deletion without version", `{"_id":"a","deleted":true}`, Record{ID: "a", Deleted: true}, ""},
		{"deletion numeric version", `{"id":"a","deleted":true,"version":12}`, Record{ID: "a", Version: "12", Deleted: true}, ""},
		{"deletion empty text", `{"id":"a","deleted":true,"text":""}`, Record{ID: "a", Deleted: true}, ""},
		{"deletion null text", `{"id":"a","deleted":true,"text":null}`, Record{ID: "a", Deleted: true}, ""},
		{"deletion title ignored", `{"id":"a","deleted":true,"title":"T"}`, Record{ID: "a", Deleted: true}, ""},
		{"deleted false is a document", `{"id":"a","deleted":false,"text":"x"}`, Record{ID: "a", Text: "x"}, ""},
		{"deleted null is a document", `{"id":"a","deleted":null,"text":"x"}`, Record{ID: "a", Text: "x"}, ""},
		{"deleted false needs text", `{"id":"a","deleted":false}`, Record{ID: "a"}, "missing \"text\""},
		{"deletion with text", `{"id":"a","deleted":true,"text":"body"}`, Record{ID: "a", Deleted: true}, "a deletion line"},
		{"deletion with non-string text", `{"id":"a","deleted":true,"text":3}`, Record{ID: "a", Deleted: true}, "a deletion line"},
		{"deleted not a boolean", `{"id":"a","deleted":"yes"}`, Record{ID: "a"}, "\"deleted\" is not true or false"},
		{"deleted number", `{"id":"a","deleted":1,"text":"x"}`, Record{ID: "a"}, "\"deleted\" is not true or false"},
		{"deletion without id", `{"deleted":true,"version":"1"}`, Record{}, "missing \"id\""},
		{"deletion bad version", `{"id":"a","deleted":true,"version":[]}`, Record{ID: "a"}, "version: not a string or number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLine([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

const corpus = `{"_id":"1","title":"One","text":"first"}

{"_id":2,"title":"Two","text":"second","version":"v9"}
not json
{"title":"no id","text":"x"}
{"_id":"3","text":"  "}
{"_id":"4","title":"Four","text":"fourth"}`

func compress(t *testing.T, kind string, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch kind {
	case "gz":
		w = gzip.NewWriter(&buf)
	case "zst":
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	default:
		return data
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readAll(t *testing.T, opts Options) ([]schemas.Document, []*connectors.BadInputError, connectors.SourceStats) {
	t.Helper()
	r, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	var docs []schemas.Document
	var bad []*connectors.BadInputError
	for {
		d, ack, err := r.Read(context.Background())
		if err == io.EOF {
			return docs, bad, r.Stats()
		}
		if ack == nil && err == nil {
			t.Fatal("nil ack")
		}
		var be *connectors.BadInputError
		if errors.As(err, &be) {
			if ack == nil {
				t.Fatal("bad input without ack")
			}
			bad = append(bad, be)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, d)
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	for _, kind := range []string{"", "gz", "zst"} {
		name := "beir-corpus.jsonl"
		if kind != "" {
			name += "." + kind
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, compress(t, kind, []byte(corpus)), 0o644); err != nil {
				t.Fatal(err)
			}
			docs, bad, st := readAll(t, Options{Path: path})
			want := []schemas.Document{
				{ID: "beir-corpus:1", Source: "beir-corpus", Title: "One", Text: "first"},
				{ID: "beir-corpus:2", Source: "beir-corpus", Title: "Two", Text: "second", Version: "v9"},
				{ID: "beir-corpus:4", Source: "beir-corpus", Title: "Four", Text: "fourth"},
			}
			if !reflect.DeepEqual(docs, want) {
				t.Errorf("docs = %+v", docs)
			}
			if len(bad) != 2 || !strings.Contains(bad[0].Position, "line 4") || !strings.Contains(bad[1].Position, "line 5") {
				t.Errorf("bad = %v", bad)
			}
			if st.Read != 3 || st.Skipped["empty"] != 1 || st.BytesRead != st.BytesTotal || st.BytesTotal == 0 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

// Deletion lines come out as deletion records (with their line, for dead letters further on),
// in their place among the documents; a bad one is a bad input naming the document.
func TestReadDeletions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "feed.jsonl")
	data := `{"id":"a","title":"A","text":"alpha","version":"1"}
{"id":"a","deleted":true,"version":"2"}
{"id":"b","deleted":true}
{"id":"c","deleted":true,"text":"not empty"}
{"id":"a","text":"alpha again","version":"3"}
`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	docs, bad, st := readAll(t, Options{Path: path})
	want := []schemas.Document{
		{ID: "feed:a", Source: "feed", Version: "1", Title: "A", Text: "alpha"},
		{ID: "feed:a", Source: "feed", Version: "2", Position: "feed.jsonl line 2", Deleted: true},
		{ID: "feed:b", Source: "feed", Position: "feed.jsonl line 3", Deleted: true},
		{ID: "feed:a", Source: "feed", Version: "3", Text: "alpha again"},
	}
	if !reflect.DeepEqual(docs, want) {
		t.Errorf("docs = %+v", docs)
	}
	if len(bad) != 1 || bad[0].DocID != "feed:c" || !strings.Contains(bad[0].Position, "line 4") || !strings.Contains(bad[0].Reason.Error(), "deletion line") {
		t.Errorf("bad = %v", bad)
	}
	if st.Read != 4 {
		t.Errorf("stats = %+v", st)
	}
}

func TestLongLines(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("x", 5<<20)
	path := filepath.Join(dir, "long.jsonl")
	data := `{"id":"a","text":"` + long + `"}` + "\n" + `{"id":"b","text":"short"}`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	docs, bad, _ := readAll(t, Options{Path: path, Source: "s"})
	if len(bad) != 0 || len(docs) != 2 || docs[0].Text != long || docs[1].ID != "s:b" {
		t.Fatalf("docs %d bad %v", len(docs), bad)
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"no path", Options{}, "Path is required"},
		{"bad source", Options{Path: "x.jsonl", Source: "a:b"}, "Source"},
		{"missing", Options{Path: filepath.Join(t.TempDir(), "none.jsonl")}, "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
	for in, want := range map[string]string{
		"/a/corpus.jsonl.gz": "corpus", "b.jsonl.zst": "b", "c.v2.jsonl": "c.v2", "d e:f.jsonl": "d_e_f", ".jsonl": "jsonl",
	} {
		if got := defaultSource(in); got != want {
			t.Errorf("defaultSource(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"_id":"1","title":"t","text":"x"}`))
	f.Add([]byte(`{"id":1e3,"text":"x","version":null}`))
	f.Add([]byte(`{"id":"a","text":"\ud800"}`))
	f.Add([]byte(`{"id":"a","deleted":true,"version":"3"}`))
	f.Add([]byte(`{"id":"a","deleted":true,"text":""}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		rec, err := ParseLine(line)
		if err != nil {
			return
		}
		if rec.ID == "" || !utf8.ValidString(rec.ID) || !utf8.ValidString(rec.Text) {
			t.Fatalf("accepted a bad record %+v from %q", rec, line)
		}
		if rec.Deleted && (rec.Text != "" || rec.Title != "") {
			t.Fatalf("a deletion with content %+v from %q", rec, line)
		}
	})
}

// A line over MaxLineBytes is a bad input naming the bound, consumed without being held; the
// next line is read as usual.
func TestMaxLineBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.jsonl")
	long := `{"id": "big", "text": "` + strings.Repeat("word ", 4000) + `"}`
	data := long + "\n" + `{"id": "small", "text": "a short text"}` + "\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(Options{Path: path, Source: "t", MaxLineBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	_, _, err = r.Read(context.Background())
	var bad *connectors.BadInputError
	if !errors.As(err, &bad) || !strings.Contains(bad.Reason.Error(), "longer than 1000 bytes") || bad.Position != "c.jsonl line 1" {
		t.Fatalf("first Read = %v", err)
	}
	d, _, err := r.Read(context.Background())
	if err != nil || d.ID != "t:small" {
		t.Fatalf("second Read = %+v, %v", d, err)
	}
}
