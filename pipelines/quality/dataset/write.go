package dataset

import (
	"maps"
	"slices"

	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
)

// ImportFile is the summary WriteBEIR writes beside the BEIR files, last.
const ImportFile = "import.json"

// ImportSummary says what was imported.
type ImportSummary struct {
	Input      string         `json:"input"`
	Format     string         `json:"format"`
	Options    Options        `json:"options"`
	Corpus     int            `json:"corpus"`
	Queries    int            `json:"queries"`
	Splits     map[string]int `json:"splits"` // split → queries with at least one judgement
	Skipped    map[string]int `json:"skipped,omitempty"`
	Convention Convention     `json:"convention"`
}

// WriteBEIR writes s in the plain BEIR layout that `reignpipe train` and any BEIR tool read,
// with import.json as the summary (beir.WriteFiles). Qrels rows are sorted by query id, then corpus
// id, so the files depend only on the judgements.
func WriteBEIR(out string, s *Source, sum ImportSummary) error {
	sum.Format, sum.Corpus, sum.Queries, sum.Skipped, sum.Convention = s.Format, len(s.Corpus), len(s.Queries), s.Skipped, s.Convention
	sum.Splits = map[string]int{}
	f := beir.Files{Corpus: s.Corpus, Queries: s.Queries, Splits: s.Splits(), Qrels: map[string][]beir.Judgement{}}
	for _, split := range f.Splits {
		qrels := s.Qrels[split]
		sum.Splits[split] = len(qrels)
		for _, qid := range slices.Sorted(maps.Keys(qrels)) {
			row := qrels[qid]
			for _, did := range slices.Sorted(maps.Keys(row)) {
				f.Qrels[split] = append(f.Qrels[split], beir.Judgement{Query: qid, Doc: did, Score: row[did]})
			}
		}
	}
	return beir.WriteFiles(out, f, ImportFile, sum)
}
