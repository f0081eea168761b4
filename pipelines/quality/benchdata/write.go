package benchdata

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
)

// Split names, in the order their qrels files are written.
var SplitNames = []string{"train", "val", "test"}

// SummaryFile is the counts file written beside the BEIR files.
const SummaryFile = "benchdata.json"

// AssignSplits maps each id to "train", "val" or "test" as the package documentation
// describes. ids must be distinct; their order does not matter.
func AssignSplits(ids []string, seed uint64) map[string]string {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	rng := rand.New(rand.NewPCG(seed, 0))
	rng.Shuffle(len(sorted), func(i, j int) { sorted[i], sorted[j] = sorted[j], sorted[i] })
	n := len(sorted)
	nTrain, nVal := n*trainFifths/5, n*valFifths/5
	out := make(map[string]string, n)
	for i, id := range sorted {
		switch {
		case i < nTrain:
			out[id] = "train"
		case i < nTrain+nVal:
			out[id] = "val"
		default:
			out[id] = "test"
		}
	}
	return out
}

// write splits the pairs and writes the BEIR files and the summary (beir.WriteFiles). Rows
// keep the pairs' order (the source's reading order), so output depends only on the input.
func write(out string, pairs []Pair, seed uint64, sum *Summary) error {
	ids := make([]string, len(pairs))
	isCorpus := make(map[string]bool, len(pairs))
	for i, p := range pairs {
		ids[i] = p.ID
		isCorpus[p.ID] = true
	}
	for _, id := range ids {
		if isCorpus[id+QuerySuffix] {
			return fmt.Errorf("benchdata: query id %q is also a corpus id; eval would drop that document as a self-match", id+QuerySuffix)
		}
	}
	split := AssignSplits(ids, seed)

	f := beir.Files{Splits: SplitNames, Qrels: map[string][]beir.Judgement{}}
	sum.Splits = map[string]SplitCounts{}
	for _, s := range SplitNames {
		sum.Splits[s] = SplitCounts{}
	}
	for _, p := range pairs {
		f.Corpus = append(f.Corpus, beir.Doc{ID: p.ID, Text: p.Doc})
		f.Queries = append(f.Queries, beir.Query{ID: p.ID + QuerySuffix, Text: p.Query})
		s := split[p.ID]
		f.Qrels[s] = append(f.Qrels[s], beir.Judgement{Query: p.ID + QuerySuffix, Doc: p.ID, Score: Relevance})
		c := sum.Splits[s]
		c.Queries++
		sum.Splits[s] = c
	}
	sum.Docs, sum.Corpus, sum.Queries = len(pairs), len(pairs), len(pairs)
	if err := beir.WriteFiles(out, f, SummaryFile, sum); err != nil {
		return fmt.Errorf("benchdata: %w", err)
	}
	return nil
}
