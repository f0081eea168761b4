// Command reaggregate measures `reignpipe reaggregate --sinks` into pgvector at two corpus sizes
// in one run: the child process's peak RSS, its wall time, and how many transactions wrote the
// rows. Why: the command commits its sinks once, at the end, so the pgvector sink holds every
// row of the corpus until then (memory grows with the corpus) and one transaction carries all
// of them. Committing at the run cadence (run.commit_every, run.commit_interval) should make
// the peak RSS flat in N and the commits about N / commit_every. The figure is the ratio of peak
// RSS at the larger size to the smaller; the harness takes the binary as a flag so a build
// before and after the change are measured with the same corpora.
//
//	go run ./ops/bench/reaggregate [-bin bin/reignpipe] [-dsn URL] [-sizes 10000,100000]
//	    [-out ops/bench/results/reaggregate-DATE.md -label "before (commit X)"]
//
// Per size N, in a temp dir: a synthetic chunk cache of N documents, written through
// stages/shardcache opened as the pipeline opens it (parts.Open: the GN's fingerprint and
// dimension from its files, so no GN pass): 2 to 4 windows a document (3 on average), random
// L2-normalised 384-d rows, a share of the windows (-shared) drawn from a pool common to many
// documents, one manifest per document. A pipeline file whose cache is that directory and whose
// sink is pgvector (-dsn, default $REIGNPIPE_PG_DSN; a fresh table prefix per size, dropped
// afterwards unless -keep), meanpool. Then `reignpipe reaggregate --sinks PIPELINE.yaml` as a
// child under GNU time: peak RSS (time's %M, the child's ru_maxrss), VmRSS and VmHWM sampled
// every 100 ms for the curve and as a check, wall time; in the table, the row count (must be N) and the
// distinct xmin values of its rows (one per transaction that wrote rows: the commits).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/ops/bench/benchenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

type options struct {
	benchenv.Section
	dsn, gn, root, index   string
	timeBin                string
	sizes                  []int
	shared                 float64
	pool, rowsPerShard     int
	commitEvery, batchRows int
	commitInterval         time.Duration
	seed                   uint64
	keep                   bool
}

const pkg = "ops/bench/reaggregate"

func main() { benchenv.Main("reaggregate bench", run) }

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := benchenv.Flags(pkg, "Peak RSS, wall time and commits of `reignpipe reaggregate --sinks` into pgvector at each size\n"+
		"(see the comment at the top of ops/bench/reaggregate/main.go).")
	var o options
	o.Section.Flags(fs)
	fs.StringVar(&o.dsn, "dsn", os.Getenv("REIGNPIPE_PG_DSN"), "database URL (default $REIGNPIPE_PG_DSN; ops/postgres start prints it)")
	fs.StringVar(&o.timeBin, "time", "/usr/bin/time", "GNU time, which runs the child and reports its peak RSS (%M)")
	fs.StringVar(&o.gn, "gn", "bge-small-en-v15", "gn.name of the pipeline: its fingerprint and dimension key the cache")
	sizes := fs.String("sizes", "10000,100000", "corpus sizes in documents, comma-separated")
	fs.Float64Var(&o.shared, "shared", 0.1, "share of windows drawn from the pool common to all documents")
	fs.IntVar(&o.pool, "pool", 1000, "windows in the common pool")
	fs.IntVar(&o.rowsPerShard, "rows-per-shard", 65536, "cache.rows_per_shard of the synthetic cache")
	fs.IntVar(&o.commitEvery, "commit-every", 512, "run.commit_every of the pipeline (the default)")
	fs.DurationVar(&o.commitInterval, "commit-interval", 10*time.Second, "run.commit_interval of the pipeline (the default)")
	fs.StringVar(&o.index, "index", "none", "the pgvector sink's index: none (the write path alone), deferred or hnsw")
	fs.IntVar(&o.batchRows, "batch-rows", 0, "the pgvector sink's batch_rows (0: its default)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic windows")
	fs.StringVar(&o.root, "dir", os.TempDir(), "where the caches are built (10^5 documents: about 1 GB)")
	fs.BoolVar(&o.keep, "keep", false, "keep the caches and tables")
	if err := benchenv.Parse(fs, args); err != nil {
		return err
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-sizes: %q is not a positive number", s)
		}
		o.sizes = append(o.sizes, n)
	}
	if o.dsn == "" {
		return errors.New("no database: give -dsn or set REIGNPIPE_PG_DSN (ops/postgres start prints the DSN)")
	}
	if o.shared < 0 || o.shared > 1 || o.pool < 1 || o.rowsPerShard < 1 || o.commitEvery < 1 || o.commitInterval <= 0 {
		return errors.New("-shared must be in [0, 1]; -pool, -rows-per-shard, -commit-every and -commit-interval must be positive")
	}
	if err := o.Resolve(); err != nil {
		return err
	}
	if _, err := os.Stat(o.timeBin); err != nil {
		return fmt.Errorf("%w (GNU time: apt-get install time)", err)
	}
	root, err := benchenv.Root()
	if err != nil {
		return err
	}
	pgVersion, err := serverVersion(ctx, o.dsn)
	if err != nil {
		return err
	}
	header := o.Header(root, "Database: "+pgVersion)
	fmt.Fprint(os.Stderr, header)
	var rs []result
	for _, n := range o.sizes {
		fmt.Fprintf(os.Stderr, "reaggregate bench: %d documents (load %s)\n", n, benchenv.LoadAvg())
		r, err := measure(ctx, o, n)
		if err != nil {
			return fmt.Errorf("%d documents: %w", n, err)
		}
		line, _ := json.Marshal(r)
		fmt.Fprintf(os.Stderr, "reaggregate bench: %s\n", line)
		rs = append(rs, r)
	}
	report := render(o, header, benchenv.Command(pkg, args), rs)
	return o.Write(stdout, "`reignpipe reaggregate --sinks` into pgvector: peak RSS and commits against corpus size (ops/bench/reaggregate)", report)
}

