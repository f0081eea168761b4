package build

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
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

type outFile struct {
	name string
	data []byte
}

type corpusRow struct {
	ID    string `json:"_id"`
	Title string `json:"title"`
	Text  string `json:"text"`
}

type queryRow struct {
	ID   string `json:"_id"`
	Text string `json:"text"`
}

// write splits the pairs and writes the BEIR files and the summary, each atomically. Rows
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

	var corpus, queries bytes.Buffer
	ce, qe := json.NewEncoder(&corpus), json.NewEncoder(&queries)
	ce.SetEscapeHTML(false)
	qe.SetEscapeHTML(false)
	qrels := map[string]*bytes.Buffer{}
	sum.Splits = map[string]SplitCounts{}
	for _, s := range SplitNames {
		qrels[s] = bytes.NewBufferString("query-id\tcorpus-id\tscore\n")
		sum.Splits[s] = SplitCounts{}
	}
	for _, p := range pairs {
		if err := ce.Encode(corpusRow{ID: p.ID, Text: p.Doc}); err != nil {
			return err
		}
		if err := qe.Encode(queryRow{ID: p.ID + QuerySuffix, Text: p.Query}); err != nil {
			return err
		}
		s := split[p.ID]
		fmt.Fprintf(qrels[s], "%s%s\t%s\t%d\n", p.ID, QuerySuffix, p.ID, Relevance)
		c := sum.Splits[s]
		c.Queries++
		sum.Splits[s] = c
	}
	sum.Docs, sum.Corpus, sum.Queries = len(pairs), len(pairs), len(pairs)

	files := []outFile{{"corpus.jsonl", corpus.Bytes()}, {"queries.jsonl", queries.Bytes()}}
	for _, s := range SplitNames {
		files = append(files, outFile{filepath.Join("qrels", s+".tsv"), qrels[s].Bytes()})
	}
	js, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	// The summary is removed first and written last, so its presence says that the files
	// beside it are complete and belong to it, also when an earlier build is overwritten.
	if err := os.Remove(filepath.Join(out, SummaryFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("benchdata: %w", err)
	}
	files = append(files, outFile{SummaryFile, append(js, '\n')})
	for _, f := range files {
		if err := atomicfile.Write(filepath.Join(out, f.name), f.data); err != nil {
			return fmt.Errorf("benchdata: %w", err)
		}
	}
	return nil
}
