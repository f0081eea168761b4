package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/eval"
	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// The trainer is a Python package (PyTorch) kept in the repository under ops/train; these are
// how `reignpipe train` finds it and its interpreter.
const (
	envTrainDir    = "REIGNPIPE_TRAIN_DIR"    // directory holding reigntrain/
	envTrainPython = "REIGNPIPE_TRAIN_PYTHON" // interpreter with ops/train/requirements.txt
	sequencesFile  = "sequences.parquet"
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
	Python, TrainerDir    string   // empty: resolved by trainerPython / findTrainerDir
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
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	o := trainOptions{Stdout: os.Stdout, Stderr: os.Stderr, Extra: extra}
	fs.StringVar(&o.Data, "data", "", "BEIR-layout directory: corpus.jsonl, queries.jsonl, qrels/{train,val,test}.tsv")
	fs.StringVar(&o.Out, "out", "", "output directory: best/, last/, train-log.jsonl, eval-trainer.json")
	fs.StringVar(&o.Size, "size", "small-l2", "REIGN size: "+strings.Join(trainSizes, ", "))
	fs.IntVar(&o.Epochs, "epochs", 50, "training epochs")
	fs.IntVar(&o.Seed, "seed", 42, "random seed (same seed, same device: same weights)")
	fs.StringVar(&o.Loss, "loss", "cosine3", "objective: cosine3 (the released recipe) or infonce")
	fs.BoolVar(&o.SelfSupervised, "self-supervised", false, "unlabelled corpus: two crops of one document are a positive pair")
	fs.StringVar(&o.Python, "python", "", "trainer interpreter (default $"+envTrainPython+", else $REIGNPIPE_HOME/venv-train/bin/python)")
	fs.StringVar(&o.TrainerDir, "trainer-dir", "", "directory holding reigntrain/ (default $"+envTrainDir+", else ops/train of this checkout)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || o.Data == "" || o.Out == "" {
		return errors.New("train: usage: reignpipe train --data DIR --out DIR [--size small-l2] [--epochs 50] [--seed 42] [--loss cosine3|infonce] [--self-supervised] PIPELINE.yaml [-- TRAINER FLAGS]")
	}
	cfg, err := pipelines.Load(pos[0])
	if err != nil {
		return err
	}
	sum, err := train(ctx, cfg, o)
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
	}
	if len(errs) > 0 {
		return fmt.Errorf("train: %s", strings.Join(errs, "; "))
	}
	return nil
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
func train(ctx context.Context, cfg *pipelines.Config, o trainOptions) (*TrainSummary, error) {
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
	py, err := trainerPython(o.Python)
	if err != nil {
		return nil, err
	}
	dir, err := findTrainerDir(o.TrainerDir)
	if err != nil {
		return nil, err
	}
	ds, err := loadTrainData(o.Data, o.SelfSupervised, filepath.Join(o.Out, "encode"))
	if err != nil {
		return nil, err
	}
	sum := &TrainSummary{Data: o.Data, Out: o.Out, Corpus: len(ds.Corpus), Queries: len(ds.Queries),
		Sequences: filepath.Join(o.Out, sequencesFile), Epochs: o.Epochs}

	start := time.Now()
	enc, err := encodeSides(ctx, cfg, ds, filepath.Join(o.Out, "encode"))
	if err != nil {
		return nil, err
	}
	sum.Encode = enc
	fp, windows, err := exportSequences(cfg, ds, sum.Sequences)
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
	cmd.Env = append(os.Environ(), "PYTHONPATH="+joinPath(dir, os.Getenv("PYTHONPATH")), "PYTHONUNBUFFERED=1")
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

func joinPath(dir, rest string) string {
	if rest == "" {
		return dir
	}
	return dir + string(os.PathListSeparator) + rest
}

// loadTrainData loads the corpus and queries to encode. Labelled training needs the BEIR
// layout with qrels/train.tsv. --self-supervised needs only corpus.jsonl: queries are encoded
// when present (labelled validation then uses them), and the BEIR loader is pointed at a view
// of the directory under work/ that supplies what an unlabelled corpus lacks.
func loadTrainData(dataDir string, selfSupervised bool, work string) (*eval.Dataset, error) {
	if !selfSupervised {
		ds, err := eval.LoadBEIRSplit(dataDir, "train")
		if err != nil {
			return nil, fmt.Errorf("train: %w (an unlabelled corpus needs --self-supervised)", err)
		}
		return ds, nil
	}
	view := filepath.Join(work, "corpus-view")
	if err := os.RemoveAll(view); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(view, "qrels"), 0o755); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	linked := map[string]bool{}
	for _, name := range []string{"corpus.jsonl", "corpus.jsonl.gz", "queries.jsonl", "queries.jsonl.gz"} {
		if _, err := os.Stat(filepath.Join(abs, name)); err == nil {
			if err := os.Symlink(filepath.Join(abs, name), filepath.Join(view, name)); err != nil {
				return nil, err
			}
			linked[strings.TrimSuffix(name, ".gz")] = true
		}
	}
	if !linked["corpus.jsonl"] {
		return nil, fmt.Errorf("train: %s has no corpus.jsonl", dataDir)
	}
	if !linked["queries.jsonl"] {
		if err := os.WriteFile(filepath.Join(view, "queries.jsonl"), nil, 0o644); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(view, "qrels", "none.tsv"), nil, 0o644); err != nil {
		return nil, err
	}
	return eval.LoadBEIRSplit(view, "none")
}

