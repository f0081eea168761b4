// Package build derives retrieval benchmarks, in the BEIR layout that `reignpipe eval`
// and the trainer read, from real text whose relevance is known by construction: each kept
// document gives one query and one corpus document, and the query's only relevant document
// (score 2) is its own counterpart.
//
// Constructions:
//
//   - patent-claims (USPTO source): for every grant or application that has both a claims
//     section and a description section, the query is its claims text and the corpus
//     document is its description text (uspto.Text with one section each: claims joined by
//     "\n", description paragraphs joined by "\n"). The source is read twice, once per
//     section, and the two passes are joined by document id; a patent with only one of the
//     two is skipped ("no-description", "no-claims"). With MinChars > 0 a patent whose
//     description is shorter than MinChars characters is skipped ("short").
//   - halves (wikipedia, jsonl, uspto or textdir source): the document text, with leading and
//     trailing whitespace removed, is cut in two; the query is the first part and the corpus
//     document the second, each with surrounding whitespace removed. Lengths and positions
//     are counted in characters (Unicode code points). With n characters and mid = n/2, the
//     cut is the paragraph boundary ("\n\n", at the index of its first newline) nearest mid
//     among those at an index i with n <= 4i <= 3n (the middle half of the text); when there
//     is none, the whitespace character nearest mid in that same range; ties go to the
//     earlier index. The range keeps a lone early or late blank line from making a lopsided
//     pair. A document shorter than MinChars characters is skipped ("short"), as is one with
//     no cut in the range ("no-cut").
//
// Both constructions then apply, in this order:
//
//   - ids: a document whose id cannot round-trip through a qrels row (empty, holding a tab or
//     newline, or with leading or trailing whitespace) is skipped ("bad-id"); of several
//     documents with one id the one with the greatest Version is kept, the later read on a
//     tie, as the pipeline's sinks do ("duplicate-id" counts the others).
//   - one publication per work: of USPTO documents sharing country + application number (an
//     application and its grant) only the one with the greatest Version (publication date +
//     kind, so the latest) is kept ("same-application"): the other would be a near-copy of the
//     relevant document in the corpus, graded not relevant.
//   - the length and cut rules above.
//   - distinct texts: in reading order, a pair whose query text, or else whose corpus text,
//     equals that of a pair already kept is skipped ("duplicate-query-text",
//     "duplicate-doc-text"): identical texts rank identically, so no system could get every
//     one of them right. Design patents' templated claims ("The ornamental design for a
//     chair, as shown and described.") are the common case.
//
// Ids: corpus id = document id, query id = document id + "#q": eval drops hits whose corpus
// id equals the query id, so the two must differ (Build fails when some document id + "#q" is
// itself a document id). Titles are written empty: some evaluators prepend the title to
// the text, and a title would leak the pairing (a Wikipedia article's first half usually
// opens with its subject).
//
// Split: the kept document ids, sorted bytewise, are shuffled by math/rand/v2
// rand.New(rand.NewPCG(Seed, 0)).Shuffle; the first floor(3n/5) are train, the next
// floor(n/5) val, the rest test (qrels/train.tsv, qrels/val.tsv, qrels/test.tsv, each with
// the header "query-id\tcorpus-id\tscore"). Sorting first makes the split depend only on the
// set of ids and the seed, not on reading order. corpus.jsonl holds every corpus document and
// queries.jsonl every query, of all splits, in reading order: a split's queries are ranked
// against the whole corpus. benchdata.json records the options and every count. Output is
// deterministic: the same input and options give byte-identical files. Everything is held in
// memory until written, each file atomically.
package benchdata

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Kinds of benchmark.
const (
	KindPatentClaims = "patent-claims"
	KindHalves       = "halves"
)

// Sources a benchmark can be read from.
const (
	SourceWikipedia = "wikipedia"
	SourceJSONL     = "jsonl"
	SourceUSPTO     = "uspto"
	SourceTextDir   = "textdir"
)

// Kinds and Sources list the accepted values, for flag help and errors.
var (
	Kinds   = []string{KindPatentClaims, KindHalves}
	Sources = []string{SourceWikipedia, SourceJSONL, SourceUSPTO, SourceTextDir}
)

// QuerySuffix turns a document id into its query id.
const QuerySuffix = "#q"

// Relevance is the qrels score of a query's counterpart.
const Relevance = 2

// Split fractions, in fifths so the arithmetic is exact.
const (
	trainFifths = 3
	valFifths   = 1
)

