package multifile

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/jsonl"
)

func TestReadsFilesInNameOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.jsonl", `{"id": 3, "text": "three"}`+"\n"+`{"id": 4, "text": " "}`+"\n")
	write("a.jsonl", `{"id": 1, "text": "one"}`+"\n"+`{"id": 2, "text": "two"}`+"\n")
	write(".hidden", "not read")
	open := func(_ context.Context, p string) (connectors.Source, error) {
		return jsonl.Open(jsonl.Options{Path: p, Source: "t"})
	}
	for _, path := range []string{dir, filepath.Join(dir, "*.jsonl")} {
		s, err := Open(context.Background(), nil, path, open)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for {
			d, _, err := s.Read(context.Background())
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, d.ID)
		}
		if got := strings.Join(ids, ","); got != "t:1,t:2,t:3" {
			t.Fatalf("%s: read %s", path, got)
		}
		st := s.Stats()
		if st.Read != 3 || st.Skipped["empty"] != 1 || st.BytesRead != st.BytesTotal || st.BytesTotal == 0 {
			t.Fatalf("%s: stats %+v", path, st)
		}
		s.Close(context.Background())
	}
	if _, err := Open(context.Background(), nil, filepath.Join(dir, "*.xml"), open); err == nil {
		t.Fatal("empty match accepted")
	}
}

// The text policy's counts of every file add up in the folder's stats.
func TestTextCountsAddUp(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.jsonl", "b.jsonl"} {
		body := `{"id": "` + name + `", "text": "x\u0000y"}` + "\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(context.Background(), nil, dir, func(_ context.Context, p string) (connectors.Source, error) {
		return jsonl.Open(jsonl.Options{Path: p, Source: "t"})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for n := 0; ; n++ {
		_, _, err := s.Read(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && s.Stats().Text["stripped_control"] != 1 {
			t.Fatalf("after the first file's document: %v", s.Stats().Text)
		}
	}
	if got := s.Stats().Text["stripped_control"]; got != 2 {
		t.Fatalf("stripped_control = %d, want 2", got)
	}
}
