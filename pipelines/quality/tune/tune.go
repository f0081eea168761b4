// Package tune is `reignpipe tune`: it adapts REIGN to a corpus already in the chunk cache and
// promotes it over the GN mean-pool only when it wins on held-out documents. Examples come from
// the cached window sequences alone (0 GN forward passes): each document of at least
// MinWindows windows is cut into two contiguous parts, the first a query and the second its
// positive. Documents go to train / validation / test by a seeded hash of their id, the REIGN
// trainer (ops/train, through pipelines/quality/train) trains on train and selects on validation, and
// the test queries are scored with the selected checkpoint and with the mean-pool of the same
// chunks, paired, as `reignpipe eval` scores systems.
package tune

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/engine/launch"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/pipelines/engine/reaggregate"
	"github.com/reignpipe/reignpipe/pipelines/quality/retrieval"
	"github.com/reignpipe/reignpipe/pipelines/quality/train"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// MinWindows is the fewest windows a document needs to give an example: one window for each
// part. Shorter documents are counted and left out.
const MinWindows = 2

// BaseL3From is the size rule: with at least this many training documents tune trains base-l3,
// with fewer small-l2 (a larger encoder needs more pairs; a heuristic, not yet measured here).
const BaseL3From = 5000

// SizeFor is the REIGN size tune trains for trainDocs training documents.
func SizeFor(trainDocs int) string {
	if trainDocs >= BaseL3From {
		return "base-l3"
	}
	return "small-l2"
}

// Split names.
const (
	Train = "train"
	Val   = "val"
	Test  = "test"
)

// Assign is the split of docID under seed: an FNV-1a hash of the seed and the id, modulo 100,
// below testPct is test, below testPct+valPct validation, the rest train. It depends on the id
// alone, so a document keeps its split as the corpus grows.
func Assign(docID string, seed int64, valPct, testPct int) string {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte(docID))
	switch r := int(h.Sum64() % 100); {
	case r < testPct:
		return Test
	case r < testPct+valPct:
		return Val
	default:
		return Train
	}
}

// Halves cuts a document's window keys into the query part (the first half, rounded down)
// and the positive part (the rest). ok is false below MinWindows.
func Halves(keys []uint64) (query, positive []uint64, ok bool) {
	if len(keys) < MinWindows {
		return nil, nil, false
	}
	return keys[:len(keys)/2], keys[len(keys)/2:], true
}

// Decide is the promotion rule: REIGN replaces the mean-pool only when the lower end of the
// 95% paired-bootstrap interval of REIGN − mean-pool (nDCG@10 on the test halves) is above 0.
// ciErr is the error the interval came with (too few test queries, say): no interval, no
// promotion.
func Decide(diff, lo, hi float64, ciErr error) (promote bool, reason string) {
	if ciErr != nil {
		return false, fmt.Sprintf("no interval (%v): keeping the mean-pool", ciErr)
	}
	if lo > 0 {
		return true, fmt.Sprintf("REIGN − mean-pool nDCG@10 %+.4f, 95%% CI [%+.4f, %+.4f] lies above 0: REIGN promoted", diff, lo, hi)
	}
	return false, fmt.Sprintf("REIGN − mean-pool nDCG@10 %+.4f, 95%% CI [%+.4f, %+.4f] does not lie above 0: keeping the mean-pool", diff, lo, hi)
}

// Options are a tune run's settings besides the pipeline.
type Options struct {
	Out          string
	Size         string // "" = SizeFor(training documents)
	Epochs, Seed int
	// SplitSeed seeds the document split; 0 means Seed. Training under several seeds
	// on one split keeps the test documents the same.
	SplitSeed       int
	ValPct, TestPct int
	// Only keeps the documents whose id starts with one of these prefixes (all when empty).
	// TestOnly, when set, draws the test documents from these prefixes instead, the training
	// and validation ones still from Only: a checkpoint trained on some sources scored on
	// another (leave one domain out).
	Only, TestOnly []string
	// Checkpoint scores this REIGN checkpoint instead of training one.
	Checkpoint string
	// Apply re-aggregates the corpus with a promoted checkpoint into the configured sinks.
	Apply          bool
	Python         string // empty: train.Python's default
	TrainerDir     string // empty: train.Dir's default
	Extra          []string
	Stdout, Stderr io.Writer
}

