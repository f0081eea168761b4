package benchdata

import (
	"context"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Where Halve cut, the keys of Summary.Cuts.
const (
	CutParagraph  = "paragraph"
	CutWhitespace = "whitespace"
)

// halvesPairs reads the source once and cuts every document in two.
func halvesPairs(ctx context.Context, o Options, sum *Summary) ([]Pair, error) {
	set, pass, err := readAll(ctx, o.Source, o.Input, nil)
	if err != nil {
		return nil, err
	}
	sum.Passes = append(sum.Passes, pass)
	sum.Candidates = len(set.order)
	if set.dups > 0 {
		sum.Skipped[SkipDuplicateID] = set.dups
	}
	var cs []candidate
	for _, id := range set.order {
		d := set.byID[id]
		if !validID(id) {
			sum.Skipped[SkipBadID]++
			continue
		}
		cs = append(cs, candidate{Pair: Pair{ID: id, Doc: d.text}, version: d.version, group: d.group})
	}
	cs = oneWorkEach(cs, sum)
	kept := cs[:0]
	for _, c := range cs {
		text := strings.TrimSpace(c.Doc)
		if utf8.RuneCountInString(text) < o.MinChars {
			sum.Skipped[SkipShort]++
			continue
		}
		q, d, at := Halve(text)
		if at == "" {
			sum.Skipped[SkipNoCut]++
			continue
		}
		c.Query, c.Doc, c.cut = q, d, at
		kept = append(kept, c)
	}
	kept = distinctTexts(kept, sum)
	for _, c := range kept {
		sum.Cuts[c.cut]++
	}
	return pairsOf(kept), nil
}

// Halve cuts text as the package documentation describes: at the paragraph boundary nearest
// the middle within the middle half of the text, else at the whitespace nearest the middle
// within it. Both parts come back without surrounding whitespace; at says which kind of cut
// was made, "" when there is none that leaves both parts non-empty.
func Halve(text string) (first, second, at string) {
	text = strings.TrimSpace(text)
	n := utf8.RuneCountInString(text)
	mid := n / 2
	inRange := func(i int) bool { return 4*i >= n && 4*i <= 3*n }
	bestPara, bestSpace := -1, -1 // byte offsets
	paraDist, spaceDist := n+1, n+1
	i := 0 // character index of the rune at byte b
	for b, r := range text {
		if inRange(i) {
			d := abs(i - mid)
			if r == '\n' && strings.HasPrefix(text[b+1:], "\n") && d < paraDist {
				bestPara, paraDist = b, d
			}
			if unicode.IsSpace(r) && d < spaceDist {
				bestSpace, spaceDist = b, d
			}
		}
		i++
	}
	cut, at := bestPara, CutParagraph
	if cut < 0 {
		cut, at = bestSpace, CutWhitespace
	}
	if cut < 0 {
		return "", "", ""
	}
	first, second = strings.TrimSpace(text[:cut]), strings.TrimSpace(text[cut:])
	if first == "" || second == "" {
		return "", "", ""
	}
	return first, second, at
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
