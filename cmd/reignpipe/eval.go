package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/pipelines/quality/dataset"
	"github.com/reignpipe/reignpipe/pipelines/quality/eval"
)

// encodeInProcess is how eval and train run a pipeline over a benchmark's documents: the
// embedded runner, from scratch, reading them instead of the configured source.
func encodeInProcess(ctx context.Context, cfg *pipelines.Config, src connectors.Source) (engine.Summary, error) {
	sum, err := runFrom(ctx, cfg, src)
	if sum == nil {
		return engine.Summary{}, err
	}
	return *sum, err
}

// cmdEval scores a pipeline on a benchmark (pipelines/quality/eval): BM25, the GN truncated to
// its first window, the GN mean-pool and, with a checkpoint, REIGN.
func cmdEval(ctx context.Context, args []string) error {
	fs := newFlagSet("eval", args)
	data := fs.String("data", "", "benchmark directory: BEIR/MTEB (JSONL, Parquet or save_to_disk), LoCoV1 or DAPFAM files")
	format := fs.String("format", dataset.FormatAuto, "layout: auto, beir, loco or dapfam")
	subset := fs.String("subset", "", "LoCo subtask, or all: every subtask and their macro average")
	view := fs.String("view", "", "DAPFAM text view: fulltext (default), title-abstract, title-abstract-claims")
	split := fs.String("split", "test", "qrels split")
	k := fs.Int("k", 0, "cutoff (default: the benchmark's own, 100 for DAPFAM, else 10)")
	keepSelf := fs.Bool("keep-self", false, "do not drop hits whose id equals the query id (default: the benchmark's own; LoCo keeps them)")
	out := fs.String("out", "out/eval", "where vectors, per-query results and the summary go")
	checkpoint := fs.String("checkpoint", "", "REIGN checkpoint (else aggregate.checkpoint when aggregate.type is reign)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *data == "" || *k < 0 {
		return usageError("eval", "--data and one pipeline file are required")
	}
	keepSet := false
	fs.Visit(func(f *flag.Flag) { keepSet = keepSet || f.Name == "keep-self" })
	cfg, err := pipelines.Load(pos[0])
	if err != nil {
		return err
	}
	if *checkpoint != "" {
		cfg.Aggregate = components.WithCheckpoint(cfg.Aggregate, *checkpoint)
	}
	o := dataset.Options{Format: *format, Subset: *subset, View: *view}
	if *subset == "all" {
		o.Subset = ""
	}
	src, err := dataset.Open(*data, o)
	if err != nil {
		return err
	}
	if src.Format == dataset.FormatLoCo && *subset == "" {
		return fmt.Errorf("eval: LoCo is scored per subtask: give --subset NAME (one of %s) or --subset all", strings.Join(src.Subtasks(), ", "))
	}
	eo := eval.Options{Split: *split, K: *k, DropSelf: !src.Convention.KeepSelf, Out: *out, Encode: encodeInProcess}
	if eo.K == 0 {
		eo.K = src.Convention.K
	}
	if keepSet {
		eo.DropSelf = !*keepSelf
	}
	if *subset == "all" {
		eo.OnSubtask = func(sum *eval.Summary) {
			fmt.Printf("== %s (%d queries, %d documents)\n", sum.Subset, sum.Queries, sum.Corpus)
			printSummary(sum)
		}
		ms, err := eval.EvaluateSubtasks(ctx, cfg, src, *data, eo)
		if err != nil {
			return err
		}
		fmt.Printf("== macro average over %d subtasks\n%-14s %8s %8s %8s %8s\n", len(ms.Subtasks), "system", fmt.Sprintf("nDCG@%d", ms.K), "P", "R", "MAP")
		for _, name := range ms.Systems {
			m := ms.Macro[name]
			fmt.Printf("%-14s %8.4f %8.4f %8.4f %8.4f\n", name, m.NDCG, m.P, m.R, m.MAP)
		}
		return nil
	}
	sum, err := eval.Evaluate(ctx, cfg, src, *data, eo)
	if err != nil {
		return err
	}
	printSummary(sum)
	return nil
}

func printSummary(sum *eval.Summary) {
	fmt.Printf("%-14s %8s %8s %8s %8s   %s\n", "system", "nDCG@"+fmt.Sprint(sum.K), "P", "R", "MAP", "vs gn-meanpool (diff [95% CI], p)")
	for _, s := range sum.Systems {
		line := fmt.Sprintf("%-14s %8.4f %8.4f %8.4f %8.4f", s.System, s.NDCG, s.P, s.R, s.MAP)
		if s.DiffVsMeanPool != nil {
			line += fmt.Sprintf("   %+.4f [%+.4f, %+.4f], p=%.4f", *s.DiffVsMeanPool, *s.CILow, *s.CIHigh, *s.PValue)
		}
		fmt.Println(line)
	}
}
