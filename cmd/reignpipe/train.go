package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/quality/train"
)

// cmdTrain trains REIGN on a dataset's cached chunk embeddings (pipelines/quality/train). Arguments
// after "--" go to the trainer as they are (python -m reigntrain --help).
func cmdTrain(ctx context.Context, args []string) error {
	args, extra := trainerArgs(args)
	fs := newFlagSet("train", args)
	o := train.Options{Stdout: os.Stdout, Stderr: os.Stderr, Extra: extra, Encode: encodeInProcess}
	fs.StringVar(&o.Data, "data", "", "BEIR-layout directory: corpus.jsonl, queries.jsonl, qrels/{train,val,test}.tsv")
	fs.StringVar(&o.Out, "out", "", "output directory: best/, last/, train-log.jsonl, eval-trainer.json")
	fs.StringVar(&o.Size, "size", "small-l2", "REIGN size: "+strings.Join(train.Sizes, ", "))
	fs.IntVar(&o.Epochs, "epochs", 50, "training epochs")
	fs.IntVar(&o.Seed, "seed", 42, "random seed (same seed, same device: same weights)")
	fs.StringVar(&o.Loss, "loss", "cosine3", "objective: cosine3 (the released recipe) or infonce")
	fs.BoolVar(&o.SelfSupervised, "self-supervised", false, "unlabelled corpus: two crops of one document are a positive pair")
	fs.StringVar(&o.Python, "python", "", "trainer interpreter (default $"+train.EnvPython+", else $REIGNPIPE_HOME/venv-train/bin/python)")
	fs.StringVar(&o.TrainerDir, "trainer-dir", "", "directory holding reigntrain/ (default $"+train.EnvDir+", else ops/train of this checkout)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || o.Data == "" || o.Out == "" {
		return usageError("train", "--data, --out and one pipeline file are required")
	}
	cfg, err := pipelines.Load(pos[0])
	if err != nil {
		return err
	}
	sum, err := train.Run(ctx, cfg, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Stdout, "encode: %d windows, %d embedded by the GN, %d served from the cache (GN windows avoided)\n",
		sum.Encode.Windows, sum.Encode.GNWindows, sum.Encode.CacheHits)
	fmt.Fprintf(o.Stdout, "train: %d epochs in %.1fs over the %d cached window embeddings of %d documents, without the GN\n",
		sum.Epochs, sum.TrainSeconds, sum.IndexWindows, sum.Corpus+sum.Queries)
	fmt.Fprintf(o.Stdout, "checkpoints: %s, %s\n", filepath.Join(o.Out, "best"), filepath.Join(o.Out, "last"))
	return nil
}

// trainerArgs splits a command line at "--": what follows goes to the trainer as it is.
func trainerArgs(args []string) (own, extra []string) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:]
		}
	}
	return args, nil
}
