// Command embedonce measures whether a window is embedded once per cluster or once per embed
// worker, in the first pass over a corpus: the GN windows two embed workers compute together
// against the distinct windows of the corpus, on the real broker (ops/kafka) with the real GN.
//
// Why: started as ops/DISTRIBUTED.md shows (ingest, then the embed workers and the aggregate
// at once), the second worker's join revokes partitions the first is already embedding and both
// embed them; and documents that share text across partitions (patent continuations) are
// embedded by both workers at the same time, neither finding the other's windows in its
// replica yet. The figure is GN windows (summed over the workers) / distinct windows; 1.0 is
// "each window once per cluster". The harness takes the binary as a flag, so the same corpus
// and procedure measure a build before and after a change side by side.
//
//	go run ./ops/bench/embedonce [-bin bin/reignpipe] [-scenarios A,B] [-trials 3]
//	    [-staggers 0s,5s] [-out ops/bench/results/embedonce-DATE.md -label "before (commit X)"]
//
// Scenarios (corpora written by the harness from -seed, English-ish technical prose, K = S = 512):
//   - A: -docs-a distinct documents of one to three windows each;
//   - B: -families-b families of two or three documents sharing a description of three to five
//     windows (first) and each ending with its own claims, the members on different partitions.
//
// Each trial, in a fresh temp dir with a fresh topic prefix (6 partitions, kafka sink, meanpool):
// `stage ingest --idle-exit 2s` to the end of the corpus; then two `stage embed --idle-exit D`
// workers with their own --cache-dir, and `stage aggregate`, started at once (-staggers delays
// the second worker); the workers run until idle, the aggregate until the vector topic holds a
// vector for every chunk record, then gets SIGTERM. From the stages' JSON summaries: inputs
// read and GN windows (sum over the workers); from the corpus (the project's tokenizer and
// chunker): windows and distinct window keys; from `reignpipe materialize` into a fresh cache:
// the distinct windows the cluster's store holds (a check: it must equal the corpus's); with
// kcat: the vector records. The wall time runs from starting the workers to the last vector
// record's timestamp (idle-exit waits excluded). Topics are deleted afterwards unless -keep
// (-delete PREFIX removes a kept trial's). -corpus-only prints what the corpora cut into and
// needs neither broker nor GN pass. The fixed windows share a key only where the text before
// them is the same, so in B the shared description leads and the distinct claims follow.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/reignpipe/reignpipe/ops/bench/benchenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
)

type options struct {
	benchenv.Section
	brokers, kcat, gn string
	scenarios         []string
	trials            int
	seed              uint64
	docsA, familiesB  int
	partitions        int
	staggers          []time.Duration
	embedIdle         time.Duration
	trialTimeout      time.Duration
	root              string
	keep              bool
}

const pkg = "ops/bench/embedonce"

