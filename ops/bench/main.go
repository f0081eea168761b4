// Command bench measures, side by side in one run on one machine, the embedded pipeline's
// end-to-end GN throughput against the limit: raw ONNX Runtime on the same pre-tokenized
// windows with the best batch size. It also reports tokenizer tokens/s and peak RSS.
//
//	go run ./ops/bench -dump path/to/pages-articles.xml.bz2 [-docs 60] [-batches 8,16,32] [-provider cuda:0]
//
// Ratios, not absolute times, are the result: this machine is shared and noisy.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/deadletter"
	"github.com/reignpipe/reignpipe/connectors/jsonl"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/connectors/wikipedia"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/pipelines/engine/runner"
	"github.com/reignpipe/reignpipe/pipelines/engine/runstate"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/shardcache"
	"github.com/reignpipe/reignpipe/stages/wordpiece"
)

type result struct {
	Provider         string             `json:"provider"`
	Docs             int                `json:"docs"`
	Windows          int                `json:"windows"`
	Tokens           int                `json:"tokens"`
	TokenizerTokPerS float64            `json:"tokenizer_tokens_per_s"`
	RawWindowsPerS   map[string]float64 `json:"raw_ort_windows_per_s_by_batch"`
	RawBest          float64            `json:"raw_ort_best_windows_per_s"`
	RawBestBatch     int                `json:"raw_ort_best_batch"`
	PipelineWinPerS  float64            `json:"pipeline_windows_per_s"`
	PipelineWall     float64            `json:"pipeline_wall_s"`
	Ratio            float64            `json:"pipeline_over_raw"`
	SecondRunWall    float64            `json:"second_run_wall_s"`
	SecondRunGN      int64              `json:"second_run_gn_windows"`
	FirstOverSecond  float64            `json:"first_over_second_wall"`
	PeakRSSMiB       float64            `json:"peak_rss_mib"`
	GNPaddingRatio   float64            `json:"pipeline_gn_padding_ratio"`
	PipelineMaxBatch int                `json:"pipeline_max_batch"`
}

func main() {
	dump := flag.String("dump", "", "Wikipedia dump (.xml.bz2) or JSONL corpus")
	maxDocs := flag.Int("docs", 60, "documents to use (0 = all)")
	gnName := flag.String("gn", "bge-small-en-v15", "fetched GN name")
	batchList := flag.String("batches", "8,16,32", "raw ORT batch sizes to try")
	out := flag.String("out", "", "write the JSON result here too")
	provider := flag.String("provider", "cpu", "GN execution provider: cpu or cuda:N (the GPU build from ops/fetch --gpu)")
	flag.Parse()
	if err := run(*dump, *maxDocs, *gnName, *batchList, *out, *provider); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func openSource(path string) (connectors.Source, error) {
	if strings.Contains(path, ".jsonl") {
		return jsonl.Open(jsonl.Options{Path: path})
	}
	return wikipedia.Open(wikipedia.Options{Path: path})
}

// limited stops a source after n documents.
type limited struct {
	connectors.Source
	n, left int
}

func (l *limited) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	if l.n > 0 && l.left == 0 {
		return schemas.Document{}, nil, io.EOF
	}
	l.left--
	return l.Source.Read(ctx)
}

