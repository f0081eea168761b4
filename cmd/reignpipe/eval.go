package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/reignpipe/reignpipe/connectors/memsource"
	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/irdata"
	"github.com/reignpipe/reignpipe/pipelines/parts"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/eval"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// SystemResult is one system's mean scores and, for systems compared with the GN mean-pool
// baseline, the paired significance of the nDCG difference.
type SystemResult struct {
	System  string  `json:"system"`
	Space   string  `json:"space,omitempty"`
	NDCG    float64 `json:"ndcg"`
	P       float64 `json:"precision"`
	R       float64 `json:"recall"`
	MAP     float64 `json:"map"`
	Queries int     `json:"queries"`
	// Versus gn-meanpool: mean nDCG difference, 95% paired-bootstrap CI, randomisation p.
	DiffVsMeanPool *float64 `json:"ndcg_diff_vs_meanpool,omitempty"`
	CILow          *float64 `json:"ci_low,omitempty"`
	CIHigh         *float64 `json:"ci_high,omitempty"`
	PValue         *float64 `json:"p_value,omitempty"`
}

// EvalSummary is what `reignpipe eval` prints and writes.
type EvalSummary struct {
	Data   string `json:"data"`
	Format string `json:"format"`
	Subset string `json:"subset,omitempty"`
	Split  string `json:"split"`
	K      int    `json:"k"`
	// SelfMatch: hits whose id equals the query id were dropped (every benchmark but LoCo).
	SelfMatch bool `json:"self_match_removed"`
	Corpus    int  `json:"corpus"`
	// Queries judged in the split, the ones encoded and scored; the others are not encoded.
	Queries int `json:"queries"`
	// Judged queries with no relevant document (all grades 0): no metric is defined for them.
	SkippedQueries int `json:"queries_without_relevant_docs"`
	// Records the reader left out, by reason (e.g. a null LoCo passage).
	RecordsSkipped map[string]int `json:"records_skipped,omitempty"`
	GNWindows      int64          `json:"gn_windows"` // windows the GN embedded for this eval (cache misses)
	Systems        []SystemResult `json:"systems"`
}

// evalOptions are `reignpipe eval`'s settings besides the pipeline and the data.
type evalOptions struct {
	Split    string
	K        int
	DropSelf bool
	Out      string
}

// cmdEval encodes a benchmark's corpus and queries through the pipeline (chunk cache
// included) and compares, on the same data in one run: BM25 over the same text, the bare GN on
// the first window only, the GN chunked mean-pool and, when a checkpoint is configured, REIGN.
// The data may be in any layout pipelines/irdata reads (BEIR / MTEB files, LoCoV1, DAPFAM).
func cmdEval(ctx context.Context, args []string) error {
	fs := newFlagSet("eval", args)
	data := fs.String("data", "", "benchmark directory: BEIR/MTEB (JSONL, Parquet or save_to_disk), LoCoV1 or DAPFAM files")
	format := fs.String("format", irdata.FormatAuto, "layout: auto, beir, loco or dapfam")
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
		cfg.Aggregate.Type, cfg.Aggregate.Checkpoint = "reign", *checkpoint
	}
	o := irdata.Options{Format: *format, Subset: *subset, View: *view}
	if *subset == "all" {
		o.Subset = ""
	}
	src, err := irdata.Open(*data, o)
	if err != nil {
		return err
	}
	if src.Format == irdata.FormatLoCo && *subset == "" {
		return fmt.Errorf("eval: LoCo is scored per subtask: give --subset NAME (one of %s) or --subset all", strings.Join(src.Subtasks(), ", "))
	}
	eo := evalOptions{Split: *split, K: *k, DropSelf: !src.Convention.KeepSelf, Out: *out}
	if eo.K == 0 {
		eo.K = src.Convention.K
	}
	if keepSet {
		eo.DropSelf = !*keepSelf
	}
	if *subset == "all" {
		return evaluateSubtasks(ctx, cfg, src, *data, eo)
	}
	sum, err := evaluate(ctx, cfg, src, *data, eo)
	if err != nil {
		return err
	}
	printSummary(sum)
	return nil
}

func printSummary(sum *EvalSummary) {
	fmt.Printf("%-14s %8s %8s %8s %8s   %s\n", "system", "nDCG@"+fmt.Sprint(sum.K), "P", "R", "MAP", "vs gn-meanpool (diff [95% CI], p)")
	for _, s := range sum.Systems {
		line := fmt.Sprintf("%-14s %8.4f %8.4f %8.4f %8.4f", s.System, s.NDCG, s.P, s.R, s.MAP)
		if s.DiffVsMeanPool != nil {
			line += fmt.Sprintf("   %+.4f [%+.4f, %+.4f], p=%.4f", *s.DiffVsMeanPool, *s.CILow, *s.CIHigh, *s.PValue)
		}
		fmt.Println(line)
	}
}

