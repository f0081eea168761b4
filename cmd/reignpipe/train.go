package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/train"
)

var (
	trainSizes  = []string{"tiny-l1", "small-l2", "base-l3", "large-l4"}
	trainLosses = []string{"cosine3", "infonce"}
)

// trainOptions are `reignpipe train`'s settings besides the pipeline.
type trainOptions struct {
	Data, Out, Size, Loss string
	Epochs, Seed          int
	SelfSupervised        bool
	Python, TrainerDir    string   // empty: resolved by train.Python / train.Dir
	Extra                 []string // passed to the trainer unchanged (after "--" on the command line)
	Stdout, Stderr        io.Writer
}

// TrainSummary is what `reignpipe train` reports and writes to OUT/train-summary.json.
type TrainSummary struct {
	Data      string `json:"data"`
	Out       string `json:"out"`
	Corpus    int    `json:"corpus"`
	Queries   int    `json:"queries"`
	Sequences string `json:"sequences"`
	// Encoding both sides: windows cut, embedded by the GN, and served from the chunk cache
	// (GN forward passes avoided).
	Encode encodeCounts `json:"encode"`
	// Windows listed in the sequences index (every document's, repeats included): the
	// trainer reads their embeddings from the shards and never runs the GN.
	IndexWindows  int64   `json:"index_windows"`
	Epochs        int     `json:"epochs"`
	EncodeSeconds float64 `json:"encode_seconds"`
	TrainSeconds  float64 `json:"train_seconds"`
}

// cmdTrain encodes a dataset through the pipeline into the chunk cache, exports the documents'
// window-key sequences and trains REIGN on the cached chunk embeddings with the PyTorch
// trainer. Arguments after "--" go to the trainer as they are (python -m reigntrain --help).
func cmdTrain(ctx context.Context, args []string) error {
	var extra []string
	for i, a := range args {
		if a == "--" {
			args, extra = args[:i], args[i+1:]
			break
		}
	}
	fs := newFlagSet("train", args)
	o := trainOptions{Stdout: os.Stdout, Stderr: os.Stderr, Extra: extra}
	fs.StringVar(&o.Data, "data", "", "BEIR-layout directory: corpus.jsonl, queries.jsonl, qrels/{train,val,test}.tsv")
	fs.StringVar(&o.Out, "out", "", "output directory: best/, last/, train-log.jsonl, eval-trainer.json")
	fs.StringVar(&o.Size, "size", "small-l2", "REIGN size: "+strings.Join(trainSizes, ", "))
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
	sum, err := runTrain(ctx, cfg, o)
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

func (o *trainOptions) validate() error {
	var errs []string
	if !contains(trainSizes, o.Size) {
		errs = append(errs, fmt.Sprintf("--size %q: want one of %s", o.Size, strings.Join(trainSizes, ", ")))
	}
	if !contains(trainLosses, o.Loss) {
		errs = append(errs, fmt.Sprintf("--loss %q: want one of %s", o.Loss, strings.Join(trainLosses, ", ")))
	}
	if o.Epochs < 1 {
		errs = append(errs, fmt.Sprintf("--epochs %d: must be at least 1", o.Epochs))
	}
	if o.Out == "" {
		errs = append(errs, "--out is required")
	}
	if st, err := os.Stat(o.Data); err != nil || !st.IsDir() {
		errs = append(errs, fmt.Sprintf("--data %q is not a directory", o.Data))
	} else if !plainBEIR(o.Data) {
		// The trainer reads corpus.jsonl, queries.jsonl and qrels/*.tsv itself.
		errs = append(errs, fmt.Sprintf("--data %q has no corpus.jsonl (the plain BEIR layout the trainer reads); "+
			"rewrite it with: reignpipe importdata --data %s --out DIR", o.Data, o.Data))
	}
	if len(errs) > 0 {
		return fmt.Errorf("train: %s", strings.Join(errs, "; "))
	}
	return nil
}

// plainBEIR reports whether dir holds corpus.jsonl or corpus.jsonl.gz.
func plainBEIR(dir string) bool {
	for _, name := range []string{"corpus.jsonl", "corpus.jsonl.gz"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// train runs the whole job: encode, export the sequences index, run the trainer.
func runTrain(ctx context.Context, cfg *pipelines.Config, o trainOptions) (*TrainSummary, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	// Find the trainer before the (possibly long) encoding, so a missing install fails fast.
	py, err := train.Python(o.Python)
	if err != nil {
		return nil, err
	}
	dir, err := train.Dir(o.TrainerDir)
	if err != nil {
		return nil, err
	}
	ds, err := train.LoadData(o.Data, o.SelfSupervised, filepath.Join(o.Out, "encode"))
	if err != nil {
		return nil, err
	}
	sum := &TrainSummary{Data: o.Data, Out: o.Out, Corpus: len(ds.Corpus), Queries: len(ds.Queries),
		Sequences: filepath.Join(o.Out, train.SequencesFile), Epochs: o.Epochs}

	start := time.Now()
	enc, err := encodeSides(ctx, cfg, ds, filepath.Join(o.Out, "encode"))
	if err != nil {
		return nil, err
	}
	sum.Encode = enc
	fp, windows, err := train.ExportSequences(cfg, ds, sum.Sequences)
	if err != nil {
		return nil, err
	}
	sum.IndexWindows = windows
	sum.EncodeSeconds = time.Since(start).Seconds()

	args := []string{"-m", "reigntrain",
		"--shards", filepath.Join(cfg.Cache.Dir, "shards"), "--sequences", sum.Sequences,
		"--data", o.Data, "--out", o.Out, "--size", o.Size, "--epochs", strconv.Itoa(o.Epochs),
		"--seed", strconv.Itoa(o.Seed), "--loss", o.Loss, "--gn-name", cfg.GN.Name, "--expect-fingerprint", fp}
	if o.SelfSupervised {
		args = append(args, "--self-supervised")
	}
	args = append(args, o.Extra...)
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+train.JoinPath(dir, os.Getenv("PYTHONPATH")), "PYTHONUNBUFFERED=1")
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	// On Ctrl-C the trainer gets SIGINT, finishes its line and exits; a hung one is killed.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	start = time.Now()
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("trainer (%s -m reigntrain, PYTHONPATH=%s): %w", py, dir, err)
	}
	sum.TrainSeconds = time.Since(start).Seconds()
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := atomicfile.Write(filepath.Join(o.Out, "train-summary.json"), append(b, '\n')); err != nil {
		return nil, err
	}
	return sum, nil
}
