package retrieval

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Conventions shared by every metric below:
//   - ranked is the system's ranking, best first; only the first k entries count. A corpus id
//     repeated in ranked counts at its first position only (as trec_eval does), so a buggy
//     ranking cannot earn credit twice for one document.
//   - ids absent from rels have relevance 0.
//   - a query with no relevant document scores 0 here; Report skips such queries instead of
//     averaging those zeros in, and counts them.
//   - k <= 0 scores 0.

// NDCG is nDCG@k with gain 2^rel − 1 and discount 1/log2(rank+1) (rank 1-based). The ideal
// DCG ranks the query's whole relevance row descending, truncated at k. Negative grades
// (some qrels use them for "harmful") get gain 0, as in trec_eval, so nDCG stays in [0, 1].
func NDCG(ranked []string, rels map[string]int, k int) float64 {
	if k <= 0 {
		return 0
	}
	var grades []int
	for _, r := range rels {
		if r > 0 {
			grades = append(grades, r)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(grades)))
	ideal := 0.0
	for i, r := range grades[:min(k, len(grades))] {
		ideal += gain(r) / math.Log2(float64(i+2))
	}
	if ideal == 0 {
		return 0
	}
	dcg := 0.0
	for i, id := range firstK(ranked, k) {
		if id != "" {
			dcg += gain(rels[id]) / math.Log2(float64(i+2))
		}
	}
	return dcg / ideal
}

func gain(rel int) float64 {
	if rel <= 0 {
		return 0
	}
	return math.Exp2(float64(rel)) - 1
}

// firstK returns the first k entries of ranked with later repeats blanked to "" so positions
// are kept (a duplicate still occupies its rank slot, it just earns nothing).
func firstK(ranked []string, k int) []string {
	out := make([]string, min(k, len(ranked)))
	seen := make(map[string]bool, len(out))
	for i := range out {
		if id := ranked[i]; !seen[id] {
			seen[id] = true
			out[i] = id
		}
	}
	return out
}

func numRelevant(rels map[string]int, minRel int) int {
	n := 0
	for _, r := range rels {
		if r >= minRel {
			n++
		}
	}
	return n
}

// Precision is P@k: relevant (rel ≥ minRel) hits among the first k, divided by k even when
// fewer than k were retrieved (trec_eval's convention; a short list is not rewarded).
func Precision(ranked []string, rels map[string]int, k, minRel int) float64 {
	if k <= 0 {
		return 0
	}
	return float64(hitsAt(ranked, rels, k, minRel)) / float64(k)
}

// Recall is R@k: relevant hits among the first k over all relevant documents of the query.
func Recall(ranked []string, rels map[string]int, k, minRel int) float64 {
	n := numRelevant(rels, minRel)
	if k <= 0 || n == 0 {
		return 0
	}
	return float64(hitsAt(ranked, rels, k, minRel)) / float64(n)
}

func hitsAt(ranked []string, rels map[string]int, k, minRel int) int {
	h := 0
	for _, id := range firstK(ranked, k) {
		if r, ok := rels[id]; ok && id != "" && r >= minRel {
			h++
		}
	}
	return h
}

// AveragePrecision is AP@k = (Σ over relevant hits at rank i ≤ k of P@i) / min(R, k), R the
// number of relevant documents. Dividing by min(R, k) rather than R (trec_eval's map_cut)
// makes a perfect top-k score 1 even when a query has more than k relevant documents, so
// AP@k is comparable across queries; the two definitions agree whenever R ≤ k.
func AveragePrecision(ranked []string, rels map[string]int, k, minRel int) float64 {
	n := numRelevant(rels, minRel)
	if k <= 0 || n == 0 {
		return 0
	}
	sum, h := 0.0, 0
	for i, id := range firstK(ranked, k) {
		if r, ok := rels[id]; ok && id != "" && r >= minRel {
			h++
			sum += float64(h) / float64(i+1)
		}
	}
	return sum / float64(min(n, k))
}

// QueryMetrics are one query's scores.
type QueryMetrics struct {
	QueryID        string
	NDCG, P, R, AP float64
}

// Report aggregates per-query metrics at one cutoff and relevance threshold.
type Report struct {
	K, MinRel int
	PerQuery  []QueryMetrics
	// Skipped counts queries with no document at rel ≥ MinRel: they have no defined score,
	// and averaging them in as zeros would penalise every system equally while diluting
	// differences, so they are left out and reported instead.
	Skipped int
	seen    map[string]bool
}

// NewReport starts a report at cutoff k; minRel is the relevance grade from which a document
// counts as relevant for P, R and AP (1 in BEIR; 2 for GoodWiki's rephrasal-only view).
func NewReport(k, minRel int) (*Report, error) {
	if k <= 0 {
		return nil, fmt.Errorf("retrieval: cutoff k must be positive, got %d", k)
	}
	if minRel <= 0 {
		return nil, fmt.Errorf("retrieval: minRel must be positive, got %d", minRel)
	}
	return &Report{K: k, MinRel: minRel, seen: map[string]bool{}}, nil
}

// Add scores one query. It reports whether the query was kept (false: skipped for having no
// relevant document).
func (r *Report) Add(queryID string, ranked []string, rels map[string]int) (bool, error) {
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	if r.seen[queryID] {
		return false, fmt.Errorf("retrieval: query %q added twice", queryID)
	}
	r.seen[queryID] = true
	if numRelevant(rels, r.MinRel) == 0 {
		r.Skipped++
		return false, nil
	}
	r.PerQuery = append(r.PerQuery, QueryMetrics{
		QueryID: queryID,
		NDCG:    NDCG(ranked, rels, r.K),
		P:       Precision(ranked, rels, r.K, r.MinRel),
		R:       Recall(ranked, rels, r.K, r.MinRel),
		AP:      AveragePrecision(ranked, rels, r.K, r.MinRel),
	})
	return true, nil
}

// Mean averages the kept queries; QueryID is "all". With no kept query every mean is 0.
func (r *Report) Mean() QueryMetrics {
	m := QueryMetrics{QueryID: "all"}
	n := float64(len(r.PerQuery))
	if n == 0 {
		return m
	}
	for _, q := range r.PerQuery {
		m.NDCG += q.NDCG
		m.P += q.P
		m.R += q.R
		m.AP += q.AP
	}
	m.NDCG, m.P, m.R, m.AP = m.NDCG/n, m.P/n, m.R/n, m.AP/n
	return m
}

// Column returns one metric per kept query in report order, the input the significance tests
// take, e.g. r.Column(func(q QueryMetrics) float64 { return q.NDCG }).
func (r *Report) Column(metric func(QueryMetrics) float64) []float64 {
	out := make([]float64, len(r.PerQuery))
	for i, q := range r.PerQuery {
		out[i] = metric(q)
	}
	return out
}

// WritePerQuery writes a header and one TSV row per kept query: query id, nDCG@k, P@k, R@k,
// AP@k, with six decimals so reruns diff cleanly.
func WritePerQuery(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "query-id\tndcg@%d\tP@%d\tR@%d\tAP@%d\n", r.K, r.K, r.K, r.K)
	for _, q := range r.PerQuery {
		if strings.ContainsAny(q.QueryID, "\t\r\n") {
			return fmt.Errorf("retrieval: query id %q would break the TSV", q.QueryID)
		}
		fmt.Fprintf(bw, "%s\t%.6f\t%.6f\t%.6f\t%.6f\n", q.QueryID, q.NDCG, q.P, q.R, q.AP)
	}
	return bw.Flush()
}