func evaluate(ctx context.Context, cfg *pipelines.Config, src *irdata.Source, data string, o evalOptions) (*EvalSummary, error) {
	full, err := src.Dataset(o.Split)
	if err != nil {
		return nil, err
	}
	// Only the split's judged queries are encoded: the others would cost GN time and score
	// nothing (DAPFAM's test split judges 15% of its queries, LoCo's subtasks their own).
	ds := &eval.Dataset{Corpus: full.Corpus, Qrels: full.Qrels}
	for _, q := range full.Queries {
		if _, judged := full.Qrels[q.ID]; judged {
			ds.Queries = append(ds.Queries, q)
		}
	}
	if len(ds.Queries) == 0 {
		return nil, fmt.Errorf("eval: split %q judges none of the %d queries", o.Split, len(full.Queries))
	}
	split, k, dropSelf, outDir := o.Split, o.K, o.DropSelf, o.Out
	sum := &EvalSummary{Data: data, Format: src.Format, Split: split, K: k, SelfMatch: dropSelf,
		Corpus: len(ds.Corpus), Queries: len(ds.Queries), RecordsSkipped: src.Skipped}

	// 1. Both sides through the pipeline: fills the chunk cache and the doc manifests every
	// system below is computed from.
	enc, err := encodeSides(ctx, cfg, ds, outDir)
	if err != nil {
		return nil, err
	}
	sum.GNWindows = enc.GNWindows

	// 2. Every embedding system from the cache, without the GN.
	pp, err := parts.Open(cfg, parts.Want{Cache: true})
	if err != nil {
		return nil, err
	}
	defer pp.Close()
	rt, model, cache, p := pp.Runtime, pp.Model, pp.Cache, pp.Params
	meanPool, err := aggregate.NewMeanPool(model.Dim(), model.Fingerprint())
	if err != nil {
		return nil, err
	}
	systems := []struct {
		name string
		agg  aggregate.Aggregator
	}{
		{"gn-truncated", firstChunk{meanPool}},
		{"gn-meanpool", meanPool},
	}
	if cfg.Aggregate.Type == "reign" {
		agg, _, closeAgg, err := parts.BuildAggregator(rt, cfg, model, p)
		if err != nil {
			return nil, err
		}
		defer closeAgg()
		systems = append(systems, struct {
			name string
			agg  aggregate.Aggregator
		}{"reign", agg})
	}

	corpusIDs := make([]string, len(ds.Corpus))
	for i, d := range ds.Corpus {
		corpusIDs[i] = d.ID
	}
	reports := map[string]*eval.Report{}
	var order []string
	for _, sys := range systems {
		cv, err := vectorsFromCache(cache, model.Dim(), sys.agg, "c", corpusIDs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sys.name, err)
		}
		rep, err := eval.NewReport(k, 1)
		if err != nil {
			return nil, err
		}
		for _, q := range ds.Queries {
			qv, err := vectorsFromCache(cache, model.Dim(), sys.agg, "q", []string{q.ID})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", sys.name, err)
			}
			exclude := ""
			if dropSelf {
				exclude = q.ID
			}
			hits, err := eval.TopK(qv[0], cv, corpusIDs, k, exclude)
			if err != nil {
				return nil, err
			}
			if _, err := rep.Add(q.ID, eval.HitIDs(hits), ds.Qrels[q.ID]); err != nil {
				return nil, err
			}
		}
		reports[sys.name] = rep
		order = append(order, sys.name)
	}
	// BM25 over the same text.
	bm, err := eval.NewBM25(eval.DefaultK1, eval.DefaultB)
	if err != nil {
		return nil, err
	}
	for _, d := range ds.Corpus {
		if err := bm.Index(d.ID, eval.Tokenize(d.Text)); err != nil {
			return nil, err
		}
	}
	bmRep, err := eval.NewReport(k, 1)
	if err != nil {
		return nil, err
	}
	for _, q := range ds.Queries {
		exclude := ""
		if dropSelf {
			exclude = q.ID
		}
		if _, err := bmRep.Add(q.ID, eval.HitIDs(bm.Search(eval.Tokenize(q.Text), k, exclude)), ds.Qrels[q.ID]); err != nil {
			return nil, err
		}
	}
	reports["bm25"] = bmRep
	order = append([]string{"bm25"}, order...)

	base := reports["gn-meanpool"].Column(func(m eval.QueryMetrics) float64 { return m.NDCG })
	for _, name := range order {
		rep := reports[name]
		m := rep.Mean()
		r := SystemResult{System: name, NDCG: m.NDCG, P: m.P, R: m.R, MAP: m.AP, Queries: len(rep.PerQuery)}
		for _, s := range systems {
			if s.name == name {
				r.Space = s.agg.Space()
			}
		}
		if name != "gn-meanpool" {
			col := rep.Column(func(m eval.QueryMetrics) float64 { return m.NDCG })
			diff, lo, hi, err := eval.PairedBootstrapCI(col, base, eval.DefaultResamples, eval.DefaultSeed, eval.DefaultAlpha)
			if err == nil {
				pv, err := eval.PairedRandomizationP(col, base, eval.DefaultResamples, eval.DefaultSeed)
				if err == nil {
					r.DiffVsMeanPool, r.CILow, r.CIHigh, r.PValue = &diff, &lo, &hi, &pv
				}
			}
		}
		sum.Systems = append(sum.Systems, r)
		sum.SkippedQueries = rep.Skipped
		f, err := os.Create(filepath.Join(outDir, "per-query-"+name+".tsv"))
		if err != nil {
			return nil, err
		}
		werr := eval.WritePerQuery(f, rep)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return nil, werr
		}
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := atomicfile.Write(filepath.Join(outDir, "eval-summary.json"), append(b, '\n')); err != nil {
		return nil, err
	}
	return sum, nil
}

