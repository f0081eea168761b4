// Package eval scores a pipeline on a retrieval benchmark: it encodes the benchmark's corpus
// and queries through the pipeline (chunk cache included) and compares, on the same data in
// one run, BM25 over the same text, the bare GN on the first window only, the GN chunked
// mean-pool and, when a checkpoint is configured, REIGN, with paired significance against the
// mean-pool. The data may be in any layout pipelines/quality/dataset reads.
package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/pipelines/engine/reaggregate"
	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
	"github.com/reignpipe/reignpipe/pipelines/quality/dataset"
	"github.com/reignpipe/reignpipe/pipelines/quality/retrieval"
	"github.com/reignpipe/reignpipe/stages/aggregate"
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

// Summary is what `reignpipe eval` prints and writes to OUT/eval-summary.json.
type Summary struct {
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

// Options are an evaluation's settings besides the pipeline and the data.
type Options struct {
	Split    string
	K        int
	DropSelf bool   // drop hits whose id equals the query id
	Out      string // vectors, state, per-query results and the summary
	Encode   Encoder
	// OnSubtask, when set, receives each subtask's summary as EvaluateSubtasks finishes it.
	OnSubtask func(*Summary)
}

// Baseline is the system every other one is compared with.
const Baseline = "gn-meanpool"

// Evaluate scores every system on src's split and writes OUT/per-query-<system>.tsv and
// OUT/eval-summary.json; data names the benchmark in the summary.
func Evaluate(ctx context.Context, cfg *pipelines.Config, src *dataset.Source, data string, o Options) (*Summary, error) {
	full, err := src.Dataset(o.Split)
	if err != nil {
		return nil, err
	}
	// Only the split's judged queries are encoded: the others would cost GN time and score
	// nothing (DAPFAM's test split judges 15% of its queries, LoCo's subtasks their own).
	ds := &beir.Dataset{Corpus: full.Corpus, Qrels: full.Qrels}
	for _, q := range full.Queries {
		if _, judged := full.Qrels[q.ID]; judged {
			ds.Queries = append(ds.Queries, q)
		}
	}
	if len(ds.Queries) == 0 {
		return nil, fmt.Errorf("eval: split %q judges none of the %d queries", o.Split, len(full.Queries))
	}
	k := o.K
	sum := &Summary{Data: data, Format: src.Format, Split: o.Split, K: k, SelfMatch: o.DropSelf,
		Corpus: len(ds.Corpus), Queries: len(ds.Queries), RecordsSkipped: src.Skipped}
	exclude := func(queryID string) string {
		if o.DropSelf {
			return queryID
		}
		return ""
	}

	// 1. Both sides through the pipeline: fills the chunk cache and the doc manifests every
	// system below is computed from.
	enc, err := EncodeSides(ctx, o.Encode, cfg, ds, o.Out)
	if err != nil {
		return nil, err
	}
	sum.GNWindows = enc.GNWindows

	// 2. Every embedding system from the cache, without the GN.
	withReign := cfg.Aggregate.Type == "reign"
	pp, err := parts.Open(cfg, parts.Want{Cache: true, Aggregator: withReign})
	if err != nil {
		return nil, err
	}
	defer pp.Close()
	meanPool, err := aggregate.NewMeanPool(pp.GN.Dim, pp.GN.Fingerprint)
	if err != nil {
		return nil, err
	}
	type system struct {
		name string
		agg  aggregate.Aggregator
	}
	systems := []system{{"gn-truncated", firstChunk{meanPool}}, {Baseline, meanPool}}
	if withReign {
		systems = append(systems, system{"reign", pp.Aggregator})
	}

	corpusIDs := make([]string, len(ds.Corpus))
	for i, d := range ds.Corpus {
		corpusIDs[i] = d.ID
	}
	rd := reaggregate.NewReader(pp.Cache, pp.GN.Dim)
	reports := map[string]*retrieval.Report{}
	var order []string
	for _, sys := range systems {
		cv := make([][]float32, len(corpusIDs))
		for i, id := range corpusIDs {
			if cv[i], err = rd.Vector(CorpusSource+":"+id, sys.agg); err != nil {
				return nil, fmt.Errorf("%s: %w", sys.name, err)
			}
		}
		rep, err := retrieval.NewReport(k, 1)
		if err != nil {
			return nil, err
		}
		for _, q := range ds.Queries {
			qv, err := rd.Vector(QuerySource+":"+q.ID, sys.agg)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", sys.name, err)
			}
			hits, err := retrieval.TopK(qv, cv, corpusIDs, k, exclude(q.ID))
			if err != nil {
				return nil, err
			}
			if _, err := rep.Add(q.ID, retrieval.HitIDs(hits), ds.Qrels[q.ID]); err != nil {
				return nil, err
			}
		}
		reports[sys.name] = rep
		order = append(order, sys.name)
	}
	// BM25 over the same text.
	bm, err := retrieval.NewBM25(retrieval.DefaultK1, retrieval.DefaultB)
	if err != nil {
		return nil, err
	}
	for _, d := range ds.Corpus {
		if err := bm.Index(d.ID, retrieval.Tokenize(d.Text)); err != nil {
			return nil, err
		}
	}
	bmRep, err := retrieval.NewReport(k, 1)
	if err != nil {
		return nil, err
	}
	for _, q := range ds.Queries {
		if _, err := bmRep.Add(q.ID, retrieval.HitIDs(bm.Search(retrieval.Tokenize(q.Text), k, exclude(q.ID))), ds.Qrels[q.ID]); err != nil {
			return nil, err
		}
	}
	reports["bm25"] = bmRep
	order = append([]string{"bm25"}, order...)

	ndcg := func(m retrieval.QueryMetrics) float64 { return m.NDCG }
	base := reports[Baseline].Column(ndcg)
	for _, name := range order {
		rep := reports[name]
		m := rep.Mean()
		r := SystemResult{System: name, NDCG: m.NDCG, P: m.P, R: m.R, MAP: m.AP, Queries: len(rep.PerQuery)}
		for _, s := range systems {
			if s.name == name {
				r.Space = s.agg.Space()
			}
		}
		if name != Baseline {
			col := rep.Column(ndcg)
			diff, lo, hi, err := retrieval.PairedBootstrapCI(col, base, retrieval.DefaultResamples, retrieval.DefaultSeed, retrieval.DefaultAlpha)
			if err == nil {
				pv, err := retrieval.PairedRandomizationP(col, base, retrieval.DefaultResamples, retrieval.DefaultSeed)
				if err == nil {
					r.DiffVsMeanPool, r.CILow, r.CIHigh, r.PValue = &diff, &lo, &hi, &pv
				}
			}
		}
		sum.Systems = append(sum.Systems, r)
		sum.SkippedQueries = rep.Skipped
		if err := writePerQuery(filepath.Join(o.Out, "per-query-"+name+".tsv"), rep); err != nil {
			return nil, err
		}
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := atomicfile.Write(filepath.Join(o.Out, "eval-summary.json"), append(b, '\n')); err != nil {
		return nil, err
	}
	return sum, nil
}

func writePerQuery(path string, rep *retrieval.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	werr := retrieval.WritePerQuery(f, rep)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// firstChunk is the bare GN on the first window only (the truncated baseline): the first chunk
// embedding, already L2-normalised, in the GN space.
type firstChunk struct{ mp *aggregate.MeanPool }

func (f firstChunk) Space() string { return f.mp.Space() }
func (f firstChunk) Dim() int      { return f.mp.Dim() }
func (f firstChunk) Aggregate(chunks [][]float32, out []float32) error {
	return f.mp.Aggregate(chunks[:1], out)
}
