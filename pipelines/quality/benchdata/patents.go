package benchdata

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/reignpipe/reignpipe/connectors/uspto"
)

// patentPairs reads the USPTO source once per section, so each text is exactly what
// uspto.Text gives for that section alone, and joins the two passes by document id.
func patentPairs(ctx context.Context, o Options, sum *Summary) ([]Pair, error) {
	claims, cpass, err := readAll(ctx, SourceUSPTO, o.Input, []string{uspto.SectionClaims})
	if err != nil {
		return nil, err
	}
	descs, dpass, err := readAll(ctx, SourceUSPTO, o.Input, []string{uspto.SectionDescription})
	if err != nil {
		return nil, err
	}
	sum.Passes = append(sum.Passes, cpass, dpass)
	// A republication repeats an id in both passes alike; count it once.
	if n := max(claims.dups, descs.dups); n > 0 {
		sum.Skipped[SkipDuplicateID] = n
	}
	sum.Candidates = len(descs.order)
	for _, id := range descs.order {
		if _, ok := claims.byID[id]; !ok {
			sum.Skipped[SkipNoClaims]++
		}
	}
	var cs []candidate
	for _, id := range claims.order {
		c, d := claims.byID[id], descs.byID[id]
		if _, ok := descs.byID[id]; !ok {
			sum.Skipped[SkipNoDescription]++
			sum.Candidates++
			continue
		}
		if !validID(id) {
			sum.Skipped[SkipBadID]++
			continue
		}
		q, t := strings.TrimSpace(c.text), strings.TrimSpace(d.text)
		// The reader already skips empty sections; these guard whitespace-only ones.
		if q == "" {
			sum.Skipped[SkipNoClaims]++
			continue
		}
		if t == "" {
			sum.Skipped[SkipNoDescription]++
			continue
		}
		cs = append(cs, candidate{Pair: Pair{ID: id, Query: q, Doc: t}, version: d.version, group: d.group})
	}
	cs = oneWorkEach(cs, sum)
	kept := cs[:0]
	for _, c := range cs {
		if utf8.RuneCountInString(c.Doc) < o.MinChars {
			sum.Skipped[SkipShort]++
			continue
		}
		kept = append(kept, c)
	}
	return pairsOf(distinctTexts(kept, sum)), nil
}
