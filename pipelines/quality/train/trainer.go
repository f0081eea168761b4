// Package train is `reignpipe train`: it encodes a dataset through the pipeline into the chunk
// cache, exports the documents' window-key sequences and runs the REIGN trainer (the PyTorch
// package under ops/train) over the cached chunk embeddings, after locating the trainer and
// its interpreter. The trainer itself never runs the GN.
package train

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
	"github.com/reignpipe/reignpipe/schemas"
)

// How `reignpipe train` finds the trainer and its interpreter, and the index it writes.
const (
	EnvDir        = "REIGNPIPE_TRAIN_DIR"    // directory holding reigntrain/
	EnvPython     = "REIGNPIPE_TRAIN_PYTHON" // interpreter with ops/train/requirements.txt
	SequencesFile = "sequences.parquet"
)

// JoinPath prepends dir to a PATH-style list.
func JoinPath(dir, rest string) string {
	if rest == "" {
		return dir
	}
	return dir + string(os.PathListSeparator) + rest
}

// LoadData loads the corpus and queries to encode. Labelled training needs the BEIR layout
// with qrels/train.tsv. --self-supervised needs only corpus.jsonl: queries are encoded when
// present (labelled validation then uses them).
func LoadData(dataDir string, selfSupervised bool) (*beir.Dataset, error) {
	if !selfSupervised {
		ds, err := beir.LoadSplit(dataDir, "train")
		if err != nil {
			return nil, fmt.Errorf("train: %w (an unlabelled corpus needs --self-supervised)", err)
		}
		return ds, nil
	}
	if !hasJSONL(dataDir, "corpus") {
		return nil, fmt.Errorf("train: %s has no corpus.jsonl", dataDir)
	}
	corpus, err := beir.ReadDocs(filepath.Join(dataDir, "corpus.jsonl"), "corpus")
	if err != nil {
		return nil, err
	}
	ds := &beir.Dataset{Corpus: corpus, Qrels: beir.Qrels{}}
	if hasJSONL(dataDir, "queries") {
		qdocs, err := beir.ReadDocs(filepath.Join(dataDir, "queries.jsonl"), "query")
		if err != nil {
			return nil, err
		}
		for _, d := range qdocs {
			ds.Queries = append(ds.Queries, beir.Query{ID: d.ID, Text: d.Text})
		}
	}
	return ds, nil
}

// hasJSONL reports whether dir holds name.jsonl or name.jsonl.gz, the files ReadDocs opens.
func hasJSONL(dir, name string) bool {
	for _, f := range []string{name + ".jsonl", name + ".jsonl.gz"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// ExportSequences writes the sequences index the trainer reads: one row per corpus document
// (side "c") and query (side "q") with its window keys in order, from the cache manifests
// the encoding step just wrote. It returns the GN fingerprint of the cache and the number of windows
// listed. The file appears complete or not at all.
func ExportSequences(cfg *pipelines.Config, ds *beir.Dataset, path string) (fingerprint string, windows int64, err error) {
	pp, err := parts.Open(cfg, parts.Want{Cache: true})
	if err != nil {
		return "", 0, err
	}
	// Closed before the trainer starts: Close flushes, and the trainer reads only the shards.
	defer func() { err = errors.Join(err, pp.Close()) }()
	cache, fp, dim := pp.Cache, pp.GN.Fingerprint, pp.GN.Dim

	var seqs []Sequence
	add := func(side, id string) error {
		m, ok, err := cache.Manifest(side + ":" + id)
		if err != nil {
			return err
		}
		if !ok || len(m.Keys) == 0 {
			return fmt.Errorf("train: document %s:%s has no manifest in the cache after encoding", side, id)
		}
		seqs = append(seqs, Sequence{DocID: id, Side: side, Keys: m.Keys})
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
	if windows, err = WriteSequences(path, schemas.Space{Fingerprint: fp, K: cfg.Chunking.K, S: cfg.Chunking.S, Dim: dim}, seqs); err != nil {
		return "", 0, err
	}
	return fp, windows, nil
}

// Python is the interpreter: the flag, else $REIGNPIPE_TRAIN_PYTHON, else the venv
// `make train-deps` builds.
func Python(flagValue string) (string, error) {
	py, from := flagValue, "--python"
	if py == "" {
		py, from = os.Getenv(EnvPython), EnvPython
	}
	if py == "" {
		py, from = filepath.Join(pipelines.Home(), "venv-train", "bin", "python"), "the default"
	}
	resolved, err := exec.LookPath(py)
	if err != nil {
		return "", fmt.Errorf("train: trainer interpreter %s (%s) not found: run `make train-deps`, or set %s to a Python with ops/train/requirements.txt installed",
			py, from, EnvPython)
	}
	return resolved, nil
}

// Dir locates the directory holding the reigntrain package, first match wins:
//  1. --trainer-dir, 2. $REIGNPIPE_TRAIN_DIR (an explicit choice must be right: no fallback),
//  3. ops/train beside the executable's directory (bin/reignpipe in a checkout) or in it,
//  4. ops/train of the source tree this binary was built from (go run, go test, go build),
//  5. ops/train under the working directory.
func Dir(flagValue string) (string, error) {
	ok := func(dir string) bool {
		st, err := os.Stat(filepath.Join(dir, "reigntrain", "__main__.py"))
		return err == nil && !st.IsDir()
	}
	for _, explicit := range []struct{ dir, from string }{{flagValue, "--trainer-dir"}, {os.Getenv(EnvDir), EnvDir}} {
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
		tried = append(tried, filepath.Join(filepath.Dir(file), "..", "..", "..", "ops", "train"))
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
		strings.Join(tried, ", "), EnvDir)
}
