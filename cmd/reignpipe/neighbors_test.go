package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/schemas"
)

// neighbors ranks as the evaluator does: best score first, ties by doc id, the query excluded;
// and it refuses to compare vectors of two spaces.
func TestNeighborsRanking(t *testing.T) {
	dir := t.TempDir()
	s, err := vectorfile.NewJSONL(vectorfile.JSONLOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, v := range []schemas.DocVector{
		{DocID: "t:q", Title: "Query", Version: "1", Space: "sp", Vector: []float32{1, 0}},
		{DocID: "t:b", Title: "Tie B", Version: "1", Space: "sp", Vector: []float32{0.6, 0.8}},
		{DocID: "t:a", Title: "Tie A", Version: "1", Space: "sp", Vector: []float32{0.6, -0.8}},
		{DocID: "t:c", Title: "Far", Version: "1", Space: "sp", Vector: []float32{0, 1}},
		{DocID: "t:d", Title: "Near", Version: "1", Space: "sp", Vector: []float32{0.8, 0.6}},
	} {
		if err := s.Write(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := cmdNeighbors(&out, []string{"--vectors", dir, "--doc", "t:q", "--k", "3"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "t:d") || !strings.Contains(lines[2], "t:a") || !strings.Contains(lines[3], "t:b") {
		t.Fatalf("ranking:\n%s", out.String())
	}

	other, err := vectorfile.NewJSONL(vectorfile.JSONLOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Write(ctx, schemas.DocVector{DocID: "t:x", Version: "1", Space: "other", Vector: []float32{1, 0}}); err != nil {
		t.Fatal(err)
	}
	if err := other.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cmdNeighbors(&out, []string{"--vectors", dir, "--doc", "t:q"}); err == nil || !strings.Contains(err.Error(), "not comparable") {
		t.Fatalf("mixed spaces: %v", err)
	}
}
