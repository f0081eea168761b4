package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/reignpipe/reignpipe/pipelines/quality/neighbors"
)

// cmdNeighbors prints the k documents nearest to one document of a vector sink's directory
// (pipelines/quality/neighbors).
func cmdNeighbors(w io.Writer, args []string) error {
	fs := newFlagSet("neighbors", args)
	dir := fs.String("vectors", "", "vector sink directory (parquet or jsonl parts)")
	doc := fs.String("doc", "", "document id, e.g. enwiki:12; the source prefix may be left out when only one source has the id")
	title := fs.String("title", "", "document title, matched ignoring case, whole or else in part (used when --doc is empty; default: the first document)")
	k := fs.Int("k", 5, "number of neighbours")
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("neighbors: --vectors is required")
	}
	res, err := neighbors.Find(*dir, neighbors.Of{DocID: *doc, Title: *title}, *k)
	if err != nil {
		return err
	}
	q := res.Query
	fmt.Fprintf(w, "nearest to %s %q (%d chunks, %d tokens) among %d documents, space %s:\n",
		q.DocID, q.Title, q.NChunks, q.NTokens, res.Among, q.Space)
	for i, h := range res.Hits {
		fmt.Fprintf(w, "  %d. %.4f  %-14s %s\n", i+1, h.Score, h.DocID, h.Title)
	}
	return nil
}