func main() { benchenv.Main("embedonce", run) }

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := benchenv.Flags(pkg, "GN windows of two embed workers against the corpus's distinct windows, per scenario and trial,\n"+
		"on the real broker and GN (see the comment at the top of ops/bench/embedonce/main.go).")
	brokers := os.Getenv("REIGNPIPE_KAFKA_BROKERS")
	if brokers == "" {
		brokers = "127.0.0.1:19092"
	}
	var o options
	o.Section.Flags(fs)
	fs.StringVar(&o.brokers, "brokers", brokers, "bootstrap broker (default $REIGNPIPE_KAFKA_BROKERS; ops/kafka start prints it)")
	fs.StringVar(&o.kcat, "kcat", filepath.Join(pipelines.Home(), "tools", "bin", "kcat"), "kcat binary")
	fs.StringVar(&o.gn, "gn", "bge-small-en-v15", "gn.name of the pipeline")
	scen := fs.String("scenarios", "A,B", "scenarios to run, comma-separated: A (distinct documents), B (shared descriptions)")
	fs.IntVar(&o.trials, "trials", 3, "trials per scenario")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the corpora")
	fs.IntVar(&o.docsA, "docs-a", 36, "documents of scenario A")
	fs.IntVar(&o.familiesB, "families-b", 20, "families of scenario B (2 or 3 documents each)")
	fs.IntVar(&o.partitions, "partitions", 6, "transport.kafka.partitions")
	staggers := fs.String("staggers", "0s", "start orders, comma-separated: how long after the first embed worker the second starts (0s: together); each is run -trials times")
	fs.DurationVar(&o.embedIdle, "embed-idle-exit", 20*time.Second, "--idle-exit of the embed workers")
	fs.DurationVar(&o.trialTimeout, "trial-timeout", 30*time.Minute, "give up a trial after this long")
	fs.StringVar(&o.root, "dir", os.TempDir(), "where the trials' temp dirs are made")
	fs.BoolVar(&o.keep, "keep", false, "keep the trials' dirs and topics")
	deletePrefixes := fs.String("delete", "", "delete the topics of trials kept with -keep (their prefixes, comma-separated) and exit")
	corpusOnly := fs.Bool("corpus-only", false, "print each scenario's corpus (documents, windows, distinct windows) and exit: no broker, no GN pass")
	if err := benchenv.Parse(fs, args); err != nil {
		return err
	}
	for _, s := range strings.Split(*scen, ",") {
		s = strings.ToUpper(strings.TrimSpace(s))
		if s != "A" && s != "B" {
			return fmt.Errorf("-scenarios: %q is not A or B", s)
		}
		o.scenarios = append(o.scenarios, s)
	}
	for _, s := range strings.Split(*staggers, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < 0 {
			return fmt.Errorf("-staggers: %q is not a duration >= 0", s)
		}
		o.staggers = append(o.staggers, d)
	}
	if o.trials < 1 || o.docsA < 1 || o.familiesB < 1 || o.partitions < 3 {
		return errors.New("-trials, -docs-a and -families-b must be >= 1, -partitions >= 3 (scenario B puts up to 3 members on different partitions)")
	}
	if err := o.Resolve(); err != nil {
		return err
	}
	if _, err := os.Stat(o.kcat); err != nil {
		return fmt.Errorf("%w (ops/tools unpacks kcat into $REIGNPIPE_HOME/tools/bin)", err)
	}
	if *deletePrefixes != "" {
		var errs []error
		for _, p := range strings.Split(*deletePrefixes, ",") {
			errs = append(errs, deleteTopics(ctx, o.brokers, strings.TrimSpace(p)))
		}
		return errors.Join(errs...)
	}
	if *corpusOnly {
		return describeCorpora(o, stdout)
	}
	root, err := benchenv.Root()
	if err != nil {
		return err
	}
	header := o.Header(root, fmt.Sprintf("Broker: %s at %s", benchenv.KafkaVersion(root), o.brokers))
	fmt.Fprint(os.Stderr, header)

	var results []trialResult
	for _, s := range o.scenarios {
		for _, st := range o.staggers {
			for t := 1; t <= o.trials; t++ {
				fmt.Fprintf(os.Stderr, "embedonce: scenario %s, second worker after %s, trial %d/%d (load %s)\n", s, st, t, o.trials, benchenv.LoadAvg())
				r, err := trial(ctx, o, s, st, t)
				if err != nil {
					return fmt.Errorf("scenario %s stagger %s trial %d: %w", s, st, t, err)
				}
				line, _ := json.Marshal(r.figures)
				fmt.Fprintf(os.Stderr, "embedonce: %s\n", line)
				results = append(results, r)
			}
		}
	}
	report := render(o, header, benchenv.Command(pkg, args), results)
	return o.Write(stdout, "GN windows per distinct window with two embed workers (ops/bench/embedonce)", report)
}

