package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/pipelines/serving/search"
	"github.com/reignpipe/reignpipe/pipelines/serving/search/searchtest"
)

// search prints the query, how its vector was made, and one line per hit; --format json gives
// the same answer as a document; a bad command line names what to give.
func TestSearchCommand(t *testing.T) {
	dir := t.TempDir()
	searchtest.Corpus(t, dir, "")
	yaml := filepath.Join(dir, "pipeline.yaml")
	ctx := context.Background()
	var out bytes.Buffer
	if err := searchTo(ctx, &out, strings.NewReader(searchtest.Texts()["bread"]), []string{"--text", "-", "--k", "2", yaml}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"query query:stdin (1 chunks", "1 windows: 1 from the chunk cache, 0 embedded by the GN", "top 2 in space gn-meanpool:", " 1. ", "t:long", "doc long"} {
		if !strings.Contains(text, want) {
			t.Fatalf("listing lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "t:twin") || strings.Contains(text, "t:bread") {
		t.Fatalf("the query's own text is listed:\n%s", text)
	}
	out.Reset()
	if err := searchTo(ctx, &out, nil, []string{"--id", "t:violin", "--format", "json", "--k", "3", yaml}); err != nil {
		t.Fatal(err)
	}
	var res search.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("--format json: %v\n%s", err, out.String())
	}
	if !res.Query.Stored || res.Query.DocID != "t:violin" || len(res.Hits) != 3 {
		t.Fatalf("json answer %+v", res)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{yaml}, "give one query"},
		{[]string{"--text", "a", "--id", "t:a", yaml}, "give one query"},
		{[]string{"--text", "a"}, "exactly one pipeline file"},
		{[]string{"--text", "a", "--k", "0", yaml}, "--k must be >= 1"},
		{[]string{"--text", "a", "--format", "xml", yaml}, "is not text or json"},
		{[]string{"--id", "nope", yaml}, `no document "nope"`},
		{[]string{"--text", "a", "--sink", "3", yaml}, "sink 3 does not exist"},
	} {
		err := searchTo(ctx, &out, nil, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
