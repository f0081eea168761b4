package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/quality/train"
	"github.com/reignpipe/reignpipe/pipelines/quality/tune"
)

// cmdTune adapts REIGN to the corpus in a pipeline's chunk cache and promotes it only when it
// beats the mean-pool on held-out documents (pipelines/quality/tune). Arguments after "--" go to the
// trainer as they are.
func cmdTune(ctx context.Context, args []string) error {
	args, extra := trainerArgs(args)
	fs := newFlagSet("tune", args)
	o := tune.Options{Stdout: os.Stdout, Stderr: os.Stderr, Extra: extra}
	fs.StringVar(&o.Out, "out", "", "output directory: tune-summary.json, train/, checkpoint/ when promoted")
	fs.StringVar(&o.Size, "size", "", fmt.Sprintf("REIGN size: %s (default: small-l2 below %d training documents, else base-l3)",
		strings.Join(train.Sizes, ", "), tune.BaseL3From))
	fs.IntVar(&o.Epochs, "epochs", 50, "training epochs (the best on validation is kept)")
	fs.IntVar(&o.Seed, "seed", 42, "seed of training, and of the document split unless --split-seed")
	fs.IntVar(&o.ValPct, "val-pct", 10, "percent of documents for validation")
	fs.IntVar(&o.TestPct, "test-pct", 10, "percent of documents for the test that decides promotion")
	fs.IntVar(&o.SplitSeed, "split-seed", 0, "seed of the document split alone (0: --seed); keep it to train under other seeds on the same test documents")
	fs.Func("only", "tune on the documents whose id starts with this prefix, e.g. linuxdoc: (repeatable, or comma-separated)", func(v string) error {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				o.Only = append(o.Only, p)
			}
		}
		return nil
	})
	fs.StringVar(&o.Checkpoint, "checkpoint", "", "score this REIGN checkpoint against the mean-pool instead of training one")
	fs.BoolVar(&o.Apply, "apply", false, "when promoted, re-aggregate the cached corpus with the checkpoint into the configured sinks (0 GN windows)")
	fs.StringVar(&o.Python, "python", "", "trainer interpreter (default $"+train.EnvPython+", else $REIGNPIPE_HOME/venv-train/bin/python)")
	fs.StringVar(&o.TrainerDir, "trainer-dir", "", "directory holding reigntrain/ (default $"+train.EnvDir+", else ops/train of this checkout)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || o.Out == "" {
		return usageError("tune", "--out and one pipeline file are required")
	}
	cfg, err := pipelines.Load(pos[0])
	if err != nil {
		return err
	}
	sum, err := tune.Run(ctx, cfg, o)
	if err != nil {
		return err
	}
	only := ""
	if len(o.Only) > 0 {
		only = " and --only " + strings.Join(o.Only, ",")
	}
	fmt.Fprintf(o.Stdout, "tune: %d cached documents, %d with %d+ windows%s: %d train, %d val, %d test; GN windows embedded: %d\n",
		sum.Documents, sum.Usable, sum.MinWindows, only, sum.Splits[tune.Train], sum.Splits[tune.Val], sum.Splits[tune.Test], sum.GNWindows)
	if o.Checkpoint == "" {
		fmt.Fprintf(o.Stdout, "tune: REIGN %s (%s), %d epochs in %.1fs, best epoch %d\n", sum.Size, sum.SizeRule, sum.Epochs, sum.TrainSeconds, sum.BestEpoch)
	} else {
		fmt.Fprintf(o.Stdout, "tune: scoring %s (not trained here)\n", o.Checkpoint)
	}
	if f := sum.Figures; f != nil {
		fmt.Fprintf(o.Stdout, "tune: test halves (%d queries) nDCG@10 mean-pool %.4f, REIGN %.4f, diff %+.4f [%+.4f, %+.4f], p %.4f\n",
			sum.TestQueries, f.MeanPool, f.REIGN, f.Diff, f.CILow, f.CIHigh, f.PValue)
	}
	fmt.Fprintf(o.Stdout, "tune: %s\n", sum.Reason)
	if sum.Promoted {
		fmt.Fprintf(o.Stdout, "tune: checkpoint %s; to use it set aggregate: {type: reign, checkpoint: %s}\n", sum.Checkpoint, sum.Checkpoint)
	}
	if sum.ApplyRun != nil {
		fmt.Fprintf(o.Stdout, "tune: --apply wrote %d document vectors (%d failed) to %s; GN windows embedded: %d\n",
			sum.ApplyRun.Written, sum.ApplyRun.Failed, sum.Applied, sum.ApplyRun.GNWindows)
		fmt.Fprintf(o.Stdout, "tune: set aggregate: {type: reign, checkpoint: %s} in %s so that new documents get the same vectors\n", sum.Checkpoint, pos[0])
	} else if o.Apply {
		fmt.Fprintln(o.Stdout, "tune: --apply: nothing re-aggregated, the mean-pool stays")
	}
	fmt.Fprintf(o.Stdout, "tune: summary %s\n", filepath.Join(o.Out, "tune-summary.json"))
	return nil
}