// figures are one trial's numbers, the raw record the report's tables come from.
type figures struct {
	Scenario  string `json:"scenario"`
	Stagger   string `json:"second_worker_after"`
	Trial     int    `json:"trial"`
	Prefix    string `json:"topics"`
	Documents int    `json:"documents"`
	// From the corpus: windows over all documents and distinct window keys.
	CorpusWindows  int `json:"corpus_windows"`
	CorpusDistinct int `json:"corpus_distinct_windows"`
	// Scenario B: families with two members on one raw partition (0 by construction, checked
	// against where the records landed).
	FamiliesSharingPartition int `json:"families_sharing_a_partition"`
	// Records on the raw topic after ingest: the documents, plus what producer retries resent.
	RawRecords int `json:"raw_records"`
	// Per embed worker (a, b).
	Inputs    [2]int64   `json:"inputs_read"`
	Windows   [2]int64   `json:"windows"`
	CacheHits [2]int64   `json:"cache_hits"`
	GN        [2]int64   `json:"gn_windows"`
	GNShared  [2]int64   `json:"gn_windows_shared"`
	Published [2]int64   `json:"windows_published"`
	EmbedWall [2]float64 `json:"embed_wall_seconds"` // includes the idle-exit wait
	// The store as `reignpipe materialize` reads it: distinct windows (applied to an empty
	// cache), duplicate window records (known), conflicts.
	StoreDistinct   int64 `json:"store_distinct_windows"`
	StoreDuplicates int64 `json:"store_duplicate_window_records"`
	StoreConflicts  int64 `json:"store_window_conflicts"`
	ChunkRecords    int   `json:"chunk_records"`
	AggInputs       int64 `json:"aggregate_inputs_read"`
	VectorRecords   int   `json:"vector_records"`
	VectorDocs      int   `json:"vector_documents"`
	// Seconds from starting the workers to the last vector record; the ingest stage's own.
	Wall       float64 `json:"wall_seconds"`
	IngestWall float64 `json:"ingest_wall_seconds"`
	LoadBefore string  `json:"load_before"`
	LoadAfter  string  `json:"load_after"`
}

func (f figures) sum(a [2]int64) int64 { return a[0] + a[1] }

type trialResult struct {
	figures
	summaries map[string]map[string]any // each stage's JSON summary, as printed
}

// embedSummary is the part of an embed worker's summary the figures use.
type embedSummary struct {
	Inputs      int64   `json:"inputs_read"`
	Windows     int64   `json:"windows"`
	CacheHits   int64   `json:"cache_hits"`
	GN          int64   `json:"gn_windows"`
	GNShared    int64   `json:"gn_windows_shared"`
	WallSeconds float64 `json:"wall_seconds"`
	Store       struct {
		WindowsPublished int64 `json:"windows_published"`
	} `json:"store"`
}

