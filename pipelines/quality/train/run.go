package train

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/quality/eval"
)

// The REIGN sizes and objectives the trainer knows (python -m reigntrain --help).
var (
	Sizes  = []string{"tiny-l1", "small-l2", "base-l3", "large-l4"}
	Losses = []string{"cosine3", "infonce"}
)

// Options are a training run's settings besides the pipeline. The errors name the fields by
// their `reignpipe train` flags.
type Options struct {
	Data, Out, Size, Loss string
	Epochs, Seed          int
	SelfSupervised        bool
	Python, TrainerDir    string   // empty: resolved by Python / Dir
	Extra                 []string // passed to the trainer unchanged (after "--" on the command line)
	Stdout, Stderr        io.Writer
	Encode                eval.Encoder // runs the pipeline over the data's documents
}

// Summary is what `reignpipe train` reports and writes to OUT/train-summary.json.
type Summary struct {
	Data      string `json:"data"`
	Out       string `json:"out"`
	Corpus    int    `json:"corpus"`
	Queries   int    `json:"queries"`
	Sequences string `json:"sequences"`
	// Encoding both sides: windows cut, embedded by the GN, and served from the chunk cache
	// (GN forward passes avoided).
	Encode eval.EncodeCounts `json:"encode"`
	// Windows listed in the sequences index (every document's, repeats included): the
	// trainer reads their embeddings from the shards and never runs the GN.
	IndexWindows  int64   `json:"index_windows"`
	Epochs        int     `json:"epochs"`
	EncodeSeconds float64 `json:"encode_seconds"`
	TrainSeconds  float64 `json:"train_seconds"`
}

// Validate reports every setting the trainer would refuse, before anything runs.
func (o *Options) Validate() error {
	var errs []string
	if !slices.Contains(Sizes, o.Size) {
		errs = append(errs, fmt.Sprintf("--size %q: want one of %s", o.Size, strings.Join(Sizes, ", ")))
	}
	if !slices.Contains(Losses, o.Loss) {
		errs = append(errs, fmt.Sprintf("--loss %q: want one of %s", o.Loss, strings.Join(Losses, ", ")))
	}
	if o.Epochs < 1 {
		errs = append(errs, fmt.Sprintf("--epochs %d: must be at least 1", o.Epochs))
	}
	if o.Out == "" {
		errs = append(errs, "--out is required")
	}
	if st, err := os.Stat(o.Data); err != nil || !st.IsDir() {
		errs = append(errs, fmt.Sprintf("--data %q is not a directory", o.Data))
	} else if !hasJSONL(o.Data, "corpus") {
		// The trainer reads corpus.jsonl, queries.jsonl and qrels/*.tsv itself.
		errs = append(errs, fmt.Sprintf("--data %q has no corpus.jsonl (the plain BEIR layout the trainer reads); "+
			"rewrite it with: reignpipe importdata --data %s --out DIR", o.Data, o.Data))
	}
	if len(errs) > 0 {
		return fmt.Errorf("train: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Run is the whole job: encode the data through the pipeline into the chunk cache, export the
// sequences index, run the trainer over the cached chunk embeddings.
func Run(ctx context.Context, cfg *pipelines.Config, o Options) (*Summary, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	// Find the trainer before the (possibly long) encoding, so a missing install fails fast.
	py, err := Python(o.Python)
	if err != nil {
		return nil, err
	}
	dir, err := Dir(o.TrainerDir)
	if err != nil {
		return nil, err
	}
	ds, err := LoadData(o.Data, o.SelfSupervised)
	if err != nil {
		return nil, err
	}
	sum := &Summary{Data: o.Data, Out: o.Out, Corpus: len(ds.Corpus), Queries: len(ds.Queries),
		Sequences: filepath.Join(o.Out, SequencesFile), Epochs: o.Epochs}

	start := time.Now()
	enc, err := eval.EncodeSides(ctx, o.Encode, cfg, ds, filepath.Join(o.Out, "encode"))
	if err != nil {
		return nil, err
	}
	sum.Encode = enc
	fp, windows, err := ExportSequences(cfg, ds, sum.Sequences)
	if err != nil {
		return nil, err
	}
	sum.IndexWindows = windows
	sum.EncodeSeconds = time.Since(start).Seconds()

	args := []string{
		"--shards", filepath.Join(cfg.Cache.Dir, "shards"), "--sequences", sum.Sequences,
		"--data", o.Data, "--out", o.Out, "--size", o.Size, "--epochs", strconv.Itoa(o.Epochs),
		"--seed", strconv.Itoa(o.Seed), "--loss", o.Loss, "--gn-name", cfg.GN.Name, "--expect-fingerprint", fp}
	if o.SelfSupervised {
		args = append(args, "--self-supervised")
	}
	args = append(args, o.Extra...)
	start = time.Now()
	if err := RunTrainer(ctx, py, dir, args, o.Stdout, o.Stderr); err != nil {
		return nil, err
	}
	sum.TrainSeconds = time.Since(start).Seconds()
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := atomicfile.Write(filepath.Join(o.Out, "train-summary.json"), append(b, '\n')); err != nil {
		return nil, err
	}
	return sum, nil
}