// Figures are one system's mean nDCG@10 on the test halves.
type Figures struct {
	MeanPool float64 `json:"meanpool_ndcg"`
	REIGN    float64 `json:"reign_ndcg"`
	Diff     float64 `json:"diff"`
	CILow    float64 `json:"ci_low"`
	CIHigh   float64 `json:"ci_high"`
	PValue   float64 `json:"p_value"`
}

// QueryScore is one test query's nDCG@10 under both systems.
type QueryScore struct {
	DocID    string  `json:"doc_id"`
	MeanPool float64 `json:"meanpool"`
	REIGN    float64 `json:"reign"`
}

// Summary is DIR/tune-summary.json.
type Summary struct {
	Pipeline  string   `json:"pipeline"`
	Out       string   `json:"out"`
	Seed      int      `json:"seed"`
	SplitSeed int      `json:"split_seed"`
	Only      []string `json:"only,omitempty"`
	TestOnly  []string `json:"test_only,omitempty"`
	// Scored is the checkpoint scored: DIR/train/best, or the one given with --checkpoint.
	Scored string `json:"scored_checkpoint"`
	// Documents in the cache, those with at least MinWindows windows, and per split.
	Documents  int            `json:"documents"`
	MinWindows int            `json:"min_windows"`
	Usable     int            `json:"usable_documents"`
	Splits     map[string]int `json:"splits"`
	// GNWindows counts windows the GN embedded for tune: none, since no GN session is opened
	// (examples, training, scoring and --apply read the chunk cache only).
	GNWindows    int64  `json:"gn_windows"`
	Size         string `json:"size"`
	SizeRule     string `json:"size_rule"`
	Epochs       int    `json:"epochs"`
	BestEpoch    int    `json:"best_epoch,omitempty"`
	IndexWindows int64  `json:"index_windows"`
	K            int    `json:"k"`
	TestQueries  int    `json:"test_queries"`
	// Figures of REIGN against the mean-pool on the test halves; nil when no interval could be
	// computed.
	Figures      *Figures             `json:"figures,omitempty"`
	Promoted     bool                 `json:"promoted"`
	Reason       string               `json:"reason"`
	Checkpoint   string               `json:"checkpoint,omitempty"`
	Applied      string               `json:"applied,omitempty"`
	ApplyRun     *reaggregate.Summary `json:"apply,omitempty"`
	PerQuery     []QueryScore         `json:"per_query"`
	TrainSeconds float64              `json:"train_seconds"`
	WallSeconds  float64              `json:"wall_seconds"`
}

type example struct {
	id              string
	query, positive []uint64
}

