package main

import (
	"fmt"
	"os"

	"github.com/reignpipe/reignpipe/pipelines/quality/dataset"
)

// cmdImportdata rewrites a published benchmark (any layout pipelines/quality/dataset reads) in the plain
// BEIR layout that `reignpipe train` and other BEIR tools take.
func cmdImportdata(args []string) error {
	fs := newFlagSet("importdata", args)
	data := fs.String("data", "", "benchmark directory as published (BEIR/MTEB JSONL, Parquet or save_to_disk; LoCoV1; DAPFAM)")
	out := fs.String("out", "", "output directory: corpus.jsonl, queries.jsonl, qrels/<split>.tsv, import.json")
	format := fs.String("format", dataset.FormatAuto, "layout: auto, beir, loco or dapfam")
	subset := fs.String("subset", "", "LoCo subtask (default: all subtasks in one corpus)")
	view := fs.String("view", "", "DAPFAM text view: fulltext (default), title-abstract, title-abstract-claims")
	seed := fs.Uint64("seed", 42, "seed of DAPFAM's query-disjoint train/val/test split")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *data == "" || *out == "" {
		return usageError("importdata", "--data and --out are required")
	}
	o := dataset.Options{Format: *format, Subset: *subset, View: *view, Seed: *seed}
	src, err := dataset.Open(*data, o)
	if err != nil {
		return err
	}
	if err := dataset.WriteBEIR(*out, src, dataset.ImportSummary{Input: *data, Options: o}); err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "%s from %s: %d documents, %d queries, splits %v, skipped %v\nwrote %s\n",
		src.Format, *data, len(src.Corpus), len(src.Queries), src.Splits(), src.Skipped, *out)
	return nil
}
