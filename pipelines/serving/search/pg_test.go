package search_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/pipelines/serving/search"
	"github.com/reignpipe/reignpipe/pipelines/serving/search/searchtest"
	"github.com/reignpipe/reignpipe/schemas"
)

// TestSearchPGVector: a run writes the same vectors to parquet and to pgvector; the database's
// exact scan and its HNSW index give the file scan's answer, with the query document left out.
func TestSearchPGVector(t *testing.T) {
	dsn := pgtest.Database(t)
	dir := t.TempDir()
	sinks := fmt.Sprintf("[{type: parquet, dir: %q}, {type: pgvector, dsn: %q, table: st}]", filepath.Join(dir, "vectors"), dsn)
	cfg := searchtest.Corpus(t, dir, sinks)
	ctx := context.Background()
	pg, err := search.Open(ctx, cfg, search.Options{Sink: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	if !strings.HasPrefix(pg.Store.Name(), "pgvector") {
		t.Fatalf("the default store of a pipeline with a pgvector sink should be the database: %s", pg.Store.Name())
	}
	files, err := search.OpenStore(ctx, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()

	q := textDoc(t, "query:long", searchtest.Texts()["long"])
	emb, err := pg.Embedder.Embed(ctx, *q)
	if err != nil {
		t.Fatal(err)
	}
	ex := schemas.Exclude{DocID: q.ID, ContentHash: emb.Vector.ContentHash, ByHash: true}
	want, err := files.Search(ctx, emb.Vector.Space, emb.Vector.Vector, 4, ex, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, exact := range []bool{true, false} {
		res, err := pg.Search(ctx, search.Request{Doc: q, K: 4, Exact: exact})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(hitIDs(res), ids(want.Hits)) || res.Exact != exact {
			t.Fatalf("exact=%v: pgvector %v, files %v", exact, hitIDs(res), ids(want.Hits))
		}
		for i, h := range res.Hits {
			if d := h.Score - want.Hits[i].Score; d > 1e-5 || d < -1e-5 {
				t.Errorf("%s: score %v in the database, %v from the files", h.DocID, h.Score, want.Hits[i].Score)
			}
		}
	}
	res, err := pg.Search(ctx, search.Request{ID: "t:bread", K: 5})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(hitIDs(res), "t:twin") || slices.Contains(hitIDs(res), "t:bread") || len(res.Hits) != 4 {
		t.Fatalf("by id, the document and its same-text twin should be left out: %v", hitIDs(res))
	}
	bare, err := pg.Search(ctx, search.Request{ID: "bread", K: 5})
	if err != nil || bare.Query.DocID != "t:bread" || !slices.Equal(hitIDs(bare), hitIDs(res)) {
		t.Fatalf("a bare id: %+v %v", bare, err)
	}
	if _, err = pg.Search(ctx, search.Request{ID: "nope", K: 5}); !errors.As(err, new(*connectors.NotFoundError)) {
		t.Fatalf("an unknown id: %v", err)
	}
}

func ids(h []schemas.Hit) []string {
	out := make([]string, len(h))
	for i, x := range h {
		out[i] = x.DocID
	}
	return out
}