// Run is the whole job.
func Run(ctx context.Context, cfg *pipelines.Config, o Options) (*Summary, error) {
	start := time.Now()
	if o.Out == "" {
		return nil, errors.New("tune: --out is required")
	}
	if o.Size != "" && !slices.Contains(train.Sizes, o.Size) {
		return nil, fmt.Errorf("tune: --size %q: want one of %s", o.Size, strings.Join(train.Sizes, ", "))
	}
	if o.Epochs < 1 && o.Checkpoint == "" {
		return nil, fmt.Errorf("tune: --epochs %d: must be at least 1", o.Epochs)
	}
	if o.Checkpoint != "" {
		if fi, err := os.Stat(filepath.Join(o.Checkpoint, "model.safetensors")); err != nil || fi.IsDir() {
			return nil, fmt.Errorf("tune: --checkpoint %s: not a REIGN checkpoint (config.json and model.safetensors, as train/best or tune's checkpoint/ holds)", o.Checkpoint)
		}
	}
	if o.SplitSeed == 0 {
		o.SplitSeed = o.Seed
	}
	if o.ValPct < 1 || o.TestPct < 1 || o.ValPct+o.TestPct > 90 {
		return nil, fmt.Errorf("tune: --val-pct %d and --test-pct %d: each at least 1, together at most 90", o.ValPct, o.TestPct)
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	sum := &Summary{Pipeline: cfg.Name, Out: o.Out, Seed: o.Seed, SplitSeed: o.SplitSeed, Only: o.Only, TestOnly: o.TestOnly, MinWindows: MinWindows, K: 10, Epochs: o.Epochs,
		Splits: map[string]int{Train: 0, Val: 0, Test: 0}}

	// 1. Examples from the manifests: no GN, the cache only.
	pp, err := parts.Open(cfg, parts.Want{Cache: true})
	if err != nil {
		return nil, err
	}
	sp := schemas.Space{Fingerprint: pp.GN.Fingerprint, K: cfg.Chunking.K, S: cfg.Chunking.S, Dim: pp.GN.Dim}
	bySplit := map[string][]example{}
	err = pp.Cache.ScanManifests(func(m shardcache.Manifest) error {
		sum.Documents++
		q, p, ok := Halves(m.Keys)
		if !ok || strings.ContainsAny(m.DocID, "\t\r\n") { // qrels are TSV
			return nil
		}
		s := Assign(m.DocID, int64(o.SplitSeed), o.ValPct, o.TestPct)
		if !hasPrefix(m.DocID, o.Only) && !(s == Test && o.TestOnly != nil) {
			return nil
		}
		if s == Test && o.TestOnly != nil && !hasPrefix(m.DocID, o.TestOnly) {
			return nil // a test document of a training source: neither trained on nor scored
		}
		bySplit[s] = append(bySplit[s], example{m.DocID, slices.Clone(q), slices.Clone(p)})
		return nil
	})
	if cerr := pp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	for s, exs := range bySplit {
		sum.Splits[s] = len(exs)
		sum.Usable += len(exs)
	}
	need := []string{Train, Val, Test}
	if o.Checkpoint != "" {
		need = []string{Test}
	}
	for _, s := range need {
		if len(bySplit[s]) < 2 {
			return nil, fmt.Errorf("tune: %d of the cache's %d documents have %d+ windows, %d of them in %s: need at least 2 in each of train, val and test",
				sum.Usable, sum.Documents, MinWindows, len(bySplit[s]), s)
		}
	}
	if o.Checkpoint != "" {
		sum.Scored, sum.Size, sum.SizeRule, sum.Epochs = o.Checkpoint, "", "--checkpoint: not trained", 0
	} else if err := trainREIGN(ctx, cfg, o, sp, bySplit, sum); err != nil {
		return nil, err
	}

	// 4. Score the test halves, REIGN (Go, ONNX Runtime) against the mean-pool of the same chunks.
	rcfg := *cfg
	rcfg.Aggregate = components.WithCheckpoint(cfg.Aggregate, sum.Scored)
	if err := score(&rcfg, bySplit[Test], sum); err != nil {
		return nil, err
	}

	// 5. Decide; promote and apply.
	if sum.Promoted {
		if sum.Checkpoint, sum.ApplyRun, err = Promote(ctx, cfg, sum.Scored, o.Out, o.Apply); err != nil {
			return nil, err
		}
		if sum.ApplyRun != nil {
			sum.Applied = sum.ApplyRun.Output
		}
	}
	sum.WallSeconds = time.Since(start).Seconds()
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := atomicfile.Write(filepath.Join(o.Out, "tune-summary.json"), append(b, '\n')); err != nil {
		return nil, err
	}
	return sum, nil
}

// trainREIGN writes the trainer's inputs under o.Out and trains, selecting on validation.
func trainREIGN(ctx context.Context, cfg *pipelines.Config, o Options, sp schemas.Space, bySplit map[string][]example, sum *Summary) (err error) {
	py, err := train.Python(o.Python)
	if err != nil {
		return err
	}
	dir, err := train.Dir(o.TrainerDir)
	if err != nil {
		return err
	}
	sum.Size, sum.SizeRule = o.Size, "--size"
	if o.Size == "" {
		sum.Size = SizeFor(len(bySplit[Train]))
		sum.SizeRule = fmt.Sprintf("small-l2 below %d training documents, base-l3 from there (%d)", BaseL3From, len(bySplit[Train]))
	}

	// 2. The trainer's inputs: the sequences index (train and val documents only; the test
	// documents never reach the trainer) and qrels pairing each query part with its positive.
	data := filepath.Join(o.Out, "splits")
	if err := os.MkdirAll(filepath.Join(data, "qrels"), 0o755); err != nil {
		return err
	}
	var seqs []train.Sequence
	for _, s := range []string{Train, Val} {
		var qrels strings.Builder
		qrels.WriteString("query-id\tcorpus-id\tscore\n")
		for _, e := range bySplit[s] {
			seqs = append(seqs, train.Sequence{DocID: e.id, Side: "q", Keys: e.query}, train.Sequence{DocID: e.id, Side: "c", Keys: e.positive})
			fmt.Fprintf(&qrels, "%s\t%s\t1\n", e.id, e.id)
		}
		if err := atomicfile.Write(filepath.Join(data, "qrels", s+".tsv"), []byte(qrels.String())); err != nil {
			return err
		}
	}
	seqPath := filepath.Join(o.Out, train.SequencesFile)
	if sum.IndexWindows, err = train.WriteSequences(seqPath, sp, seqs); err != nil {
		return err
	}

	// 3. Train, selecting on validation (the trainer keeps best/ by val nDCG@10).
	trainOut := filepath.Join(o.Out, "train")
	args := []string{"--shards", filepath.Join(cfg.Cache.Dir, "shards"), "--sequences", seqPath,
		"--data", data, "--out", trainOut, "--size", sum.Size, "--epochs", strconv.Itoa(o.Epochs),
		"--seed", strconv.Itoa(o.Seed), "--loss", "cosine3", "--positive-min-score", "1",
		// A query part and its positive share the document id: the positive must not be dropped.
		"--keep-self", "--test-split", "none",
		"--gn-name", cfg.GN.Name, "--expect-fingerprint", sp.Fingerprint}
	args = append(args, o.Extra...)
	t0 := time.Now()
	if err := train.RunTrainer(ctx, py, dir, args, o.Stdout, o.Stderr); err != nil {
		return err
	}
	sum.TrainSeconds = time.Since(t0).Seconds()
	var rep struct {
		BestEpoch int `json:"best_epoch"`
	}
	if b, err := os.ReadFile(filepath.Join(trainOut, "eval-trainer.json")); err == nil {
		_ = json.Unmarshal(b, &rep)
	}
	sum.BestEpoch = rep.BestEpoch
	sum.Scored = filepath.Join(trainOut, "best")
	return nil
}

// Promote copies the winning checkpoint to DIR/checkpoint (config.json, model.safetensors and
// the manifest naming its GN) and, with apply, re-aggregates cfg's cached corpus with it into
// cfg's configured sinks (0 GN passes: the cache holds every window). It is what tune does
// when its rule promotes; it is exported so that the path can be run on its own.
func Promote(ctx context.Context, cfg *pipelines.Config, best, out string, apply bool) (ckpt string, applied *reaggregate.Summary, err error) {
	ckpt = filepath.Join(out, "checkpoint")
	// --checkpoint DIR/checkpoint with --out DIR scores the promoted checkpoint in place:
	// copying it onto itself would first remove it.
	if same, err := samePath(best, ckpt); err != nil {
		return "", nil, err
	} else if !same {
		if err := copyDir(best, ckpt); err != nil {
			return "", nil, err
		}
	}
	if !apply {
		return ckpt, nil, nil
	}
	rcfg := *cfg
	rcfg.Aggregate = components.WithCheckpoint(cfg.Aggregate, ckpt)
	as, err := reaggregate.RunInto(ctx, &rcfg, launch.ConfiguredSinks(ctx, &rcfg))
	if err != nil {
		return ckpt, &as, fmt.Errorf("tune: --apply: %w", err)
	}
	return ckpt, &as, nil
}

func samePath(a, b string) (bool, error) {
	aa, err := filepath.Abs(a)
	if err != nil {
		return false, err
	}
	bb, err := filepath.Abs(b)
	if err != nil {
		return false, err
	}
	if aa == bb {
		return true, nil
	}
	ai, aerr := os.Stat(aa)
	bi, berr := os.Stat(bb)
	return aerr == nil && berr == nil && os.SameFile(ai, bi), nil
}

func hasPrefix(id string, prefixes []string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(id, p) {
			return true
		}
	}
	return false
}