// encodeCounts are the window counts of encodeSides, both sides together.
type encodeCounts struct {
	Windows   int64 `json:"windows"`
	GNWindows int64 `json:"gn_windows"`        // cache misses, embedded by the GN
	GNShared  int64 `json:"gn_windows_shared"` // cache misses that took an identical in-flight window's vector
	CacheHits int64 `json:"cache_hits"`        // served from the chunk cache: GN work avoided
}

// encodeSides runs the dataset's corpus (source "c") and queries (source "q") through the
// pipeline as a mean-pool run, leaving every window in the chunk cache and every document's
// manifest (doc id "c:<id>" or "q:<id>") in the cache index. The documents are read from memory
// (connectors/memsource); vectors and state go under outDir.
func encodeSides(ctx context.Context, cfg *pipelines.Config, ds *eval.Dataset, outDir string) (encodeCounts, error) {
	var n encodeCounts
	sides := []struct {
		name, what string
		len        int
		at         func(int) memsource.Doc
	}{
		{"c", "corpus", len(ds.Corpus), func(i int) memsource.Doc {
			return memsource.Doc{ID: ds.Corpus[i].ID, Title: ds.Corpus[i].Title, Text: ds.Corpus[i].Text}
		}},
		{"q", "queries", len(ds.Queries), func(i int) memsource.Doc { return memsource.Doc{ID: ds.Queries[i].ID, Text: ds.Queries[i].Text} }},
	}
	for _, side := range sides {
		c := *cfg
		c.Name = "eval-" + side.name
		c.Source = pipelines.SourceConfig{Type: "memory", Path: side.what, Name: side.name}
		c.Aggregate = pipelines.AggregateConfig{Type: "meanpool", SingleChunk: "reign"}
		c.Sinks = []pipelines.SinkConfig{{Type: "parquet", Dir: filepath.Join(outDir, "vectors-"+side.name)}}
		c.DeadLetter.Path = filepath.Join(outDir, "deadletter.jsonl")
		c.Run.StateDir, c.Run.Summary, c.Run.Progress = filepath.Join(outDir, "state"), "", "log"
		// Every document is encoded, blank ones too: a corpus is scored whole, and the
		// reference embeds an empty text as the one window [CLS][SEP] (README, "Empty
		// documents"). A skipped document would have no manifest to rank.
		src, err := memsource.New(memsource.Options{Source: side.name, Len: side.len, At: side.at, KeepEmpty: true})
		if err != nil {
			return n, err
		}
		rs, err := runFrom(ctx, &c, src)
		if err != nil {
			return n, fmt.Errorf("encoding the %s: %w", side.what, err)
		}
		if rs.DocsFailed > 0 {
			return n, fmt.Errorf("encoding the %s: %d documents failed (see %s)", side.what, rs.DocsFailed, c.DeadLetter.Path)
		}
		n.Windows += rs.Windows
		n.GNWindows += rs.GNWindows
		n.GNShared += rs.GNShared
		n.CacheHits += rs.CacheHits
	}
	return n, nil
}

// firstChunk is the bare GN on the first window only (the truncated baseline): the first chunk
// embedding, already L2-normalised, in the GN space.
type firstChunk struct{ mp *aggregate.MeanPool }

func (f firstChunk) Space() string { return f.mp.Space() }
func (f firstChunk) Dim() int      { return f.mp.Dim() }
func (f firstChunk) Aggregate(chunks [][]float32, out []float32) error {
	return f.mp.Aggregate(chunks[:1], out)
}

// vectorsFromCache aggregates the listed documents (source prefix + id) from their manifests
// and cached chunk embeddings.
func vectorsFromCache(cache *shardcache.Cache, dim int, agg aggregate.Aggregator, source string, ids []string) ([][]float32, error) {
	out := make([][]float32, len(ids))
	for i, id := range ids {
		m, ok, err := cache.Manifest(source + ":" + id)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("document %s:%s has no manifest in the cache", source, id)
		}
		chunks := make([][]float32, len(m.Keys))
		for j, key := range m.Keys {
			chunks[j] = make([]float32, dim)
			hit, err := cache.Get(key, chunks[j])
			if err != nil {
				return nil, err
			}
			if !hit {
				return nil, fmt.Errorf("document %s:%s window %d is not cached", source, id, j)
			}
		}
		a := agg
		if r, ok := a.(aggregate.Router); ok {
			a = r.Route(len(chunks))
		}
		out[i] = make([]float32, a.Dim())
		if err := a.Aggregate(chunks, out[i]); err != nil {
			return nil, fmt.Errorf("document %s:%s: %w", source, id, err)
		}
	}
	return out, nil
}