// exportSequences writes the sequences index the trainer reads: one row per corpus document
// (side "c") and query (side "q") with its window keys in order, from the cache manifests
// encodeSides just wrote. It returns the GN fingerprint of the cache and the number of windows
// listed. The file appears complete or not at all.
func exportSequences(cfg *pipelines.Config, ds *eval.Dataset, path string) (fingerprint string, windows int64, err error) {
	lib, err := cfg.Runtime.LibraryPath()
	if err != nil {
		return "", 0, err
	}
	rt, err := gn.NewRuntime(lib)
	if err != nil {
		return "", 0, err
	}
	defer rt.Close()
	modelPath, tokPath := cfg.GN.ModelPaths()
	model, err := rt.Load(gn.Config{Name: cfg.GN.Name, Model: modelPath, Tokenizer: tokPath, Provider: cfg.GN.Provider})
	if err != nil {
		return "", 0, err
	}
	defer model.Close()
	fp, dim := model.Fingerprint(), model.Dim()
	cache, err := shardcache.Open(shardcache.Options{Dir: cfg.Cache.Dir, Fingerprint: fp, Dim: dim, K: cfg.Chunking.K, S: cfg.Chunking.S})
	if err != nil {
		return "", 0, err
	}
	// Closed before the trainer starts: Close flushes, and the trainer reads only the shards.
	defer func() { err = errors.Join(err, cache.Close()) }()

	meta := map[string]string{
		schemas.MetaGNFingerprint: fp, schemas.MetaK: strconv.Itoa(cfg.Chunking.K),
		schemas.MetaS: strconv.Itoa(cfg.Chunking.S), schemas.MetaDim: strconv.Itoa(dim),
	}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "doc_id", Type: arrow.BinaryTypes.String},
		{Name: "side", Type: arrow.BinaryTypes.String},
		{Name: "keys", Type: arrow.ListOf(arrow.PrimitiveTypes.Uint64)},
	}, func() *arrow.Metadata { m := arrow.MetadataFrom(meta); return &m }())
	mem := memory.DefaultAllocator
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	ids, sides := b.Field(0).(*array.StringBuilder), b.Field(1).(*array.StringBuilder)
	lb := b.Field(2).(*array.ListBuilder)
	kb := lb.ValueBuilder().(*array.Uint64Builder)
	add := func(side, id string) error {
		m, ok, err := cache.Manifest(side + ":" + id)
		if err != nil {
			return err
		}
		if !ok || len(m.Keys) == 0 {
			return fmt.Errorf("train: document %s:%s has no manifest in the cache after encoding", side, id)
		}
		ids.Append(id)
		sides.Append(side)
		lb.Append(true)
		kb.AppendValues(m.Keys, nil)
		windows += int64(len(m.Keys))
		return nil
	}
	for _, d := range ds.Corpus {
		if err := add("c", d.ID); err != nil {
			return "", 0, err
		}
	}
	for _, q := range ds.Queries {
		if err := add("q", q.ID); err != nil {
			return "", 0, err
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(sc, &buf,
		parquet.NewWriterProperties(parquet.WithAllocator(mem), parquet.WithCompression(compress.Codecs.Zstd)),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema(), pqarrow.WithAllocator(mem)))
	if err != nil {
		return "", 0, err
	}
	if err := fw.Write(rec); err != nil {
		_ = fw.Close()
		return "", 0, err
	}
	if err := fw.Close(); err != nil {
		return "", 0, err
	}
	if err := atomicfile.Write(path, buf.Bytes()); err != nil {
		return "", 0, err
	}
	return fp, windows, nil
}

