package pgvector

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/schemas"
)

// corpus writes n random unit vectors of dim into space through a sink and returns them.
func corpus(t *testing.T, o Options, space string, n, dim int, seed uint64) []schemas.DocVector {
	t.Helper()
	s := openSink(t, o)
	r := rand.New(rand.NewPCG(seed, seed+1))
	docs := make([]schemas.DocVector, n)
	for i := range docs {
		docs[i] = schemas.DocVector{DocID: fmt.Sprintf("d%05d", i), Title: fmt.Sprintf("T%d", i), Source: "src", Version: "1",
			ContentHash: uint64(i) * 0x9e3779b97f4a7c15, Space: space, Vector: unit(r, dim)}
		if err := s.Write(ctxT(t), docs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return docs
}

func openSearcher(t *testing.T, dsn, prefix string) *Searcher {
	t.Helper()
	s, err := OpenSearcher(ctxT(t), SearchOptions{DSN: dsn, Table: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// bruteForce ranks docs by the similarity distance scores, best first, ties by doc id.
func bruteForce(docs []schemas.DocVector, q []float32, distance string, ex schemas.Exclude) []schemas.Hit {
	var hits []schemas.Hit
	for _, d := range docs {
		if d.DocID == ex.DocID || (ex.ByHash && d.ContentHash == ex.ContentHash) {
			continue
		}
		var dot, l2 float64
		for i := range q {
			dot += float64(q[i]) * float64(d.Vector[i])
			l2 += (float64(q[i]) - float64(d.Vector[i])) * (float64(q[i]) - float64(d.Vector[i]))
		}
		score := dot // unit vectors: the cosine is the dot product
		if distance == L2 {
			score = -math.Sqrt(l2)
		}
		hits = append(hits, schemas.Hit{DocID: d.DocID, Title: d.Title, Source: d.Source, Version: d.Version, ContentHash: d.ContentHash, Score: score})
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		return hits[i].DocID < hits[j].DocID
	})
	return hits
}

// sameRanking compares a ranking with the brute-force one. pgvector sums in float32, so two
// rows whose scores differ by less than tol may come in either order.
func sameRanking(t *testing.T, got, want []schemas.Hit, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d hits, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i].Score-want[i].Score) > tol {
			t.Fatalf("hit %d: %s score %.7f, brute force has %s at %.7f", i, got[i].DocID, got[i].Score, want[i].DocID, want[i].Score)
		}
		if got[i].DocID != want[i].DocID {
			continue // a near tie, allowed by the score check above
		}
		w := want[i]
		w.Score = got[i].Score
		if got[i] != w {
			t.Fatalf("hit %d: %+v, want %+v", i, got[i], w)
		}
	}
}

func TestSearchExactEqualsBruteForce(t *testing.T) {
	dsn := pgtest.Database(t)
	for _, distance := range []string{InnerProduct, Cosine, L2} {
		t.Run(distance, func(t *testing.T) {
			prefix := "s_" + distance
			docs := corpus(t, Options{Config: Config{DSN: dsn, Table: prefix, Distance: distance}}, reignSpace, 600, 32, 31)
			s := openSearcher(t, dsn, prefix)
			r := rand.New(rand.NewPCG(33, 34))
			for qi := range 10 {
				q, ex := unit(r, 32), schemas.Exclude{}
				if qi%2 == 1 { // the query is a stored document: it is left out
					d := docs[r.IntN(len(docs))]
					q, ex = d.Vector, schemas.Exclude{DocID: d.DocID}
				}
				got, err := hitsOf(s.Search(ctxT(t), reignSpace, q, 10, ex, true))
				if err != nil {
					t.Fatal(err)
				}
				sameRanking(t, got, bruteForce(docs, q, distance, ex)[:10], 1e-5)
			}
		})
	}
}

func TestSearchHNSWLeavesTheQueryOut(t *testing.T) {
	dsn := pgtest.Database(t)
	docs := corpus(t, Options{Config: Config{DSN: dsn}}, reignSpace, 300, 16, 41)
	// Three copies of one text under other ids: ExcludeHash leaves them out too.
	s := openSink(t, Options{Config: Config{DSN: dsn}})
	for i := range 3 {
		c := docs[7]
		c.DocID = fmt.Sprintf("copy%d", i)
		if err := s.Write(ctxT(t), c); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	se := openSearcher(t, dsn, "")
	q := docs[7].Vector
	for _, c := range []struct {
		name  string
		ex    schemas.Exclude
		shown []string
		out   []string
	}{
		{"doc id", schemas.Exclude{DocID: docs[7].DocID}, []string{"copy0", "copy1", "copy2"}, []string{docs[7].DocID}},
		{"content hash", schemas.Exclude{DocID: docs[7].DocID, ContentHash: docs[7].ContentHash, ByHash: true}, nil, []string{docs[7].DocID, "copy0", "copy1", "copy2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []int{1, 5, 10, 50} {
				hits, err := hitsOf(se.Search(ctxT(t), reignSpace, q, k, c.ex, false))
				if err != nil {
					t.Fatal(err)
				}
				if len(hits) != k {
					t.Fatalf("k=%d: %d hits", k, len(hits))
				}
				ids := map[string]bool{}
				for i, h := range hits {
					ids[h.DocID] = true
					if i > 0 && (h.Score > hits[i-1].Score || h.Score == hits[i-1].Score && h.DocID < hits[i-1].DocID) {
						t.Fatalf("k=%d: hits out of order at %d: %+v", k, i, hits)
					}
				}
				for _, id := range c.out {
					if ids[id] {
						t.Fatalf("k=%d: %s was to be left out: %+v", k, id, hits)
					}
				}
				for _, id := range c.shown {
					if k >= 3 && !ids[id] {
						t.Fatalf("k=%d: %s (same vector as the query) missing: %+v", k, id, hits)
					}
				}
			}
		})
	}
}

// Identical vectors tie: they come by ascending doc id.
func TestSearchTiesByDocID(t *testing.T) {
	dsn := pgtest.Database(t)
	s := openSink(t, Options{Config: Config{DSN: dsn, Index: IndexNone}})
	v := unit(rand.New(rand.NewPCG(51, 52)), 8)
	for _, id := range []string{"c", "a", "d", "b"} {
		if err := s.Write(ctxT(t), schemas.DocVector{DocID: id, Version: "1", Space: gnSpace, Vector: v}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	se := openSearcher(t, dsn, "")
	for _, exact := range []bool{true, false} {
		hits, err := hitsOf(se.Search(ctxT(t), gnSpace, v, 3, schemas.Exclude{}, exact))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, h := range hits {
			ids = append(ids, h.DocID)
		}
		if strings.Join(ids, " ") != "a b c" {
			t.Fatalf("exact=%v: %v, want a b c", exact, ids)
		}
	}
}

// HNSW finds at least 90% of the exact top 10 over 2,000 random unit vectors of dimension 64
// (random directions are the index's hard case), and really is an index scan: the exact path
// is not.
func TestSearchHNSWRecall(t *testing.T) {
	dsn := pgtest.Database(t)
	docs := corpus(t, Options{Config: Config{DSN: dsn}}, reignSpace, 2000, 64, 61)
	se := openSearcher(t, dsn, "")
	r := rand.New(rand.NewPCG(63, 64))
	const queries, k = 100, 10
	found := 0
	for range queries {
		q := unit(r, 64)
		exact, err := hitsOf(se.Search(ctxT(t), reignSpace, q, k, schemas.Exclude{}, true))
		if err != nil {
			t.Fatal(err)
		}
		sameRanking(t, exact, bruteForce(docs, q, InnerProduct, schemas.Exclude{})[:k], 1e-5)
		approx, err := hitsOf(se.Search(ctxT(t), reignSpace, q, k, schemas.Exclude{}, false))
		if err != nil {
			t.Fatal(err)
		}
		if len(approx) != k {
			t.Fatalf("HNSW returned %d rows, want %d", len(approx), k)
		}
		in := map[string]bool{}
		for _, h := range exact {
			in[h.DocID] = true
		}
		for _, h := range approx {
			if in[h.DocID] {
				found++
			}
		}
	}
	recall := float64(found) / (queries * k)
	t.Logf("HNSW recall@%d over %d queries: %.3f", k, queries, recall)
	if recall < 0.9 {
		t.Fatalf("HNSW recall@%d = %.3f, want >= 0.9", k, recall)
	}
	for _, exact := range []bool{false, true} {
		plan := explainSearch(t, dsn, se, reignSpace, unit(r, 64), k, exact)
		if uses := strings.Contains(plan, "_hnsw"); uses == exact {
			t.Fatalf("exact=%v: the plan uses the HNSW index: %v, want %v\n%s", exact, uses, !exact, plan)
		}
	}
}

// explainSearch returns the plan of the query Search runs, under its settings.
func explainSearch(t *testing.T, dsn string, se *Searcher, space string, q []float32, k int, exact bool) string {
	t.Helper()
	info, err := se.space(ctxT(t), space)
	if err != nil {
		t.Fatal(err)
	}
	settings, sql, args, err := searchQuery(info, q, k, schemas.Exclude{DocID: "x"}, exact)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	var plan []string
	err = pgx.BeginFunc(ctxT(t), conn, func(tx pgx.Tx) error {
		for _, s := range settings {
			if _, err := tx.Exec(ctxT(t), s); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctxT(t), "EXPLAIN "+sql, args...)
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

func TestSpacesAndUnknownSpace(t *testing.T) {
	dsn := pgtest.Database(t)
	s := openSink(t, Options{Config: Config{DSN: dsn, Distance: Cosine}})
	r := rand.New(rand.NewPCG(71, 72))
	for i := range 5 {
		v := reignDoc(r, i, "1")
		if i >= 3 {
			v.GNVector = nil // only three carry their companion
		}
		if err := s.Write(ctxT(t), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	se := openSearcher(t, dsn, "")
	spaces, err := se.Spaces(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []SpaceInfo{
		{Space: gnSpace, Table: TableName("reignpipe", gnSpace), Distance: Cosine, Dim: 8, Rows: 3},
		{Space: reignSpace, Table: TableName("reignpipe", reignSpace), Distance: Cosine, Dim: 16, Rows: 5},
	}
	if fmt.Sprint(spaces) != fmt.Sprint(want) {
		t.Fatalf("Spaces = %+v, want %+v", spaces, want)
	}
	_, err = se.Search(ctxT(t), "reign:abc", make([]float32, 16), 3, schemas.Exclude{}, false)
	if err == nil || !strings.Contains(err.Error(), "no vectors of space reign:abc in reignpipe_spaces (it has: "+gnSpace+", "+reignSpace+")") {
		t.Fatalf("unknown space: %v", err)
	}
	if _, err := se.Search(ctxT(t), reignSpace, make([]float32, 4), 3, schemas.Exclude{}, false); err == nil || !strings.Contains(err.Error(), "4 dimensions") {
		t.Fatalf("wrong dimension: %v", err)
	}
	if _, err := OpenSearcher(ctxT(t), SearchOptions{DSN: dsn, Table: "nothing_here"}); err == nil || !strings.Contains(err.Error(), "no table nothing_here_spaces") {
		t.Fatalf("missing prefix: %v", err)
	}
}

// A searcher is shared by a server's request goroutines.
func TestSearchConcurrent(t *testing.T) {
	dsn := pgtest.Database(t)
	docs := corpus(t, Options{Config: Config{DSN: dsn}}, reignSpace, 200, 16, 81)
	se := openSearcher(t, dsn, "")
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 20 {
				d := docs[(g*20+i)%len(docs)]
				hits, err := hitsOf(se.Search(context.Background(), reignSpace, d.Vector, 5, schemas.Exclude{DocID: d.DocID}, i%2 == 0))
				if err == nil && len(hits) != 5 {
					err = fmt.Errorf("%d hits", len(hits))
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// hitsOf is a search's hits, for the tests that compare rankings.
func hitsOf(a *schemas.Answer, err error) ([]schemas.Hit, error) {
	if err != nil {
		return nil, err
	}
	return a.Hits, nil
}

// An answer says how it was made: a deferred table before its run ended has no HNSW index,
// so asking for the index is an exact scan, and the answer says so (and is the exact top k);
// once the index is built, the index answers. The store named is the table that answered.
func TestSearchSaysHowItRan(t *testing.T) {
	dsn := pgtest.Database(t)
	sink := openSink(t, Options{Config: Config{DSN: dsn, Table: "howran", Index: IndexDeferred}})
	r := rand.New(rand.NewPCG(91, 92))
	docs := make([]schemas.DocVector, 120)
	for i := range docs {
		docs[i] = schemas.DocVector{DocID: fmt.Sprintf("d%03d", i), Source: "src", Version: "1", ContentHash: uint64(i + 1), Space: reignSpace, Vector: unit(r, 16)}
		if err := sink.Write(ctxT(t), docs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Flush(ctxT(t)); err != nil { // committed; the run has not ended
		t.Fatal(err)
	}
	se := openSearcher(t, dsn, "howran")
	q := unit(r, 16)
	table := TableName("howran", reignSpace)
	for _, c := range []struct {
		exact, closed bool
		wantExact     bool
		how           string
	}{
		{false, false, true, "exact scan (the table has no HNSW index yet: index: deferred builds it when the run ends"},
		{true, false, true, "exact scan"},
		{false, true, false, "HNSW index"},
		{true, true, true, "exact scan"},
	} {
		if c.closed {
			if err := sink.Close(ctxT(t)); err != nil { // the run's end builds the index
				t.Fatal(err)
			}
		}
		a, err := se.Search(ctxT(t), reignSpace, q, 5, schemas.Exclude{}, c.exact)
		if err != nil {
			t.Fatal(err)
		}
		if a.Exact != c.wantExact || !strings.HasPrefix(a.How, c.how) || a.Store != "pgvector table "+table {
			t.Fatalf("exact=%v, index built %v: answered exact=%v how %q from %q", c.exact, c.closed, a.Exact, a.How, a.Store)
		}
		if a.Exact {
			sameRanking(t, a.Hits, bruteForce(docs, q, InnerProduct, schemas.Exclude{})[:5], 1e-5)
		}
	}
}