// score fills sum's figures, per-query scores and decision: each test query part retrieves
// among all test positive parts.
func score(cfg *pipelines.Config, test []example, sum *Summary) (err error) {
	pp, err := parts.Open(cfg, parts.Want{Cache: true, Aggregator: true})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, pp.Close()) }()
	meanPool, err := aggregate.NewMeanPool(pp.GN.Dim, pp.GN.Fingerprint)
	if err != nil {
		return err
	}
	rd := reaggregate.NewReader(pp.Cache, pp.GN.Dim)
	vec := func(agg aggregate.Aggregator, id string, keys []uint64) ([]float32, error) {
		chunks, err := rd.Chunks(shardcache.Manifest{DocID: id, Keys: keys})
		if err != nil {
			return nil, fmt.Errorf("tune: document %s: %w", id, err)
		}
		v, err := aggregate.Vectors(agg, nil, chunks)
		return v.Vector, err
	}
	systems := []aggregate.Aggregator{meanPool, pp.Aggregator}
	ids := make([]string, len(test))
	for i, e := range test {
		ids[i] = e.id
	}
	var cols [2][]float64
	for s, agg := range systems {
		cv := make([][]float32, len(test))
		for i, e := range test {
			if cv[i], err = vec(agg, e.id, e.positive); err != nil {
				return err
			}
		}
		rep, err := retrieval.NewReport(sum.K, 1)
		if err != nil {
			return err
		}
		for _, e := range test {
			qv, err := vec(agg, e.id, e.query)
			if err != nil {
				return err
			}
			hits, err := retrieval.TopK(qv, cv, ids, sum.K, "")
			if err != nil {
				return err
			}
			if _, err := rep.Add(e.id, retrieval.HitIDs(hits), map[string]int{e.id: 1}); err != nil {
				return err
			}
		}
		cols[s] = rep.Column(func(m retrieval.QueryMetrics) float64 { return m.NDCG })
	}
	sum.TestQueries = len(test)
	sum.PerQuery = make([]QueryScore, len(test))
	for i, e := range test {
		sum.PerQuery[i] = QueryScore{DocID: e.id, MeanPool: cols[0][i], REIGN: cols[1][i]}
	}
	diff, lo, hi, ciErr := retrieval.PairedBootstrapCI(cols[1], cols[0], retrieval.DefaultResamples, retrieval.DefaultSeed, retrieval.DefaultAlpha)
	if ciErr == nil {
		p, perr := retrieval.PairedRandomizationP(cols[1], cols[0], retrieval.DefaultResamples, retrieval.DefaultSeed)
		if perr != nil {
			ciErr = perr
		} else {
			sum.Figures = &Figures{MeanPool: mean(cols[0]), REIGN: mean(cols[1]), Diff: diff, CILow: lo, CIHigh: hi, PValue: p}
		}
	}
	sum.Promoted, sum.Reason = Decide(diff, lo, hi, ciErr)
	return nil
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// copyDir copies the checkpoint's regular files (config.json, model.safetensors,
// reignpipe-manifest.json) into a fresh dst.
func copyDir(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := atomicfile.Write(filepath.Join(dst, e.Name()), b); err != nil {
			return err
		}
	}
	return nil
}
