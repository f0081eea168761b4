package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/schemas"
)

// neighbors prints the query document, then one line per neighbour (rank, score, id, title);
// the ranking itself is pipelines/quality/neighbors. and tested there.
func TestNeighborsListing(t *testing.T) {
	dir := t.TempDir()
	s, err := vectorfile.NewJSONL(vectorfile.JSONLOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q := schemas.DocVector{DocID: "t:q", Title: "Query", Version: "1", Space: "sp", Vector: []float32{1, 0}}
	if err := s.Write(ctx, q); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, schemas.DocVector{DocID: "t:d", Title: "Near", Version: "1", Space: "sp", Vector: []float32{0.8, 0.6}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := cmdNeighbors(&out, []string{"--vectors", dir, "--doc", "t:q", "--k", "3"}); err != nil {
		t.Fatal(err)
	}
	want := "nearest to t:q \"Query\" (0 chunks, 0 tokens) among 2 documents, space sp:\n  1. 0.8000  t:d            Near\n"
	if out.String() != want {
		t.Fatalf("listing:\n%s\nwant:\n%s", out.String(), want)
	}
	if err := cmdNeighbors(&out, []string{"--doc", "t:q"}); err == nil || !strings.Contains(err.Error(), "--vectors") {
		t.Fatalf("no --vectors: %v", err)
	}
}