// result is one size's figures, the raw record the report's table comes from.
type result struct {
	Docs         int     `json:"documents"`
	Windows      int64   `json:"windows"`  // over all manifests
	Distinct     int64   `json:"distinct"` // rows in the cache
	BuildSeconds float64 `json:"cache_build_seconds"`
	Table        string  `json:"table"`
	// The child.
	PeakRSSMiB float64 `json:"peak_rss_mib"` // GNU time's %M
	// VmRSS at a quarter, half and three quarters of the child's wall time, and the most seen.
	RSSQuartersMiB [3]float64 `json:"rss_at_quarters_mib"`
	SampledMaxMiB  float64    `json:"sampled_max_rss_mib"`
	SampledHWMMiB  float64    `json:"sampled_vmhwm_mib"` // the last VmHWM seen: a check on %M
	WallSeconds    float64    `json:"wall_seconds"`
	CPUSeconds     float64    `json:"cpu_seconds"` // user + system
	Summary        struct {
		Documents int64   `json:"documents"`
		Written   int64   `json:"docs_written"`
		Failed    int64   `json:"docs_failed"`
		Chunks    int64   `json:"chunks_read"`
		Wall      float64 `json:"wall_seconds"`
	} `json:"summary"`
	// The table afterwards.
	Rows           int64  `json:"rows"`
	Commits        int64  `json:"commits"` // distinct xmin of the rows
	MaxRowsPerTx   int64  `json:"max_rows_per_commit"`
	MinRowsPerTx   int64  `json:"min_rows_per_commit"`
	LoadBefore     string `json:"load_before"`
	LoadAfter      string `json:"load_after"`
	ExpectedCommit int64  `json:"commits_at_run_cadence"` // ceil(N / commit_every): what committing at commit_every would give
}

func measure(ctx context.Context, o options, n int) (res result, err error) {
	res.Docs = n
	dir, err := os.MkdirTemp(o.root, "reaggregate-bench-*")
	if err != nil {
		return res, err
	}
	prefix := fmt.Sprintf("rpbench_reagg_%d_%d", time.Now().Unix(), n)
	defer benchenv.Leftovers("reaggregate bench", o.keep, dir, "tables "+prefix+"_*", func(ctx context.Context) error {
		return dropTables(ctx, o.dsn, prefix)
	})
	// The source is never read (reaggregate reads the cache), but the pipeline names one.
	if err := os.WriteFile(filepath.Join(dir, "unused.jsonl"), nil, 0o644); err != nil {
		return res, err
	}
	cfgPath, cfg, err := benchenv.Pipeline(dir, pipelineYAML(o, dir, prefix))
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	if res.Windows, res.Distinct, err = buildCache(cfg, o, n); err != nil {
		return res, err
	}
	res.BuildSeconds = time.Since(t0).Seconds()
	res.ExpectedCommit = int64((n + o.commitEvery - 1) / o.commitEvery)

	res.LoadBefore = benchenv.LoadAvg()
	if err := runChild(ctx, o, dir, cfgPath, &res); err != nil {
		return res, err
	}
	res.LoadAfter = benchenv.LoadAvg()
	if res.Summary.Written != int64(n) || res.Summary.Failed != 0 {
		return res, fmt.Errorf("reaggregate wrote %d documents (%d failed) of %d", res.Summary.Written, res.Summary.Failed, n)
	}
	if err := countRows(ctx, o.dsn, prefix, &res); err != nil {
		return res, err
	}
	if res.Rows != int64(n) {
		return res, fmt.Errorf("the table %s holds %d rows for %d documents", res.Table, res.Rows, n)
	}
	return res, nil
}

