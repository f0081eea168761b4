package dataset

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
)

// DAPFAMViews maps each text view to the fields it concatenates, as the DAPFAM paper and
// MTEB's DAPFAM tasks build them: title + abstract, + claims, + description (FullText, the
// long-document view the REIGN paper uses).
var DAPFAMViews = map[string][]string{
	"title-abstract":        {"title_en", "abstract_en"},
	"title-abstract-claims": {"title_en", "abstract_en", "claims_text"},
	"fulltext":              {"title_en", "abstract_en", "claims_text", "description_en"},
}

// DAPFAM split fractions: query-disjoint, about 70/15/15 as in the REIGN paper's appendix I.
const dapfamTestFrac, dapfamValFrac = 0.15, 0.15

// openDAPFAM reads corpus, queries and qrels_all (the Hub repository's three Parquet files, or
// directories of shards). Splits:
//
//	all, all_in, all_out         every query; all keeps the provided non-cited negatives as
//	                             score 0, all_in / all_out are the positives of that IPC domain
//	train, val, test             query-disjoint (stratified by quartile of positive count),
//	                             each query with all its judgements, negatives included
//	test_in, test_out            test's IN / OUT positives
//
// Positives keep the dataset's score (1); relevance is binary, so nDCG is the same as with 2.
func openDAPFAM(dir, view string, seed uint64) (*Source, error) {
	if view == "" {
		view = "fulltext"
	}
	fields, ok := DAPFAMViews[view]
	if !ok {
		return nil, fmt.Errorf("unknown DAPFAM view %q (want fulltext, title-abstract or title-abstract-claims)", view)
	}
	s := &Source{Qrels: map[string]beir.Qrels{}, Convention: Convention{K: 100}}
	cf, err := locate(dir, "corpus")
	if err != nil {
		return nil, err
	}
	err = readFamilies(cf, "relevant_id", fields, func(id, text string) {
		if text == "" {
			s.skip("document-empty-text")
			return
		}
		s.Corpus = append(s.Corpus, beir.Doc{ID: id, Text: text})
	})
	if err != nil {
		return nil, err
	}
	qf, err := locate(dir, "queries")
	if err != nil {
		return nil, err
	}
	err = readFamilies(qf, "query_id", fields, func(id, text string) {
		if text == "" {
			s.skip("query-empty-text")
			return
		}
		s.Queries = append(s.Queries, beir.Query{ID: id, Text: text})
	})
	if err != nil {
		return nil, err
	}
	if err := checkUnique(s.Corpus, s.Queries); err != nil {
		return nil, err
	}
	rf, err := locate(dir, "qrels_all")
	if err != nil {
		if rf, err = locate(dir, "relations"); err != nil {
			return nil, fmt.Errorf("no qrels_all.parquet (DAPFAM's relations config)")
		}
	}
	if err := s.dapfamSplits(rf, seed); err != nil {
		return nil, err
	}
	return s, nil
}

// readFamilies reads id + the view's fields of each family record; a list-valued field (claims
// stored one per item) is joined by newlines, the fields by blank lines.
func readFamilies(files []string, idCol string, fields []string, fn func(id, text string)) error {
	for _, f := range files {
		err := readRows(f, append([]string{idCol}, fields...), func(rw row) error {
			id, ok, err := str(rw, idCol)
			if err != nil {
				return err
			}
			if !ok || id == "" {
				return fmt.Errorf("record without %s", idCol)
			}
			var parts []string
			for _, c := range fields {
				t, err := fieldText(rw, c)
				if err != nil {
					return fmt.Errorf("%s %s: %w", idCol, id, err)
				}
				if t = strings.TrimSpace(t); t != "" {
					parts = append(parts, t)
				}
			}
			fn(id, strings.Join(parts, "\n\n"))
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func fieldText(rw row, col string) (string, error) {
	if _, isList := rw[col].([]any); isList {
		items, err := strs(rw, col)
		return strings.Join(items, "\n"), err
	}
	t, _, err := str(rw, col)
	return t, err
}

type relation struct {
	query, doc, domain string
	score              int
}

func (s *Source) dapfamSplits(files []string, seed uint64) error {
	var rels []relation
	positives := map[string]int{}
	for _, f := range files {
		err := readRows(f, []string{"query_id", "relevant_id", "relevance_score", "domain_rel"}, func(rw row) error {
			q, ok1, err := str(rw, "query_id")
			if err != nil {
				return err
			}
			d, ok2, err := str(rw, "relevant_id")
			if err != nil {
				return err
			}
			if !ok1 || !ok2 {
				return fmt.Errorf("relation without query_id or relevant_id")
			}
			score, err := grade(rw, "relevance_score")
			if err != nil {
				return err
			}
			dom, _, err := str(rw, "domain_rel")
			if err != nil {
				return err
			}
			rels = append(rels, relation{query: q, doc: d, domain: strings.ToUpper(dom), score: score})
			if score > 0 {
				positives[q]++
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(positives) == 0 {
		return fmt.Errorf("qrels_all holds no positive relation")
	}
	split := dapfamAssign(positives, seed)
	for _, name := range []string{"all", "all_in", "all_out", "train", "val", "test", "test_in", "test_out"} {
		s.Qrels[name] = beir.Qrels{}
	}
	add := func(name string, r relation) error { return s.Qrels[name].Add(r.query, r.doc, r.score) }
	for _, r := range rels {
		sp, hasPos := split[r.query]
		if err := add("all", r); err != nil {
			return err
		}
		if hasPos {
			if err := add(sp, r); err != nil {
				return err
			}
		}
		if r.score <= 0 || (r.domain != "IN" && r.domain != "OUT") {
			continue
		}
		dom := strings.ToLower(r.domain)
		if err := add("all_"+dom, r); err != nil {
			return err
		}
		if sp == "test" {
			if err := add("test_"+dom, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// dapfamAssign splits the queries that have a positive: sorted by (positive count, id) and cut
// into four equal quartile groups; within each group, ids sorted then shuffled with
// math/rand/v2 PCG(seed, 0) (one generator, groups in order), the first round(0.15 m) are
// test, the next round(0.15 m) val, the rest train.
func dapfamAssign(positives map[string]int, seed uint64) map[string]string {
	ids := make([]string, 0, len(positives))
	for q := range positives {
		ids = append(ids, q)
	}
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(cmp.Compare(positives[a], positives[b]), strings.Compare(a, b))
	})
	rng := rand.New(rand.NewPCG(seed, 0))
	out := make(map[string]string, len(ids))
	n := len(ids)
	for g := 0; g < 4; g++ {
		group := slices.Clone(ids[g*n/4 : (g+1)*n/4])
		slices.Sort(group)
		rng.Shuffle(len(group), func(i, j int) { group[i], group[j] = group[j], group[i] })
		m := float64(len(group))
		nTest, nVal := int(math.Round(dapfamTestFrac*m)), int(math.Round(dapfamValFrac*m))
		for i, q := range group {
			switch {
			case i < nTest:
				out[q] = "test"
			case i < nTest+nVal:
				out[q] = "val"
			default:
				out[q] = "train"
			}
		}
	}
	return out
}
