package jsonl

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The text policy: invalid UTF-8 runs become one U+FFFD each, control characters (NUL
// included, raw or escaped) are stripped from text and title, and both are counted.
func TestTextPolicy(t *testing.T) {
	data := "{\"id\":\"a\",\"title\":\"T\\u0000itle\",\"text\":\"caf\xc3 ok \xff\xfe\xfd and \\u0000nul\"}\n" +
		"{\"id\":\"b\",\"text\":\"\\u0001\\u0000\"}\n" + // nothing left: skipped as empty
		"{\"id\":\"c\",\"text\":\"clean\"}\n"
	path := filepath.Join(t.TempDir(), "p.jsonl")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	docs, bad, st := readAll(t, Options{Path: path})
	if len(bad) != 0 || len(docs) != 2 {
		t.Fatalf("docs %+v bad %v", docs, bad)
	}
	if docs[0].Title != "Title" || docs[0].Text != "caf\uFFFD ok \uFFFD and nul" {
		t.Errorf("doc a: title %q text %q", docs[0].Title, docs[0].Text)
	}
	want := map[string]int64{"repaired_utf8": 2, "stripped_control": 4}
	if !reflect.DeepEqual(st.Text, want) || st.Skipped["empty"] != 1 {
		t.Errorf("text counts %v skipped %v, want %v and 1 empty", st.Text, st.Skipped, want)
	}
}

// Blank texts (whitespace, controls, zero-width characters) are skipped as empty by default
// and handed out, as they are, with KeepEmpty.
func TestBlankTexts(t *testing.T) {
	data := `{"id":"a","text":""}` + "\n" + `{"id":"b","text":"  \n "}` + "\n" +
		`{"id":"c","text":"\u200b\ufeff"}` + "\n" + `{"id":"d","text":"words"}` + "\n"
	path := filepath.Join(t.TempDir(), "c.jsonl")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	docs, _, st := readAll(t, Options{Path: path})
	if len(docs) != 1 || st.Skipped["empty"] != 3 {
		t.Fatalf("default: %d docs, skipped %v", len(docs), st.Skipped)
	}
	docs, _, st = readAll(t, Options{Path: path, KeepEmpty: true})
	if len(docs) != 4 || len(st.Skipped) != 0 || docs[2].Text != "\u200b\ufeff" {
		t.Fatalf("KeepEmpty: %d docs, skipped %v", len(docs), st.Skipped)
	}
}