func pipelineYAML(o options, dir, prefix string) string {
	batch := ""
	if o.batchRows > 0 {
		batch = fmt.Sprintf(", batch_rows: %d", o.batchRows)
	}
	return fmt.Sprintf(`version: 1
name: reaggregate-bench
source: {type: jsonl, path: %q}
gn: {name: %s}
chunking: {k: 512, s: 512}
aggregate: {type: meanpool}
cache: {dir: %q, rows_per_shard: %d}
sinks:
  - {type: pgvector, dsn: %q, table: %s, index: %s%s}
dead_letter: {path: %q}
run: {state_dir: %q, commit_every: %d, commit_interval: %s}
`, filepath.Join(dir, "unused.jsonl"), o.gn, filepath.Join(dir, "cache"), o.rowsPerShard, o.dsn, prefix, o.index, batch,
		filepath.Join(dir, "deadletter.jsonl"), filepath.Join(dir, "state"), o.commitEvery, o.commitInterval)
}

// runChild runs `reaggregate --sinks` under GNU time and fills in the child's figures. The peak
// is time's %M, not this process's rusage of its child: Go starts children with vfork, and a
// child that execs from the parent's address space keeps the parent's high-water mark as its
// ru_maxrss (Linux carries it over at exec), so the harness's own peak (the cache it just
// built) would read as the child's. time forks a small process instead. VmRSS and VmHWM of the
// reignpipe process are sampled by one goroutine this function owns, stopped and waited for
// once the child has exited.
func runChild(ctx context.Context, o options, dir, cfgPath string, res *result) error {
	logf, err := os.Create(filepath.Join(dir, "reaggregate.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	var stdout bytes.Buffer
	maxrss := filepath.Join(dir, "maxrss.txt")
	cmd := exec.CommandContext(ctx, o.timeBin, "-f", "%M", "-o", maxrss, o.Bin, "reaggregate", "--sinks", cfgPath)
	cmd.Stdout, cmd.Stderr = &stdout, logf
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	type sample struct {
		at       time.Duration
		kib, hwm int64
	}
	var samples []sample
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if pid, ok := onlyChild(cmd.Process.Pid); ok {
				if kib, hwm, ok := vmRSS(pid); ok {
					samples = append(samples, sample{time.Since(t0), kib, hwm})
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	werr := cmd.Wait()
	wall := time.Since(t0)
	close(stop)
	wg.Wait()
	if werr != nil {
		return fmt.Errorf("reignpipe reaggregate --sinks: %w (log: %s)", werr, logf.Name())
	}
	res.WallSeconds = wall.Seconds()
	data, err := os.ReadFile(maxrss)
	if err != nil {
		return err
	}
	kib, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %q: %w", maxrss, data, err)
	}
	res.PeakRSSMiB = float64(kib) / 1024
	res.CPUSeconds = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	for i, q := range []float64{0.25, 0.5, 0.75} {
		at := time.Duration(q * float64(wall))
		for _, s := range samples {
			if s.at <= at {
				res.RSSQuartersMiB[i] = float64(s.kib) / 1024
			}
		}
	}
	for _, s := range samples {
		res.SampledMaxMiB = math.Max(res.SampledMaxMiB, float64(s.kib)/1024)
		res.SampledHWMMiB = math.Max(res.SampledHWMMiB, float64(s.hwm)/1024)
	}
	if err := json.Unmarshal(stdout.Bytes(), &res.Summary); err != nil {
		return fmt.Errorf("the summary %q: %w", stdout.String(), err)
	}
	return nil
}

// onlyChild is the one child process of pid (time's child: reignpipe).
func onlyChild(pid int) (int, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(data))
	if len(f) != 1 {
		return 0, false
	}
	c, err := strconv.Atoi(f[0])
	return c, err == nil
}

// vmRSS reads a live process's resident set and its high-water mark from /proc (false once it
// has exited).
func vmRSS(pid int) (rss, hwm int64, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, false
	}
	field := func(name string) (int64, bool) {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, name); ok {
				kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				return kib, err == nil
			}
		}
		return 0, false
	}
	rss, ok1 := field("VmRSS:")
	hwm, ok2 := field("VmHWM:")
	return rss, hwm, ok1 && ok2
}

