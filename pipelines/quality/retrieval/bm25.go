package retrieval

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode"
)

// BM25 defaults: Anserini's BEIR "flat" baseline uses k1=0.9, b=0.4, so scores from this
// index line up with the lexical baseline numbers the BEIR tables report.
const (
	DefaultK1 = 0.9
	DefaultB  = 0.4
)

type posting struct {
	doc int32
	tf  int32
}

// BM25 is an in-memory Okapi BM25 index over pre-tokenised documents.
type BM25 struct {
	k1, b    float64
	ids      []string
	lens     []int32
	totalLen int64
	postings map[string][]posting
	byID     map[string]bool
}

// NewBM25 returns an empty index. k1 must be ≥ 0 and b in [0, 1], the range where the
// length normalisation is meaningful.
func NewBM25(k1, b float64) (*BM25, error) {
	if !(k1 >= 0) || math.IsInf(k1, 0) || !(b >= 0 && b <= 1) {
		return nil, fmt.Errorf("retrieval: BM25 needs k1 ≥ 0 and 0 ≤ b ≤ 1, got k1=%v b=%v", k1, b)
	}
	return &BM25{k1: k1, b: b, postings: map[string][]posting{}, byID: map[string]bool{}}, nil
}

// Index adds one document. Documents without tokens still count toward N and the average
// length, as in Lucene, so idf matches an index built over the same corpus elsewhere.
func (x *BM25) Index(docID string, tokens []string) error {
	if docID == "" {
		return errors.New("retrieval: BM25: empty document id")
	}
	if x.byID[docID] {
		return fmt.Errorf("retrieval: BM25: document %q indexed twice", docID)
	}
	if len(x.ids) >= math.MaxInt32 {
		return errors.New("retrieval: BM25: index full")
	}
	doc := int32(len(x.ids))
	x.byID[docID] = true
	x.ids = append(x.ids, docID)
	x.lens = append(x.lens, int32(min(len(tokens), math.MaxInt32)))
	x.totalLen += int64(len(tokens))
	tf := map[string]int32{}
	for _, t := range tokens {
		tf[t]++
	}
	for t, c := range tf {
		x.postings[t] = append(x.postings[t], posting{doc: doc, tf: c})
	}
	return nil
}

// Search returns the k best documents for the query, best first, skipping exclude (pass ""
// to keep all). The score of document d is
//
//	Σ_t idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·|d|/avgdl)),  idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))
//
// with Lucene's always-positive idf. Lucene ≥ 8 drops the constant (k1+1) factor; it does
// not change the ranking, and keeping it gives the textbook Okapi values. A query term
// repeated q times contributes q times, as a Lucene bag-of-words query does. Only documents
// sharing a term with the query are returned.
func (x *BM25) Search(queryTokens []string, k int, exclude string) []Hit {
	n := len(x.ids)
	if k <= 0 || n == 0 {
		return nil
	}
	avgdl := float64(x.totalLen) / float64(n)
	qtf := map[string]int{}
	for _, t := range queryTokens {
		qtf[t]++
	}
	scores := map[int32]float64{}
	// Terms in sorted order: map order would change the float summation order and so the
	// last bits of scores from run to run.
	for _, t := range slices.Sorted(maps.Keys(qtf)) {
		q := qtf[t]
		ps := x.postings[t]
		if len(ps) == 0 {
			continue
		}
		df := float64(len(ps))
		idf := math.Log(1 + (float64(n)-df+0.5)/(df+0.5))
		for _, p := range ps {
			tf := float64(p.tf)
			norm := 1.0
			if avgdl > 0 {
				norm = 1 - x.b + x.b*float64(x.lens[p.doc])/avgdl
			}
			scores[p.doc] += float64(q) * idf * tf * (x.k1 + 1) / (tf + x.k1*norm)
		}
	}
	t := topHeap{k: k}
	for d, s := range scores {
		if id := x.ids[d]; id != exclude {
			t.offer(Hit{ID: id, Score: s})
		}
	}
	return t.sorted()
}

// stopWords is Lucene's classic English stop set (EnglishAnalyzer's default): small enough
// not to remove content words, and the default of Lucene/Anserini analyzers behind the
// BEIR BM25 baselines.
var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an and are as at be but by for if in into is it no not
		of on or such that the their then there these they this to was will with`) {
		m[w] = true
	}
	return m
}()

// Tokenize lowercases text, splits it on every rune that is not a Unicode letter or digit,
// and drops stop words. There is no stemming (Anserini applies Porter), so BM25 numbers
// here run somewhat below Anserini's on morphologically varied corpora.
func Tokenize(text string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		if !stopWords[f] {
			out = append(out, f)
		}
	}
	return out
}
