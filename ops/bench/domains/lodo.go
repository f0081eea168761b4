package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/quality/tune"
)

// The split every run shares: tune's defaults would give pydoc's 214 documents about 21 test
// queries, so a fifth of each domain is test and a tenth validation, under split seed 42.
const (
	splitSeed = 42
	valPct    = 10
	testPct   = 20
)

// lodo trains a general REIGN on every domain but one and scores it on the held-out domain's
// test halves, for each size and seed: tune with Only = the other domains and TestOnly = the
// held-out one, so the test documents are those the held-out domain's own tune scores.
func lodo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("lodo", flag.ContinueOnError)
	pipeline := fs.String("pipeline", "", "pipeline YAML whose cache holds every domain")
	out := fs.String("out", "", "output directory: DOMAIN/SIZE-sSEED/tune-summary.json")
	domains := fs.String("domains", "linuxdoc,pydoc,kjv", "domains, as document id prefixes without the colon")
	sizes := fs.String("sizes", "small-l2,base-l3", "REIGN sizes")
	seeds := fs.String("seeds", "1,2,3", "training seeds")
	epochs := fs.Int("epochs", 10, "training epochs (the best on validation is kept)")
	only := fs.String("only-held-out", "", "run only this held-out domain")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pipeline == "" || *out == "" {
		return fmt.Errorf("lodo: -pipeline and -out are required")
	}
	cfg, err := pipelines.Load(*pipeline)
	if err != nil {
		return err
	}
	doms := strings.Split(*domains, ",")
	for _, held := range doms {
		if *only != "" && held != *only {
			continue
		}
		var train []string
		for _, d := range doms {
			if d != held {
				train = append(train, d+":")
			}
		}
		for _, size := range strings.Split(*sizes, ",") {
			for _, s := range strings.Split(*seeds, ",") {
				seed, err := strconv.Atoi(s)
				if err != nil {
					return fmt.Errorf("lodo: seed %q: %w", s, err)
				}
				dir := filepath.Join(*out, held, fmt.Sprintf("%s-s%d", size, seed))
				if _, err := os.Stat(filepath.Join(dir, "tune-summary.json")); err == nil {
					fmt.Printf("lodo: %s done before\n", dir)
					continue
				}
				sum, err := tune.Run(ctx, cfg, tune.Options{Out: dir, Size: size, Epochs: *epochs, Seed: seed, SplitSeed: splitSeed,
					ValPct: valPct, TestPct: testPct, Only: train, TestOnly: []string{held + ":"}, Stdout: os.Stderr, Stderr: os.Stderr})
				if err != nil {
					return fmt.Errorf("lodo: held out %s, %s seed %d: %w", held, size, seed, err)
				}
				f := sum.Figures
				if f == nil {
					return fmt.Errorf("lodo: held out %s, %s seed %d: no figures: %s", held, size, seed, sum.Reason)
				}
				fmt.Printf("lodo: held out %s, %s seed %d: %d train docs, %.0fs training, best epoch %d: mean-pool %.4f, REIGN %.4f, %+.4f [%+.4f, %+.4f]\n",
					held, size, seed, sum.Splits[tune.Train], sum.TrainSeconds, sum.BestEpoch, f.MeanPool, f.REIGN, f.Diff, f.CILow, f.CIHigh)
			}
		}
	}
	return nil
}

// heldout writes the held-out documents of one domain's tune run (its test queries) as a
// JSONL file of the same name as the domain's corpus, so that `benchdata --source jsonl` gives
// them the same ids.
func heldout(args []string) error {
	fs := flag.NewFlagSet("heldout", flag.ContinueOnError)
	summary := fs.String("summary", "", "the domain's tune-summary.json")
	corpus := fs.String("corpus", "", "the domain's corpus, DOMAIN.jsonl")
	out := fs.String("out", "", "output directory (DOMAIN.jsonl is written there)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var sum tune.Summary
	b, err := os.ReadFile(*summary)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		return fmt.Errorf("%s: %w", *summary, err)
	}
	prefix := strings.TrimSuffix(filepath.Base(*corpus), ".jsonl") + ":"
	want := map[string]bool{}
	for _, q := range sum.PerQuery {
		want[strings.TrimPrefix(q.DocID, prefix)] = true
	}
	f, err := os.Open(*corpus)
	if err != nil {
		return err
	}
	defer f.Close()
	var keep []doc
	dec := json.NewDecoder(f)
	for dec.More() {
		var d doc
		if err := dec.Decode(&d); err != nil {
			return fmt.Errorf("%s: %w", *corpus, err)
		}
		if want[d.ID] {
			keep = append(keep, d)
		}
	}
	if len(keep) != len(want) {
		return fmt.Errorf("heldout: %d test documents in %s, %d of them found in %s", len(want), *summary, len(keep), *corpus)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	fmt.Printf("heldout: %d documents\n", len(keep))
	return writeJSONL(filepath.Join(*out, filepath.Base(*corpus)), keep)
}
