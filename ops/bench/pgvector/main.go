// Command pgvector measures the pgvector sink and the query side on real document vectors: the
// mean-pool vectors of a real corpus (by default `reignpipe run` over the USPTO patents in
// ../shared/data), repeated with Gaussian noise to reach 10^4 and 10^5 rows.
//
//	go run ./ops/bench/pgvector [-dsn URL] [-corpus DIR | -vectors DIR] [-bin bin/reignpipe]
//	    [-load-sizes 10000,100000] [-hnsw-sizes 10000] [-search-sizes 10000,100000] [-out FILE]
//
// It measures, in one process and one run, so that ratios are side by side:
//   - sink throughput: the same N vectors through the pgvector sink with index: deferred (load,
//     then Close: HNSW build + ANALYZE), index: hnsw (live index) and the parquet sink, with a
//     Flush every -commit-every vectors as the runner does;
//   - search at each size: -queries held-out noisy copies, k=10, HNSW (the Searcher's default
//     ef_search) and exact scan latency, recall@10 of HNSW against the exact answer;
//   - `reignpipe search --doc` end to end with a cold and a warm chunk cache.
//
// Everything happens in a database of its own (-db, created anew and dropped at the end unless
// -keep), so tests sharing the server see none of it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/schemas"
)

type options struct {
	adminDSN, db, dsn string
	corpus, vectors   string
	bin, work, gn     string
	queryDoc          string
	loadSizes         []int
	hnswSizes         []int
	searchSizes       []int
	efSweep           []int
	reps, repsMaxN    int
	queries, k        int
	sigma             float64
	seed              uint64
	commitEvery       int
	batchRows         int
	docRuns           int
	keep              bool
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pgvector bench:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pgvector", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.adminDSN, "dsn", os.Getenv("REIGNPIPE_PG_DSN"), "URL of a database on the server (ops/postgres start prints one); the bench works in a database of its own there")
	fs.StringVar(&o.db, "db", "reignpipe_bench_pgvector", "the bench's own database, dropped and created anew")
	fs.StringVar(&o.corpus, "corpus", "../shared/data/patents/uspto", "USPTO directory whose mean-pool vectors are the real vectors (run with -bin)")
	fs.StringVar(&o.vectors, "vectors", "", "use the parquet parts in this directory as the real vectors instead of running the corpus")
	fs.StringVar(&o.bin, "bin", "bin/reignpipe", "the reignpipe binary (make build)")
	fs.StringVar(&o.work, "work", filepath.Join(os.TempDir(), "reignpipe-bench-pgvector"), "work directory: the corpus run's cache and vectors (kept: a rerun embeds from the cache), parquet sink output")
	fs.StringVar(&o.gn, "gn", "bge-small-en-v15", "gn.name of the pipeline")
	fs.StringVar(&o.queryDoc, "query-doc", "../shared/data/patents/uspto/single/grant-v4-5-B2.xml", "held-out patent for `search --doc` (not in -corpus); empty: skip")
	loadSizes := fs.String("load-sizes", "10000,100000", "N for the deferred-index and parquet sink loads")
	hnswSizes := fs.String("hnsw-sizes", "10000", "N for the live-index (index: hnsw) load; each must be in -load-sizes")
	searchSizes := fs.String("search-sizes", "10000,100000", "table sizes for the search latency and recall")
	efSweep := fs.String("ef-sweep", "40,100,200,400", "ef_search values at which recall is measured again with plain SQL (empty: none)")
	fs.IntVar(&o.reps, "reps", 3, "repetitions of each load at sizes up to -reps-max-n (median reported)")
	fs.IntVar(&o.repsMaxN, "reps-max-n", 20000, "larger loads run once")
	fs.IntVar(&o.queries, "queries", 200, "held-out queries per search size")
	fs.IntVar(&o.k, "k", 10, "neighbours per query")
	fs.Float64Var(&o.sigma, "sigma", 0.02, "noise per component of the copies, before L2-normalising again")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the noise")
	fs.IntVar(&o.commitEvery, "commit-every", 512, "vectors between Flushes (run.commit_every)")
	fs.IntVar(&o.batchRows, "batch-rows", 500, "pgvector sink batch_rows")
	fs.IntVar(&o.docRuns, "doc-runs", 3, "runs of `search --doc` per cache state")
	out := fs.String("out", "", "also write the report to this file")
	fs.BoolVar(&o.keep, "keep", false, "keep the bench database afterwards")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	for _, p := range []struct {
		s   string
		dst *[]int
	}{{*loadSizes, &o.loadSizes}, {*hnswSizes, &o.hnswSizes}, {*searchSizes, &o.searchSizes}, {*efSweep, &o.efSweep}} {
		if *p.dst, err = sizes(p.s); err != nil {
			return err
		}
	}
	for _, n := range o.hnswSizes {
		if !contains(o.loadSizes, n) {
			return fmt.Errorf("-hnsw-sizes %d is not in -load-sizes: the live index is compared with the other sinks at the same N", n)
		}
	}
	if o.adminDSN == "" {
		return errors.New("no database: give -dsn or set REIGNPIPE_PG_DSN (ops/postgres start prints the DSN; ops/with-postgres sets it)")
	}
	if o.vectors == "" {
		if _, err := os.Stat(o.corpus); err != nil {
			return fmt.Errorf("the corpus %s is absent (%v): this bench reads the shared real data (../shared/data, see its README.md), or give -vectors DIR of existing parquet parts", o.corpus, err)
		}
	}
	ctx := context.Background()
	rep := &report{opts: o, started: time.Now().UTC(), before: machine(), loadReps: map[int]int{}}
	unlock, err := lockServer(o.adminDSN)
	if err != nil {
		return err
	}
	defer unlock()
	if o.dsn, err = createDB(ctx, o.adminDSN, o.db); err != nil {
		return err
	}
	if !o.keep {
		defer func() {
			if err := execSQL(ctx, o.adminDSN, "DROP DATABASE IF EXISTS "+ident(o.db)+" WITH (FORCE)"); err != nil {
				fmt.Fprintln(os.Stderr, "pgvector bench: dropping the bench database:", err)
			}
		}()
	}
	if rep.server, err = serverVersion(ctx, o.dsn); err != nil {
		return err
	}
	real, err := realVectors(ctx, &o, rep)
	if err != nil {
		return err
	}
	if err := measureLoads(ctx, o, real, rep); err != nil {
		return err
	}
	if err := measureSearch(ctx, o, real, rep); err != nil {
		return err
	}
	if o.queryDoc != "" {
		if err := measureSearchDoc(ctx, o, real, rep); err != nil {
			return err
		}
	}
	rep.after = machine()
	text := rep.render()
	fmt.Fprint(stdout, text)
	if *out != "" {
		return os.WriteFile(*out, []byte(text), 0o644)
	}
	return nil
}