// trainerPython is the interpreter: the flag, else $REIGNPIPE_TRAIN_PYTHON, else the venv
// `make train-deps` builds.
func trainerPython(flagValue string) (string, error) {
	py, from := flagValue, "--python"
	if py == "" {
		py, from = os.Getenv(envTrainPython), envTrainPython
	}
	if py == "" {
		py, from = filepath.Join(pipelines.Home(), "venv-train", "bin", "python"), "the default"
	}
	resolved, err := exec.LookPath(py)
	if err != nil {
		return "", fmt.Errorf("train: trainer interpreter %s (%s) not found: run `make train-deps`, or set %s to a Python with ops/train/requirements.txt installed",
			py, from, envTrainPython)
	}
	return resolved, nil
}

// findTrainerDir locates the directory holding the reigntrain package, first match wins:
//  1. --trainer-dir, 2. $REIGNPIPE_TRAIN_DIR (an explicit choice must be right: no fallback),
//  3. ops/train beside the executable's directory (bin/reignpipe in a checkout) or in it,
//  4. ops/train of the source tree this binary was built from (go run, go test, go build),
//  5. ops/train under the working directory.
func findTrainerDir(flagValue string) (string, error) {
	ok := func(dir string) bool {
		st, err := os.Stat(filepath.Join(dir, "reigntrain", "__main__.py"))
		return err == nil && !st.IsDir()
	}
	for _, explicit := range []struct{ dir, from string }{{flagValue, "--trainer-dir"}, {os.Getenv(envTrainDir), envTrainDir}} {
		if explicit.dir == "" {
			continue
		}
		if !ok(explicit.dir) {
			return "", fmt.Errorf("train: %s=%s holds no reigntrain/__main__.py", explicit.from, explicit.dir)
		}
		return filepath.Abs(explicit.dir)
	}
	var tried []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			tried = append(tried, filepath.Join(filepath.Dir(exe), "..", "ops", "train"), filepath.Join(filepath.Dir(exe), "ops", "train"))
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		tried = append(tried, filepath.Join(filepath.Dir(file), "..", "..", "ops", "train"))
	}
	if wd, err := os.Getwd(); err == nil {
		tried = append(tried, filepath.Join(wd, "ops", "train"))
	}
	for _, dir := range tried {
		if ok(dir) {
			return filepath.Abs(dir)
		}
	}
	return "", fmt.Errorf("train: the trainer (reigntrain) is not in any of %s; set %s to the repository's ops/train",
		strings.Join(tried, ", "), envTrainDir)
}
