package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/reignpipe/reignpipe/pipelines/quality/benchdata"
)

// cmdBenchdata writes a BEIR-layout benchmark derived from real documents (see package
// pipelines/quality/benchdata for the constructions and the split).
func cmdBenchdata(ctx context.Context, args []string) error {
	fs := newFlagSet("benchdata", args)
	kind := fs.String("kind", "", "construction: "+strings.Join(benchdata.Kinds, " or "))
	source := fs.String("source", "", "input type: "+strings.Join(benchdata.Sources, ", ")+" (patent-claims: uspto, the default there)")
	input := fs.String("input", "", "wikipedia dump; JSONL or USPTO file, directory or glob; textdir: directory of *.rst/*.txt")
	out := fs.String("out", "", "output directory (corpus.jsonl, queries.jsonl, qrels/{train,val,test}.tsv, benchdata.json)")
	seed := fs.Uint64("seed", 42, "seed of the train/val/test shuffle")
	minChars := fs.Int("min-chars", 2000, "skip documents shorter than this many characters (halves: the whole text; patent-claims: the description, default 0 there)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError("benchdata", fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *kind == benchdata.KindPatentClaims {
		if *source == "" {
			*source = benchdata.SourceUSPTO
		}
		// Every grant with claims and a description is a pair unless asked otherwise.
		if !set["min-chars"] {
			*minChars = 0
		}
	}
	for _, req := range []struct{ name, val string }{{"kind", *kind}, {"source", *source}, {"input", *input}, {"out", *out}} {
		if req.val == "" {
			return usageError("benchdata", "--"+req.name+" is required")
		}
	}
	opts := benchdata.Options{Kind: *kind, Source: *source, Input: *input, Out: *out, Seed: *seed, MinChars: *minChars}
	if err := opts.Validate(); err != nil {
		return err
	}
	start := time.Now()
	sum, err := benchdata.Build(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "%s from %s (%s): %d documents considered, %d kept, skipped %v\n",
		sum.Kind, sum.Input, sum.Source, sum.Candidates, sum.Docs, sum.Skipped)
	for _, s := range benchdata.SplitNames {
		fmt.Fprintf(os.Stdout, "  %-5s %d queries\n", s, sum.Splits[s].Queries)
	}
	fmt.Fprintf(os.Stdout, "wrote %s in %s\n", *out, time.Since(start).Round(time.Millisecond))
	return nil
}
