package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines/bench/retrieval"
	"github.com/reignpipe/reignpipe/schemas"
)

func nowUTC() time.Time { return time.Now().UTC() }

// cmdNeighbors prints the k documents nearest to one document (dot product of L2-normalised
// vectors, the document itself excluded) from a vector sink's directory.
func cmdNeighbors(w io.Writer, args []string) error {
	fs := newFlagSet("neighbors", args)
	dir := fs.String("vectors", "", "vector sink directory (parquet or jsonl parts)")
	doc := fs.String("doc", "", "document id, e.g. enwiki:12")
	title := fs.String("title", "", "document title (used when --doc is empty; default: the first document)")
	k := fs.Int("k", 5, "number of neighbours")
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("neighbors: --vectors is required")
	}
	if *k < 1 {
		return errors.New("neighbors: --k must be >= 1")
	}
	latest, err := vectorfile.Latest(*dir)
	if err != nil {
		return err
	}
	if len(latest) == 0 {
		return fmt.Errorf("neighbors: no vectors in %s", *dir)
	}
	ids := make([]string, 0, len(latest))
	for id := range latest {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var q schemas.DocVector
	switch {
	case *doc != "":
		v, ok := latest[*doc]
		if !ok {
			return fmt.Errorf("neighbors: no document %q in %s", *doc, *dir)
		}
		q = v
	case *title != "":
		found := false
		for _, id := range ids {
			if strings.EqualFold(latest[id].Title, *title) {
				q, found = latest[id], true
				break
			}
		}
		if !found {
			return fmt.Errorf("neighbors: no document titled %q in %s", *title, *dir)
		}
	default:
		q = latest[ids[0]]
	}
	corpus := make([][]float32, len(ids))
	for i, id := range ids {
		v := latest[id]
		if v.Space != q.Space {
			return fmt.Errorf("neighbors: %s is in space %s, %s in %s: vectors of two spaces are not comparable", q.DocID, q.Space, id, v.Space)
		}
		corpus[i] = v.Vector
	}
	// The evaluator's ranking, so neighbours and eval never order a tie differently.
	hits, err := retrieval.TopK(q.Vector, corpus, ids, *k, q.DocID)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "nearest to %s %q (%d chunks, %d tokens) among %d documents, space %s:\n",
		q.DocID, q.Title, q.NChunks, q.NTokens, len(latest), q.Space)
	for i, h := range hits {
		fmt.Fprintf(w, "  %d. %.4f  %-14s %s\n", i+1, h.Score, h.ID, latest[h.ID].Title)
	}
	return nil
}
