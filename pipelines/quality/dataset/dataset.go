// Package dataset reads retrieval benchmarks as their publishers ship them, so `reignpipe eval`
// and `reignpipe importdata` take the files a user downloaded without a conversion script:
//
//   - beir: the BEIR / MTEB three-config layout (corpus, queries, qrels per split) as JSONL +
//     TSV, as Hugging Face Parquet (a config directory of shards, or the Hub's parquet export)
//     or as a `datasets.save_to_disk` directory (Arrow IPC). GoodWiki-Long-Synthetic ships so.
//   - loco: LoCoV1 (hazyresearch/LoCoV1-Documents and -Queries): documents {pid, passage,
//     dataset}, queries {qid, query, answer_pids, dataset}; twelve subtasks, binary relevance.
//   - dapfam: DAPFAM (datalyes/DAPFAM_patent): corpus, queries and qrels_all Parquet files of
//     patent families, with a text view built from their fields.
//
// Every reader returns the same Source; the rules for each layout are in ops/DATASETS.md.
package dataset

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
)

// Formats a Source can be read from.
const (
	FormatAuto   = "auto"
	FormatBEIR   = "beir"
	FormatLoCo   = "loco"
	FormatDAPFAM = "dapfam"
)

// Options selects how a directory is read.
type Options struct {
	// Format is FormatAuto (default: detected from the files), FormatBEIR, FormatLoCo or
	// FormatDAPFAM.
	Format string
	// Subset is the LoCo subtask (one of LoCoSubtasks); empty reads all of them, which
	// Source.Subset then separates.
	Subset string
	// View is the DAPFAM text view: "fulltext" (default), "title-abstract" or
	// "title-abstract-claims".
	View string
	// Seed drives DAPFAM's query-disjoint train/val/test split (default 42).
	Seed uint64
}

// Source is a benchmark in memory: every corpus document and query, and the qrels of each
// split. Convention holds the benchmark's own evaluation rules.
type Source struct {
	Format  string
	Corpus  []beir.Doc
	Queries []beir.Query
	Qrels   map[string]beir.Qrels // split → judgements
	// Skipped counts records left out, by reason ("null-text", ...); none is dropped silently.
	Skipped map[string]int
	// Convention: the cutoff and self-match rule the benchmark reports with.
	Convention Convention
	// subtask labels corpus and query ids with their LoCo subtask.
	docTask, queryTask map[string]string
}

// Convention is how a benchmark is scored in its paper (REFERENCE §7).
type Convention struct {
	K        int  // nDCG cutoff: 10, DAPFAM 100
	KeepSelf bool // LoCo keeps hits whose id equals the query id
}

// Open reads the benchmark in dir.
func Open(dir string, o Options) (*Source, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("dataset: %s is not a directory", dir)
	}
	if o.Seed == 0 {
		o.Seed = 42
	}
	format := o.Format
	if format == "" || format == FormatAuto {
		if format, err = Detect(dir); err != nil {
			return nil, err
		}
	}
	if o.Subset != "" && format != FormatLoCo {
		return nil, fmt.Errorf("dataset: --subset applies to LoCo only (this is %s)", format)
	}
	if o.View != "" && format != FormatDAPFAM {
		return nil, fmt.Errorf("dataset: --view applies to DAPFAM only (this is %s)", format)
	}
	var s *Source
	switch format {
	case FormatBEIR:
		s, err = openBEIR(dir)
	case FormatLoCo:
		s, err = openLoCo(dir, o.Subset)
	case FormatDAPFAM:
		s, err = openDAPFAM(dir, o.View, o.Seed)
	default:
		return nil, fmt.Errorf("dataset: unknown format %q (want auto, beir, loco or dapfam)", format)
	}
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", dir, err)
	}
	s.Format = format
	return s, nil
}

// Detect names the layout of dir: dapfam when it holds qrels_all files, loco when it holds
// LoCo's documents/<subtask>_test files, beir otherwise.
func Detect(dir string) (string, error) {
	files, err := tableFiles(dir)
	if err != nil {
		return "", fmt.Errorf("dataset: %w", err)
	}
	for _, f := range files {
		base := strings.ToLower(f[strings.LastIndexAny(f, `/\`)+1:])
		if strings.HasPrefix(base, "qrels_all") {
			return FormatDAPFAM, nil
		}
		for _, t := range LoCoSubtasks {
			if strings.HasPrefix(base, strings.ToLower(t)+"_test.") {
				return FormatLoCo, nil
			}
		}
	}
	return FormatBEIR, nil
}

// Splits lists the qrels splits, sorted.
func (s *Source) Splits() []string { return slices.Sorted(maps.Keys(s.Qrels)) }

// Dataset returns one split in the form the evaluator takes: the whole corpus and every query,
// with that split's judgements.
func (s *Source) Dataset(split string) (*beir.Dataset, error) {
	q, ok := s.Qrels[split]
	if !ok {
		return nil, fmt.Errorf("dataset: no split %q (have %s)", split, strings.Join(s.Splits(), ", "))
	}
	return &beir.Dataset{Corpus: s.Corpus, Queries: s.Queries, Qrels: q}, nil
}

func (s *Source) skip(reason string) {
	if s.Skipped == nil {
		s.Skipped = map[string]int{}
	}
	s.Skipped[reason]++
}

// checkUnique rejects repeated ids: qrels and self-match removal look documents up by id.
func checkUnique(corpus []beir.Doc, queries []beir.Query) error {
	seen := make(map[string]bool, len(corpus))
	for _, d := range corpus {
		if seen[d.ID] {
			return fmt.Errorf("duplicate corpus id %q", d.ID)
		}
		seen[d.ID] = true
	}
	clear(seen)
	for _, q := range queries {
		if seen[q.ID] {
			return fmt.Errorf("duplicate query id %q", q.ID)
		}
		seen[q.ID] = true
	}
	return nil
}
