package benchdata

import "slices"

// Skip reasons, the keys of Summary.Skipped.
const (
	SkipBadID          = "bad-id"
	SkipDuplicateID    = "duplicate-id"
	SkipSameWork       = "same-application"
	SkipShort          = "short"
	SkipNoCut          = "no-cut"
	SkipNoClaims       = "no-claims"
	SkipNoDescription  = "no-description"
	SkipDuplicateQuery = "duplicate-query-text"
	SkipDuplicateDoc   = "duplicate-doc-text"
)

// candidate is a pair with what the filters below need.
type candidate struct {
	Pair
	version, group string
	cut            string // halves: where the text was cut
}

// oneWorkEach keeps, of the candidates that are publications of one work, the one with the
// greatest version (the latest publication; the later read on a tie). An application and its
// grant carry nearly the same text, so keeping both would put a near-copy of the relevant
// document in the corpus, graded not relevant.
func oneWorkEach(cs []candidate, sum *Summary) []candidate {
	best := map[string]int{} // group -> index into cs
	for i, c := range cs {
		if c.group == "" {
			continue
		}
		if j, ok := best[c.group]; !ok || c.version >= cs[j].version {
			best[c.group] = i
		}
	}
	return slices.DeleteFunc(slices.Clone(cs), func(c candidate) bool {
		if c.group == "" || cs[best[c.group]].ID == c.ID {
			return false
		}
		sum.Skipped[SkipSameWork]++
		return true
	})
}

// distinctTexts drops a candidate whose query text or corpus text equals that of an earlier
// kept one. Identical queries with different relevant documents, or identical documents under
// different queries, rank the same, so no system could score all of them; templated texts
// (design patents' "The ornamental design for a chair, as shown and described.") do this.
func distinctTexts(cs []candidate, sum *Summary) []candidate {
	seenQ, seenD := map[string]bool{}, map[string]bool{}
	var out []candidate
	for _, c := range cs {
		switch {
		case seenQ[c.Query]:
			sum.Skipped[SkipDuplicateQuery]++
		case seenD[c.Doc]:
			sum.Skipped[SkipDuplicateDoc]++
		default:
			out = append(out, c)
			seenQ[c.Query], seenD[c.Doc] = true, true
		}
	}
	return out
}

func pairsOf(cs []candidate) []Pair {
	out := make([]Pair, len(cs))
	for i, c := range cs {
		out[i] = c.Pair
	}
	return out
}
