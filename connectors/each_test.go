package connectors_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/jsonl"
	"github.com/reignpipe/reignpipe/schemas"
)

func TestEach(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.jsonl")
	if err := os.WriteFile(path, []byte("{\"id\": \"a\", \"text\": \"x\"}\nnot json\n{\"id\": \"b\", \"text\": \"y\"}\n{\"id\": \"c\", \"text\": \"z\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stopAt  string
		want    []string
		wantBad int
	}{{"", []string{"d:a", "d:b", "d:c"}, 1}, {"d:b", []string{"d:a", "d:b"}, 1}} {
		src, err := jsonl.Open(jsonl.Options{Path: path, Source: "d"})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		bad, err := connectors.Each(context.Background(), src, func(d schemas.Document) (bool, error) {
			got = append(got, d.ID)
			return d.ID != tc.stopAt, nil
		})
		src.Close(context.Background())
		if err != nil || bad != tc.wantBad || strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("stop at %q: got %v, %d bad, %v", tc.stopAt, got, bad, err)
		}
	}
}
