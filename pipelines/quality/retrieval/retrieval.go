// Package retrieval holds the retrieval-evaluation maths: exact dense top-k retrieval, a BM25
// baseline, per-query ranking metrics and paired significance tests. Everything is
// deterministic so two runs over the same vectors give byte-identical reports.
package retrieval

import (
	"fmt"
	"math"
	"sort"
)

// Hit is one retrieved corpus entry.
type Hit struct {
	ID    string
	Score float64
}

// HitIDs returns the ids of hits in rank order, the form the metrics take.
func HitIDs(hits []Hit) []string {
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.ID
	}
	return ids
}

// better orders hits by descending score, then ascending id, so equal scores rank the same
// way on every run and platform.
func better(a, b Hit) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	return a.ID < b.ID
}

// topHeap keeps the k best hits seen so far; the root is the worst of them, so a candidate
// only needs comparing with the root: O(n log k) instead of sorting the whole corpus.
type topHeap struct {
	k int
	h []Hit
}

func (t *topHeap) offer(x Hit) {
	if len(t.h) < t.k {
		t.h = append(t.h, x)
		for i := len(t.h) - 1; i > 0; {
			p := (i - 1) / 2
			if !better(t.h[p], t.h[i]) {
				break
			}
			t.h[p], t.h[i] = t.h[i], t.h[p]
			i = p
		}
		return
	}
	if !better(x, t.h[0]) {
		return
	}
	t.h[0] = x
	for i := 0; ; {
		w, l, r := i, 2*i+1, 2*i+2
		if l < len(t.h) && better(t.h[w], t.h[l]) {
			w = l
		}
		if r < len(t.h) && better(t.h[w], t.h[r]) {
			w = r
		}
		if w == i {
			break
		}
		t.h[w], t.h[i] = t.h[i], t.h[w]
		i = w
	}
}

func (t *topHeap) sorted() []Hit {
	out := t.h
	sort.Slice(out, func(i, j int) bool { return better(out[i], out[j]) })
	return out
}

// TopK returns the k corpus entries with the largest dot product with query, best first.
// Entries whose id equals exclude are skipped while scanning; for unique corpus ids that is
// exactly the reference's "retrieve k+1, drop the self-match, keep k". Pass exclude "" to
// keep self-matches (LoCo). The dot product accumulates in float64 so rank order does not
// depend on float32 rounding of near-ties.
func TopK(query []float32, corpus [][]float32, ids []string, k int, exclude string) ([]Hit, error) {
	if len(ids) != len(corpus) {
		return nil, fmt.Errorf("retrieval: TopK: %d ids for %d corpus vectors", len(ids), len(corpus))
	}
	if k <= 0 {
		return nil, nil
	}
	t := topHeap{k: k, h: make([]Hit, 0, min(k, len(corpus)))}
	for i, v := range corpus {
		if len(v) != len(query) {
			return nil, fmt.Errorf("retrieval: TopK: corpus vector %d (%q) has dim %d, query has %d",
				i, ids[i], len(v), len(query))
		}
		if exclude != "" && ids[i] == exclude {
			continue
		}
		s := dot(query, v)
		if math.IsNaN(s) {
			return nil, fmt.Errorf("retrieval: TopK: NaN score for corpus vector %d (%q)", i, ids[i])
		}
		t.offer(Hit{ID: ids[i], Score: s})
	}
	return t.sorted(), nil
}

func dot(a, b []float32) float64 {
	var s0, s1, s2, s3 float64
	b = b[:len(a)]
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += float64(a[i]) * float64(b[i])
		s1 += float64(a[i+1]) * float64(b[i+1])
		s2 += float64(a[i+2]) * float64(b[i+2])
		s3 += float64(a[i+3]) * float64(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += float64(a[i]) * float64(b[i])
	}
	return (s0 + s1) + (s2 + s3)
}