func sizes(s string) ([]int, error) {
	var ns []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad size %q", f)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

func contains(ns []int, n int) bool {
	for _, m := range ns {
		if m == n {
			return true
		}
	}
	return false
}

// realVectors runs the corpus through `reignpipe run` (default mean-pool, parquet sink; a rerun
// embeds from the kept cache) or reads -vectors, and returns the newest vector per document in
// doc id order.
func realVectors(ctx context.Context, o *options, rep *report) ([]schemas.DocVector, error) {
	dir := o.vectors
	if dir == "" {
		if err := os.MkdirAll(o.work, 0o755); err != nil {
			return nil, err
		}
		// A fresh output each time: vectors of an earlier run would not say what this one did.
		for _, p := range []string{"vectors", "state", "summary.json", "deadletter.jsonl"} {
			if err := os.RemoveAll(filepath.Join(o.work, p)); err != nil {
				return nil, err
			}
		}
		abs, err := filepath.Abs(o.corpus)
		if err != nil {
			return nil, err
		}
		yaml := pipelineYAML(o, abs, filepath.Join(o.work, "cache"), fmt.Sprintf("  - type: parquet\n    dir: %s\n", filepath.Join(o.work, "vectors")))
		path := filepath.Join(o.work, "corpus.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			return nil, err
		}
		start := time.Now()
		cmd := exec.CommandContext(ctx, o.bin, "run", path)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		fmt.Fprintf(os.Stderr, "pgvector bench: %s run %s\n", o.bin, path)
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s run %s: %w", o.bin, path, err)
		}
		rep.corpusRun = fmt.Sprintf("`%s run %s` over %s: %.1f s (the chunk cache in %s is kept between bench runs, so only a first run embeds)",
			o.bin, path, o.corpus, time.Since(start).Seconds(), filepath.Join(o.work, "cache"))
		dir = filepath.Join(o.work, "vectors")
	}
	latest, err := vectorfile.Latest(dir)
	if err != nil {
		return nil, err
	}
	if len(latest) == 0 {
		return nil, fmt.Errorf("no vectors in %s", dir)
	}
	vs := make([]schemas.DocVector, 0, len(latest))
	for _, v := range latest {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].DocID < vs[j].DocID })
	for _, v := range vs[1:] {
		if v.Space != vs[0].Space || len(v.Vector) != len(vs[0].Vector) {
			return nil, fmt.Errorf("%s: vectors of two spaces (%s, %s): give a directory of one pipeline's output", dir, vs[0].Space, v.Space)
		}
	}
	rep.realDir, rep.realN, rep.space, rep.dim = dir, len(vs), vs[0].Space, len(vs[0].Vector)
	return vs, nil
}