// Generator names the shuffle in benchdata.json, so a reader can reproduce the split.
const Generator = "math/rand/v2 rand.New(rand.NewPCG(seed, 0)).Shuffle over ids sorted bytewise; first floor(3n/5) train, next floor(n/5) val, rest test"

// Options configures Build.
type Options struct {
	Kind   string // KindPatentClaims or KindHalves
	Source string // one of Sources; patent-claims needs SourceUSPTO
	// Input is a wikipedia dump file; a JSONL or USPTO file, directory or glob (files read in
	// name order); or, for textdir, a directory whose *.rst and *.txt files are read.
	Input string
	Out   string // output directory; created if missing, the files written are replaced
	Seed  uint64
	// MinChars skips documents shorter than this many characters: the whole text for halves,
	// the description for patent-claims.
	MinChars int
}

// Validate checks the options without touching the file system.
func (o *Options) Validate() error {
	if !slices.Contains(Kinds, o.Kind) {
		return fmt.Errorf("benchdata: kind %q: want one of %s", o.Kind, strings.Join(Kinds, ", "))
	}
	if !slices.Contains(Sources, o.Source) {
		return fmt.Errorf("benchdata: source %q: want one of %s", o.Source, strings.Join(Sources, ", "))
	}
	if o.Kind == KindPatentClaims && o.Source != SourceUSPTO {
		return fmt.Errorf("benchdata: kind %s needs source %s, got %q", KindPatentClaims, SourceUSPTO, o.Source)
	}
	if o.Input == "" {
		return errors.New("benchdata: input path is required")
	}
	if o.Out == "" {
		return errors.New("benchdata: output directory is required")
	}
	if o.MinChars < 0 {
		return fmt.Errorf("benchdata: min-chars %d must not be negative", o.MinChars)
	}
	return nil
}

// Pass is what one read of the source saw.
type Pass struct {
	Sections []string `json:"sections,omitempty"` // USPTO sections read in this pass
	Read     int64    `json:"read"`               // documents the source handed out
	// Skipped is what the source itself skipped (redirects, sequence listings, empty text...)
	// plus "bad-input" for inputs it could not turn into documents.
	Skipped map[string]int64 `json:"skipped"`
}

// SplitCounts are one split's sizes; each query has exactly one qrels row.
type SplitCounts struct {
	Queries int `json:"queries"`
}

// Summary is benchdata.json. It holds no times or host names so that reruns are identical.
type Summary struct {
	Kind         string                 `json:"kind"`
	Source       string                 `json:"source"`
	Input        string                 `json:"input"`
	Seed         uint64                 `json:"seed"`
	Generator    string                 `json:"generator"`
	MinChars     int                    `json:"min_chars,omitempty"`
	Construction string                 `json:"construction"`
	Passes       []Pass                 `json:"passes"`
	Candidates   int                    `json:"candidates"`     // distinct documents considered
	Docs         int                    `json:"docs"`           // kept: one query and one corpus doc each
	Skipped      map[string]int         `json:"skipped"`        // candidates not kept, by reason
	Cuts         map[string]int         `json:"cuts,omitempty"` // halves: kept documents by kind of cut
	Splits       map[string]SplitCounts `json:"splits"`
	Corpus       int                    `json:"corpus"`
	Queries      int                    `json:"queries"`
}

// Pair is one kept document: the query text and its relevant corpus text.
type Pair struct {
	ID, Query, Doc string
}

// Build reads the source, builds the pairs, splits them and writes the benchmark to o.Out.
func Build(ctx context.Context, o Options) (*Summary, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	sum := &Summary{Kind: o.Kind, Source: o.Source, Input: o.Input, Seed: o.Seed, Generator: Generator, MinChars: o.MinChars, Skipped: map[string]int{}}
	if o.Kind == KindHalves {
		sum.Cuts = map[string]int{}
	}
	var pairs []Pair
	var err error
	switch o.Kind {
	case KindPatentClaims:
		sum.Construction = "query = claims text, relevant corpus doc (score 2) = description text of the same patent; corpus = every description"
		pairs, err = patentPairs(ctx, o, sum)
	case KindHalves:
		sum.Construction = "query = first half, relevant corpus doc (score 2) = second half of the same document, cut at the paragraph boundary nearest the middle within the middle half (else the nearest whitespace there); corpus = every second half"
		pairs, err = halvesPairs(ctx, o, sum)
	}
	if err != nil {
		return nil, err
	}
	if len(pairs) == 0 {
		return nil, fmt.Errorf("benchdata: no document of %s gave a pair (skipped: %v)", o.Input, sum.Skipped)
	}
	if err := write(o.Out, pairs, o.Seed, sum); err != nil {
		return nil, err
	}
	return sum, nil
}