func trial(parent context.Context, o options, scenario string, stagger time.Duration, n int) (res trialResult, err error) {
	ctx, cancel := context.WithTimeout(parent, o.trialTimeout)
	defer cancel()
	dir, err := os.MkdirTemp(o.root, "embedonce-*")
	if err != nil {
		return res, err
	}
	prefix := fmt.Sprintf("embedonce-%s-%d-%d", strings.ToLower(scenario), time.Now().Unix(), n)
	defer benchenv.Leftovers("embedonce", o.keep, dir, "topics "+prefix+".*", func(ctx context.Context) error {
		return deleteTopics(ctx, o.brokers, prefix)
	})
	cfgPath, cfg, err := benchenv.Pipeline(dir, pipelineYAML(o, dir, prefix))
	if err != nil {
		return res, err
	}
	c, err := buildCorpus(o, scenario, cfg)
	if err != nil {
		return res, err
	}
	if err := writeJSONL(filepath.Join(dir, "corpus.jsonl"), c.docs); err != nil {
		return res, err
	}
	f := &res.figures
	f.Scenario, f.Stagger, f.Trial, f.Prefix, f.Documents = scenario, stagger.String(), n, prefix, len(c.docs)
	f.CorpusWindows, f.CorpusDistinct = c.windows, c.distinct
	f.LoadBefore = benchenv.LoadAvg()
	res.summaries = map[string]map[string]any{}

	ing, err := start(ctx, dir, "ingest", o.Bin, "stage", "ingest", "--idle-exit", "2s", cfgPath)
	if err != nil {
		return res, err
	}
	if res.summaries["ingest"], err = ing.wait(ctx, nil); err != nil {
		return res, err
	}
	f.IngestWall = time.Since(ing.started).Seconds()
	raw, err := readTopic(ctx, o.kcat, o.brokers, prefix+".raw")
	if err != nil {
		return res, err
	}
	// More records than documents is not an error: a producer retry resends its whole batch,
	// so a partition written before another failed gets the batch twice. The count is kept.
	f.RawRecords = len(raw)
	if f.FamiliesSharingPartition, err = checkPartitions(c, raw); err != nil {
		return res, err
	}

	// The documented order: the embed workers, then the aggregate, all at once.
	t0 := time.Now()
	embedA, err := start(ctx, dir, "embed-a", o.Bin, "stage", "embed", "--idle-exit", o.embedIdle.String(), "--cache-dir", filepath.Join(dir, "cache-a"), cfgPath)
	if err != nil {
		return res, err
	}
	if stagger > 0 {
		select {
		case <-time.After(stagger):
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	embedB, err := start(ctx, dir, "embed-b", o.Bin, "stage", "embed", "--idle-exit", o.embedIdle.String(), "--cache-dir", filepath.Join(dir, "cache-b"), cfgPath)
	if err != nil {
		return res, err
	}
	agg, err := start(ctx, dir, "aggregate", o.Bin, "stage", "aggregate", cfgPath)
	if err != nil {
		return res, err
	}
	defer func() {
		if !agg.exited() {
			agg.stop()
			<-agg.done
		}
	}()
	for i, p := range []*proc{embedA, embedB} {
		var s embedSummary
		if res.summaries[p.label], err = p.wait(ctx, &s); err != nil {
			return res, err
		}
		f.Inputs[i], f.Windows[i], f.CacheHits[i], f.GN[i], f.GNShared[i] = s.Inputs, s.Windows, s.CacheHits, s.GN, s.GNShared
		f.Published[i], f.EmbedWall[i] = s.Store.WindowsPublished, s.WallSeconds
	}
	vecs, chunks, err := awaitVectors(ctx, o, prefix, len(c.docs), agg)
	if err != nil {
		return res, err
	}
	agg.stop()
	var aggSum struct {
		Inputs int64 `json:"inputs_read"`
	}
	if res.summaries["aggregate"], err = agg.wait(ctx, &aggSum); err != nil {
		return res, err
	}
	f.AggInputs, f.ChunkRecords, f.VectorRecords = aggSum.Inputs, chunks, len(vecs)
	docs := map[string]bool{}
	var last time.Time
	for _, v := range vecs {
		docs[v.key] = true
		if v.timestamp.After(last) {
			last = v.timestamp
		}
	}
	f.VectorDocs, f.Wall = len(docs), last.Sub(t0).Seconds()
	f.LoadAfter = benchenv.LoadAvg()

	mat, err := start(ctx, dir, "materialize", o.Bin, "materialize", "--cache-dir", filepath.Join(dir, "store"), cfgPath)
	if err != nil {
		return res, err
	}
	var ms struct {
		Applied   int64 `json:"windows_applied"`
		Known     int64 `json:"windows_known"`
		Conflicts int64 `json:"window_conflicts"`
	}
	if res.summaries["materialize"], err = mat.wait(ctx, &ms); err != nil {
		return res, err
	}
	f.StoreDistinct, f.StoreDuplicates, f.StoreConflicts = ms.Applied, ms.Known, ms.Conflicts
	if ms.Applied != int64(c.distinct) {
		return res, fmt.Errorf("the cluster's store holds %d distinct windows, the corpus cuts into %d: the harness's count of the corpus is wrong or a window is missing", ms.Applied, c.distinct)
	}
	return res, nil
}

// awaitVectors waits, once the embed workers have exited, until the vector topic holds every
// document and as many records as the chunk topic (the aggregate turns each chunk record into
// one vector record), and returns the vector records and the chunk record count. A vector
// topic that stops growing short of that for a minute is an error: the aggregate lost one.
func awaitVectors(ctx context.Context, o options, prefix string, docs int, agg *proc) ([]record, int, error) {
	var lastCount int
	lastChange := time.Now()
	for {
		if agg.exited() {
			return nil, 0, fmt.Errorf("the aggregate stage exited early: %v (see %s)", agg.err, strings.TrimSuffix(agg.out, ".json")+".log")
		}
		chunks, err := readTopic(ctx, o.kcat, o.brokers, prefix+".chunks")
		if err != nil {
			return nil, 0, err
		}
		vecs, err := readTopic(ctx, o.kcat, o.brokers, prefix+".vectors")
		if err != nil {
			return nil, 0, err
		}
		seen := map[string]bool{}
		for _, v := range vecs {
			seen[v.key] = true
		}
		if len(seen) == docs && len(vecs) >= len(chunks) {
			return vecs, len(chunks), nil
		}
		if len(vecs) != lastCount {
			lastCount, lastChange = len(vecs), time.Now()
		} else if time.Since(lastChange) > time.Minute {
			return nil, 0, fmt.Errorf("the vector topic holds %d records for %d of %d documents, the chunk topic %d records, and stopped growing", len(vecs), len(seen), docs, len(chunks))
		}
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// checkPartitions compares where the raw records landed with where the harness computed they
// would, and counts the scenario-B families two of whose members share a partition.
func checkPartitions(c corpus, raw []record) (int, error) {
	landed := map[string]int{}
	for _, r := range raw {
		landed[r.key] = r.partition
	}
	for id, want := range c.partition {
		if got, ok := landed[id]; !ok || got != want {
			return 0, fmt.Errorf("document %s is on raw partition %d (present: %v), murmur2 puts it on %d", id, got, ok, want)
		}
	}
	byFamily := map[int]map[int]bool{}
	shared := 0
	for _, d := range c.docs {
		if d.group < 0 {
			continue
		}
		if byFamily[d.group] == nil {
			byFamily[d.group] = map[int]bool{}
		}
		p := landed[docID(d.ID)]
		if byFamily[d.group][p] {
			shared++
		}
		byFamily[d.group][p] = true
	}
	return shared, nil
}

// buildCorpus writes the scenario's documents from the seed (the same in every trial and for
// every binary) and cuts them with the pipeline's tokenizer and windows.
func buildCorpus(o options, scenario string, cfg *pipelines.Config) (corpus, error) {
	pp, err := parts.Open(cfg, parts.Want{Tokenizer: true})
	if err != nil {
		return corpus{}, err
	}
	defer pp.Close()
	seed := o.seed
	if scenario == "B" {
		seed ^= 0x9e3779b97f4a7c15
	}
	p := &prose{rng: rand.New(rand.NewPCG(seed, 7)), tc: tokenCounter{pp.Tokenizer}}
	var docs []doc
	if scenario == "A" {
		docs = scenarioA(p, o.docsA)
	} else {
		docs = scenarioB(p, o.familiesB, o.partitions)
	}
	return measure(docs, pp.Tokenizer, pp.Params, pp.GN.Fingerprint, o.partitions), nil
}

// describeCorpora prints what each scenario's corpus cuts into, for sizing it.
func describeCorpora(o options, w io.Writer) error {
	dir, err := os.MkdirTemp(o.root, "embedonce-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, cfg, err := benchenv.Pipeline(dir, pipelineYAML(o, dir, "embedonce-corpus"))
	if err != nil {
		return err
	}
	for _, s := range o.scenarios {
		c, err := buildCorpus(o, s, cfg)
		if err != nil {
			return err
		}
		perPart := make([]int, o.partitions)
		chars := 0
		for _, d := range c.docs {
			perPart[c.partition[docID(d.ID)]]++
			chars += len(d.Text)
		}
		fmt.Fprintf(w, "scenario %s: %d documents (%d characters), %d windows, %d distinct (%.2f windows per distinct), documents per raw partition %v\n",
			s, len(c.docs), chars, c.windows, c.distinct, float64(c.windows)/float64(c.distinct), perPart)
	}
	return nil
}

// pipelineYAML is the trial's pipeline: the distributed example of ops/DISTRIBUTED.md with the
// harness's corpus, 6 partitions, the kafka sink and mean-pool, run settings at their defaults.
func pipelineYAML(o options, dir, prefix string) string {
	return fmt.Sprintf(`version: 1
name: embedonce
source: {type: jsonl, path: %q, name: %s}
gn: {name: %s}
chunking: {k: 512, s: 512}
aggregate: {type: meanpool}
cache: {dir: %q}
sinks:
  - {type: kafka}
dead_letter: {path: %q}
run: {state_dir: %q}
transport:
  type: kafka
  kafka: {brokers: [%q], topics: %q, partitions: %d}
`, filepath.Join(dir, "corpus.jsonl"), source, o.gn, filepath.Join(dir, "cache"), filepath.Join(dir, "deadletter.jsonl"),
		filepath.Join(dir, "state"), o.brokers, prefix, o.partitions)
}

func render(o options, header, command string, rs []trialResult) string {
	var b strings.Builder
	b.WriteString(o.Heading(header, command))
	fmt.Fprintf(&b, "Pipeline (per trial, paths and topic prefix filled in): K = S = 512, %d partitions, kafka sink, meanpool, run.* defaults; "+
		"embed workers `--idle-exit %s`; worker a, then worker b (after the delay in the table's second column: 0s is together), then the aggregate.\n\n", o.partitions, o.embedIdle)
	fmt.Fprintf(&b, "Corpora (seed %d, written by the harness): **A** %d distinct documents of one to three windows; **B** %d families of two or three documents "+
		"sharing a description of three to five windows (first), each member ending with its own claims, the members on pairwise different raw partitions. "+
		"Distinct windows are the corpus's distinct window keys (the project's tokenizer and chunker), checked against `reignpipe materialize` of the cluster's store.\n\n",
		o.seed, o.docsA, o.familiesB)
	b.WriteString("| scenario | b after | trial | documents | raw records | inputs read (a + b) | distinct windows | GN windows (a + b) | GN / distinct | windows published (a + b) | vector records | wall s | load before → after |\n")
	b.WriteString("|---|---:|---:|---:|---:|---|---:|---|---:|---|---:|---:|---|\n")
	for _, r := range rs {
		f := r.figures
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d (%d + %d) | %d | %d (%d + %d) | **%.2f** | %d (%d + %d) | %d | %.1f | %s → %s |\n",
			f.Scenario, f.Stagger, f.Trial, f.Documents, f.RawRecords, f.sum(f.Inputs), f.Inputs[0], f.Inputs[1], f.CorpusDistinct,
			f.sum(f.GN), f.GN[0], f.GN[1], float64(f.sum(f.GN))/float64(f.CorpusDistinct),
			f.sum(f.Published), f.Published[0], f.Published[1], f.VectorRecords, f.Wall, f.LoadBefore, f.LoadAfter)
	}
	b.WriteString("\nPer scenario (median over trials; the target after the fix is GN / distinct ≤ 1.1):\n\n")
	b.WriteString("| scenario | b after | documents | corpus windows | distinct windows | inputs / documents | GN / distinct (min – max) | vector records / documents | wall s (min – max) |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---|---:|---|\n")
	for _, key := range groups(rs) {
		var ratio, inputs, vecs, wall []float64
		var f figures
		for _, r := range rs {
			if r.Scenario+" "+r.Stagger != key {
				continue
			}
			f = r.figures
			ratio = append(ratio, float64(f.sum(f.GN))/float64(f.CorpusDistinct))
			inputs = append(inputs, float64(f.sum(f.Inputs))/float64(f.Documents))
			vecs = append(vecs, float64(f.VectorRecords)/float64(f.Documents))
			wall = append(wall, f.Wall)
		}
		if len(ratio) == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %.2f | %.2f (%.2f – %.2f) | %.2f | %.1f (%.1f – %.1f) |\n", f.Scenario, f.Stagger, f.Documents, f.CorpusWindows, f.CorpusDistinct,
			median(inputs), median(ratio), minOf(ratio), maxOf(ratio), median(vecs), median(wall), minOf(wall), maxOf(wall))
	}
	b.WriteString("\nRaw figures, one JSON object per trial (arrays are worker a, worker b; `store_*` from `reignpipe materialize` into an empty cache):\n\n```\n")
	for _, r := range rs {
		line, _ := json.Marshal(r.figures)
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteString("```\n\nThe embed workers' summaries (the `store` part and the counts), per trial:\n\n```\n")
	for _, r := range rs {
		for _, label := range []string{"embed-a", "embed-b"} {
			s := r.summaries[label]
			keep := map[string]any{"scenario": r.Scenario, "second_worker_after": r.Stagger, "trial": r.Trial, "worker": label}
			for _, k := range []string{"inputs_read", "docs_written", "windows", "cache_hits", "gn_windows", "gn_windows_shared", "gn_seconds", "wall_seconds", "store"} {
				keep[k] = s[k]
			}
			line, _ := json.Marshal(keep)
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	b.WriteString("```\n\n")
	return b.String()
}

// groups are the (scenario, start order) pairs of the results, in run order.
func groups(rs []trialResult) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rs {
		if k := r.Scenario + " " + r.Stagger; !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func minOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs[1:] {
		m = max(m, x)
	}
	return m
}