// pipelineYAML is the bench's pipeline over the corpus with the given chunk cache and sinks:
// the shipped defaults (K = S = 512, mean-pool).
func pipelineYAML(o *options, corpus, cache, sinks string) string {
	w := o.work
	return fmt.Sprintf(`version: 1
name: bench-pgvector
source:
  type: uspto
  path: %s
gn:
  name: %s
  provider: cpu
chunking:
  k: 512
  s: 512
cache:
  dir: %s
sinks:
%sdead_letter:
  path: %s
run:
  state_dir: %s
  summary: %s
`, corpus, o.gn, cache, sinks, filepath.Join(w, "deadletter.jsonl"), filepath.Join(w, "state"), filepath.Join(w, "summary.json"))
}

// lockServer holds the test suite's shared lock on the server (internal/pgtest's file): a test
// that restarts or kills the server takes it exclusively, so it waits until the bench is done
// instead of failing its measurements half-way.
func lockServer(dsn string) (func(), error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("-dsn %q: give a postgres:// URL (the bench derives its own database's URL from it)", dsn)
	}
	name := fmt.Sprintf("reignpipe-pg-tests-%d-%s.lock", os.Getuid(), regexp.MustCompile(`[^A-Za-z0-9._-]`).ReplaceAllString(u.Host, "_"))
	f, err := os.OpenFile(filepath.Join(os.TempDir(), name), os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func ident(s string) string { return pgx.Identifier{s}.Sanitize() }

func execSQL(ctx context.Context, dsn string, sqls ...string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, q := range sqls {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// createDB makes the bench's database anew, with the vector extension, and returns its URL.
func createDB(ctx context.Context, admin, db string) (string, error) {
	if err := execSQL(ctx, admin, "DROP DATABASE IF EXISTS "+ident(db)+" WITH (FORCE)", "CREATE DATABASE "+ident(db)); err != nil {
		return "", err
	}
	u, _ := url.Parse(admin) // lockServer parsed it
	u.Path = "/" + db
	dsn := u.String()
	return dsn, execSQL(ctx, dsn, "CREATE EXTENSION vector")
}

func serverVersion(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var v, ext, mwm, workers string
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version'), (SELECT extversion FROM pg_extension WHERE extname = 'vector'),
		current_setting('maintenance_work_mem'), current_setting('max_parallel_maintenance_workers')`).Scan(&v, &ext, &mwm, &workers)
	return fmt.Sprintf("PostgreSQL %s, pgvector %s, maintenance_work_mem %s, max_parallel_maintenance_workers %s", v, ext, mwm, workers), err
}

// machine records where and under what load the figures were taken: they compare only within
// one run on one machine.
func machine() string {
	sh := func(c string) string {
		out, err := exec.Command("sh", "-c", c).CombinedOutput()
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("nproc %s; %s; `free -g` Mem: %s; `uptime`: %s", sh("nproc"),
		sh("lscpu | grep 'Model name' | sed 's/  */ /g'"), sh("free -g | awk '/^Mem:/{print \"total \" $2 \", used \" $3 \", available \" $7}'"), sh("uptime"))
}