// buildCache writes n documents' windows and manifests into the pipeline's chunk cache, opened
// as every command opens it (parts.Open: the GN identified from its files, cache.dir,
// rows_per_shard). It returns the windows over all manifests and the distinct rows written.
func buildCache(cfg *pipelines.Config, o options, n int) (windows, distinct int64, err error) {
	pp, err := parts.Open(cfg, parts.Want{Cache: true})
	if err != nil {
		return 0, 0, err
	}
	defer func() { err = errors.Join(err, pp.Close()) }()
	dim := pp.GN.Dim
	emb := make([]float32, dim)
	keys := make([]uint64, 0, 4)
	s := o.seed
	next := func() uint64 { s++; return mix(s) }
	for d := 0; d < n; d++ {
		id := fmt.Sprintf("bench:%016x", mix(uint64(d)^0x5bd1e995^o.seed))
		w := 2 + int(next()%3)
		keys = keys[:0]
		for i := 0; i < w; i++ {
			var k uint64
			if float64(next()%1_000_000)/1e6 < o.shared {
				k = mix(o.seed<<32 ^ next()%uint64(o.pool) ^ 0xa5a5a5a5)
			} else {
				k = mix(uint64(d)<<3 | uint64(i) ^ o.seed<<40)
			}
			keys = append(keys, k)
			unitVector(k, emb)
			added, err := pp.Cache.Add(shardcache.Row{Key: k, DocID: id, ChunkIndex: int32(i), NTokens: 512, Embedding: emb})
			if err != nil {
				return 0, 0, err
			}
			if added {
				distinct++
			}
		}
		windows += int64(w)
		if err := pp.Cache.PutManifest(shardcache.Manifest{DocID: id, Version: "1", ContentHash: mix(uint64(d)), Keys: keys,
			Title: fmt.Sprintf("synthetic document %d", d), Source: "bench", NTokens: 510 * w}); err != nil {
			return 0, 0, err
		}
		if d%4096 == 4095 {
			if err := pp.Cache.Flush(); err != nil {
				return 0, 0, err
			}
		}
	}
	return windows, distinct, pp.Cache.Flush()
}

// mix is splitmix64: keys and embeddings derived from positions, nothing kept per document.
func mix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// unitVector fills emb with pseudo-random values seeded by key, L2-normalised as GN outputs are
// (incompressible, so the cache's size is a real one).
func unitVector(key uint64, emb []float32) {
	st := key | 1
	var ss float64
	for i := range emb {
		st ^= st << 13
		st ^= st >> 7
		st ^= st << 17
		emb[i] = float32(int32(st>>32)) / (1 << 31)
		ss += float64(emb[i]) * float64(emb[i])
	}
	inv := float32(1 / math.Sqrt(ss))
	for i := range emb {
		emb[i] *= inv
	}
}

func serverVersion(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("connecting to the database: %w", err)
	}
	defer conn.Close(context.Background())
	var version, vector, syncCommit, sharedBuffers string
	if err := conn.QueryRow(ctx, "SELECT version(), coalesce((SELECT extversion FROM pg_extension WHERE extname = 'vector'), 'not installed'), "+
		"current_setting('synchronous_commit'), current_setting('shared_buffers')").Scan(&version, &vector, &syncCommit, &sharedBuffers); err != nil {
		return "", err
	}
	if i := strings.Index(version, " on "); i > 0 {
		version = version[:i]
	}
	return fmt.Sprintf("%s, pgvector %s, synchronous_commit %s, shared_buffers %s (ops/postgres, on this machine)", version, vector, syncCommit, sharedBuffers), nil
}