func run(dump string, maxDocs int, gnName, batchList, outPath, provider string) error {
	if dump == "" {
		return errors.New("-dump is required")
	}
	var batches []int
	for _, s := range strings.Split(batchList, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || b < 1 {
			return fmt.Errorf("bad batch size %q", s)
		}
		batches = append(batches, b)
	}
	// The same parts a `reignpipe run` opens (ORT environment, GN session, tokenizer); the
	// caches and sinks are the benchmark's own, one per round.
	cfg := pipelines.Defaults()
	cfg.GN.Name, cfg.GN.Provider = gnName, provider
	pp, err := parts.Open(cfg, parts.Want{Embed: true, Tokenizer: true})
	if err != nil {
		return err
	}
	defer pp.Close()
	tok, model := pp.Tokenizer, pp.Model
	p := chunk.Default

	// 1. Read the documents once; tokenizer speed on their text.
	src, err := openSource(dump)
	if err != nil {
		return err
	}
	var docs []schemas.Document
	_, err = connectors.Each(context.Background(), src, func(d schemas.Document) (bool, error) {
		docs = append(docs, d)
		return maxDocs == 0 || len(docs) < maxDocs, nil
	})
	src.Close(context.Background())
	if err != nil {
		return err
	}
	res := result{Provider: provider, Docs: len(docs), RawWindowsPerS: map[string]float64{}}
	start := time.Now()
	var windows [][]int32
	for _, d := range docs {
		ids := tok.Encode(d.Text)
		res.Tokens += len(ids)
		windows = append(windows, p.Windows(ids, tok.CLS(), tok.SEP())...)
	}
	res.TokenizerTokPerS = float64(res.Tokens) / time.Since(start).Seconds()
	res.Windows = len(windows)
	slog.Info("corpus", "docs", res.Docs, "tokens", res.Tokens, "windows", res.Windows)

	// 2. The limit: raw ORT on the same windows, sorted by length (least padding), per batch size.
	sorted := append([][]int32(nil), windows...)
	sort.Slice(sorted, func(i, j int) bool { return len(sorted[i]) > len(sorted[j]) })
	outBuf := make([][]float32, len(sorted))
	for i := range outBuf {
		outBuf[i] = make([]float32, model.Dim())
	}
	for _, b := range batches {
		t0 := time.Now()
		for i := 0; i < len(sorted); i += b {
			j := min(i+b, len(sorted))
			if err := model.Embed(sorted[i:j], outBuf[i:j]); err != nil {
				return err
			}
		}
		wps := float64(len(sorted)) / time.Since(t0).Seconds()
		res.RawWindowsPerS[strconv.Itoa(b)] = wps
		if wps > res.RawBest {
			res.RawBest, res.RawBestBatch = wps, b
		}
		slog.Info("raw ORT", "batch", b, "windows_per_s", fmt.Sprintf("%.2f", wps))
	}

	// 3. The embedded pipeline end to end (source → tokenize → cache miss → GN → shards →
	// aggregate → Parquet) on a fresh cache, then again on the warm cache.
	tmp, err := os.MkdirTemp("", "reignpipe-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	res.PipelineMaxBatch = res.RawBestBatch
	before := model.Stats()
	for round := 0; round < 2; round++ {
		wall, r, batcherStats, err := pipelineRun(dump, maxDocs, tmp, round, model, tok, p, res.RawBestBatch)
		if err != nil {
			return err
		}
		_ = batcherStats
		if round == 0 {
			res.PipelineWall = wall
			res.PipelineWinPerS = float64(r.C.GNWindows.Load()) / wall
			ms := model.Stats()
			if real := ms.RealTokens - before.RealTokens; real > 0 {
				res.GNPaddingRatio = float64(ms.PaddedTokens-before.PaddedTokens) / float64(real)
			}
		} else {
			res.SecondRunWall = wall
			res.SecondRunGN = r.C.GNWindows.Load()
		}
	}
	res.Ratio = res.PipelineWinPerS / res.RawBest
	res.FirstOverSecond = res.PipelineWall / res.SecondRunWall
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		res.PeakRSSMiB = float64(ru.Maxrss) / 1024
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(b))
	if outPath != "" {
		return runstate.WriteFileAtomic(outPath, append(b, '\n'))
	}
	return nil
}

func pipelineRun(dump string, maxDocs int, dir string, round int, model *gn.Model, tok *wordpiece.Tokenizer, p chunk.Params, maxBatch int) (float64, *runner.Runner, gn.BatcherStats, error) {
	t0 := time.Now()
	src, err := openSource(dump)
	if err != nil {
		return 0, nil, gn.BatcherStats{}, err
	}
	defer src.Close(context.Background())
	cache, err := shardcache.Open(shardcache.Options{Dir: filepath.Join(dir, "cache"), Fingerprint: model.Fingerprint(), Dim: model.Dim(), K: p.K, S: p.S})
	if err != nil {
		return 0, nil, gn.BatcherStats{}, err
	}
	defer cache.Close()
	batcher, err := gn.NewBatcher(model, gn.BatcherOptions{TokenBudget: maxBatch * p.K, MaxBatch: maxBatch, MaxWait: 20 * time.Millisecond})
	if err != nil {
		return 0, nil, gn.BatcherStats{}, err
	}
	agg, _ := aggregate.NewMeanPool(model.Dim(), model.Fingerprint())
	sink, err := vectorfile.NewParquet(vectorfile.ParquetOptions{Dir: filepath.Join(dir, fmt.Sprint("vectors", round)), Dim: model.Dim()})
	if err != nil {
		return 0, nil, gn.BatcherStats{}, err
	}
	dl, err := deadletter.Open(filepath.Join(dir, "dead.jsonl"))
	if err != nil {
		return 0, nil, gn.BatcherStats{}, err
	}
	defer dl.Close(context.Background())
	r, err := runner.New(runner.Parts{Source: &limited{Source: src, n: maxDocs, left: maxDocs}, Tokenizer: tok, Chunking: p,
		Fingerprint: model.Fingerprint(), Dim: model.Dim(), Embedder: batcher, Cache: cache,
		Aggregation: engine.Aggregation{Aggregator: agg}, Sinks: []connectors.Sink{sink}, DeadLetter: dl}, runner.Options{})
	if err != nil {
		sink.Close(context.Background())
		return 0, nil, gn.BatcherStats{}, err
	}
	if err := r.Run(context.Background()); err != nil {
		return 0, nil, gn.BatcherStats{}, err
	}
	batcher.Close()
	wall := time.Since(t0).Seconds()
	slog.Info("pipeline", "round", round+1, "wall_s", fmt.Sprintf("%.2f", wall), "gn_windows", r.C.GNWindows.Load(),
		"docs", r.C.DocsWritten.Load())
	return wall, r, batcher.Stats(), nil
}