// countRows finds the space table the sink wrote (the prefix's _spaces registry names it) and
// counts its rows and the transactions that wrote them.
func countRows(ctx context.Context, dsn, prefix string, res *result) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	tables, err := spaceTables(ctx, conn, prefix)
	if err != nil {
		return err
	}
	if len(tables) != 1 {
		return fmt.Errorf("%s_spaces lists %d tables, want 1 (a meanpool pipeline has one space)", prefix, len(tables))
	}
	res.Table = tables[0]
	// xid has no ordering operator: count its text form. One xmin per transaction that
	// inserted rows, so this is the number of commits that wrote the table.
	q := "SELECT count(*), coalesce(sum(n), 0), coalesce(max(n), 0), coalesce(min(n), 0) FROM (SELECT xmin::text, count(*) AS n FROM " +
		pgx.Identifier{res.Table}.Sanitize() + " GROUP BY 1) t"
	return conn.QueryRow(ctx, q).Scan(&res.Commits, &res.Rows, &res.MaxRowsPerTx, &res.MinRowsPerTx)
}

// spaceTables lists the space tables the sink's registry (prefix_spaces) names; on an error,
// those read before it.
func spaceTables(ctx context.Context, conn *pgx.Conn, prefix string) ([]string, error) {
	rows, err := conn.Query(ctx, "SELECT table_name FROM "+pgx.Identifier{prefix + "_spaces"}.Sanitize())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return tables, err
		}
		tables = append(tables, t)
	}
	return tables, rows.Err()
}

// dropTables removes what the sink made under prefix: the space tables, the registry and the
// version function.
func dropTables(ctx context.Context, dsn, prefix string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// A registry that cannot be read (the run failed before the sink made it) still leaves
	// the registry itself and the function to drop, and whatever it did list.
	tables, _ := spaceTables(ctx, conn, prefix)
	tables = append(tables, prefix+"_spaces")
	var errs []error
	for _, t := range tables {
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{t}.Sanitize()); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := conn.Exec(ctx, "DROP FUNCTION IF EXISTS "+pgx.Identifier{prefix + "_version_cmp"}.Sanitize()+"(text, text)"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func render(o options, header, command string, rs []result) string {
	var b strings.Builder
	b.WriteString(o.Heading(header, command))
	fmt.Fprintf(&b, "Pipeline: meanpool, K = S = 512, cache.rows_per_shard %d, sink `{type: pgvector, index: %s}`, run.commit_every %d, run.commit_interval %s. "+
		"Synthetic cache: 2–4 windows a document, %.0f%% of them from a pool of %d shared windows, 384-d unit vectors (the GN's fingerprint and dimension from its files).\n\n",
		o.rowsPerShard, o.index, o.commitEvery, o.commitInterval, 100*o.shared, o.pool)
	b.WriteString("| documents | windows (distinct) | peak RSS MiB (time %M) | VmRSS at ¼ / ½ / ¾ of the wall, MiB | wall s | CPU s | rows | commits (distinct xmin) | rows per commit, max | commits at commit_every | load before → after |\n")
	b.WriteString("|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %d | %d (%d) | %.0f | %.0f / %.0f / %.0f | %.1f | %.1f | %d | %d | %d | %d | %s → %s |\n",
			r.Docs, r.Windows, r.Distinct, r.PeakRSSMiB, r.RSSQuartersMiB[0], r.RSSQuartersMiB[1], r.RSSQuartersMiB[2],
			r.WallSeconds, r.CPUSeconds, r.Rows, r.Commits, r.MaxRowsPerTx, r.ExpectedCommit, r.LoadBefore, r.LoadAfter)
	}
	if len(rs) >= 2 {
		first, last := rs[0], rs[len(rs)-1]
		fmt.Fprintf(&b, "\n**Peak RSS %d / %d documents: %.0f / %.0f MiB = %.2f×** for %.0f× the documents (wall %.2f×). Target after the change: flat (about 1×), commits about N / commit_every.\n",
			last.Docs, first.Docs, last.PeakRSSMiB, first.PeakRSSMiB, last.PeakRSSMiB/first.PeakRSSMiB, float64(last.Docs)/float64(first.Docs), last.WallSeconds/first.WallSeconds)
	}
	b.WriteString("\nRaw figures, one JSON object per size (`summary` is what the command printed):\n\n```\n")
	for _, r := range rs {
		line, _ := json.Marshal(r)
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteString("```\n\n")
	return b.String()
}
