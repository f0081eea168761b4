package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/pgvector"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/schemas"
)

// copies returns n rows made from the real vectors: row i is real vector i mod len(real),
// unchanged in the first round (i < len(real)) and otherwise plus N(0, sigma^2) per component,
// L2-normalised again, with doc id "<real id>#<round>". The noise of row i comes from its own
// stream (seed, i), so a smaller table is a prefix of a larger one.
func copies(real []schemas.DocVector, n int, sigma float64, seed uint64) []schemas.DocVector {
	out := make([]schemas.DocVector, n)
	for i := range out {
		r := real[i%len(real)]
		round := i / len(real)
		v := r
		v.DocID = fmt.Sprintf("%s#%d", r.DocID, round)
		v.ContentHash = xxhash.Sum64String(v.DocID)
		if round > 0 {
			v.Vector = noisy(r.Vector, sigma, rand.New(rand.NewPCG(seed, uint64(i))))
		}
		out[i] = v
	}
	return out
}

// heldOut returns q queries, fresh noisy copies of real vectors (real vector j*len/q, so spread
// over the corpus) from a noise stream no table row uses; their ids are in no table.
func heldOut(real []schemas.DocVector, q int, sigma float64, seed uint64) []schemas.DocVector {
	out := make([]schemas.DocVector, q)
	for j := range out {
		r := real[j*len(real)/q%len(real)]
		v := r
		v.DocID = fmt.Sprintf("query#%d", j)
		v.Vector = noisy(r.Vector, sigma, rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, uint64(j))))
		out[j] = v
	}
	return out
}

// spread says how tight the copies are against how far apart the real documents are: the mean
// cosine of a noisy copy to its original (over up to 1,000 copies), and the median and the
// largest over real vectors of the cosine to their nearest other real vector.
func spread(real, rows []schemas.DocVector) (copyCos, nnMedian, nnMax float64) {
	n := 0
	for i := len(real); i < len(rows) && n < 1000; i++ {
		copyCos += dot(rows[i].Vector, real[i%len(real)].Vector)
		n++
	}
	if n > 0 {
		copyCos /= float64(n)
	}
	nn := make([]float64, len(real))
	for i := range real {
		nn[i] = -2
		for j := range real {
			if j != i {
				nn[i] = max(nn[i], dot(real[i].Vector, real[j].Vector))
			}
		}
	}
	sort.Float64s(nn)
	return copyCos, nn[len(nn)/2], nn[len(nn)-1]
}

func dot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func noisy(x []float32, sigma float64, rng *rand.Rand) []float32 {
	y := make([]float32, len(x))
	var ss float64
	for i, a := range x {
		b := float64(a) + sigma*rng.NormFloat64()
		y[i] = float32(b)
		ss += b * b
	}
	inv := 1 / math.Sqrt(ss)
	for i := range y {
		y[i] = float32(float64(y[i]) * inv)
	}
	return y
}

// loadResult is one load of N vectors into one sink.
type loadResult struct {
	sink          string // parquet, deferred, hnsw
	n             int
	load, close   time.Duration // Write+Flush of every vector; Close (deferred: HNSW build + ANALYZE)
	analyze       time.Duration // deferred: a second ANALYZE of the loaded table, timed alone
	tableMB, idMB float64       // pgvector: table (with TOAST) and HNSW index size
}

func (r loadResult) total() time.Duration { return r.load + r.close }

// measureLoads loads the same vectors into each sink at each size, the three sinks in turn
// within a repetition, so that load on the shared machine falls on all of them alike.
func measureLoads(ctx context.Context, o options, real []schemas.DocVector, rep *report) error {
	maxN := 0
	for _, ns := range [][]int{o.loadSizes, o.searchSizes} {
		for _, n := range ns {
			maxN = max(maxN, n)
		}
	}
	all := copies(real, maxN, o.sigma, o.seed)
	rep.copyCos, rep.nnMedian, rep.nnMax = spread(real, all)
	for _, n := range o.loadSizes {
		reps := 1
		if n <= o.repsMaxN {
			reps = o.reps
		}
		byRep := map[string][]loadResult{}
		for r := 0; r < reps; r++ {
			sinks := []string{"parquet", pgvector.IndexDeferred}
			if contains(o.hnswSizes, n) {
				sinks = append(sinks, pgvector.IndexHNSW)
			}
			for _, sink := range sinks {
				fmt.Fprintf(os.Stderr, "pgvector bench: load %d vectors, %s, repetition %d/%d\n", n, sink, r+1, reps)
				// The last deferred table of a searched size is kept as that size's search table.
				prefix, keep := fmt.Sprintf("load_%s_%d_%d", sink, n, r), false
				if sink == pgvector.IndexDeferred && r == reps-1 && contains(o.searchSizes, n) {
					prefix, keep = searchTable(n), true
				}
				res, err := loadOnce(ctx, o, sink, all[:n], prefix, keep)
				if err != nil {
					return fmt.Errorf("load %d into %s: %w", n, sink, err)
				}
				fmt.Fprintf(os.Stderr, "pgvector bench:   load %.2f s, close %.2f s, analyze %.2f s\n", res.load.Seconds(), res.close.Seconds(), res.analyze.Seconds())
				byRep[sink] = append(byRep[sink], res)
			}
		}
		for _, sink := range []string{"parquet", pgvector.IndexDeferred, pgvector.IndexHNSW} {
			if rs := byRep[sink]; len(rs) > 0 {
				rep.loads = append(rep.loads, median(rs))
				rep.loadReps[n] = len(rs)
			}
		}
	}
	// Searched sizes without a load: the same rows, deferred index (built at Close, the same
	// HNSW parameters as a live one: pgvector's m = 16, ef_construction = 64).
	for _, n := range o.searchSizes {
		if contains(o.loadSizes, n) {
			continue
		}
		fmt.Fprintf(os.Stderr, "pgvector bench: table of %d vectors for the search\n", n)
		if _, err := loadOnce(ctx, o, pgvector.IndexDeferred, all[:n], searchTable(n), true); err != nil {
			return fmt.Errorf("search table of %d: %w", n, err)
		}
	}
	return nil
}

func searchTable(n int) string { return fmt.Sprintf("search_%d", n) }

// median picks the repetition with the median total time (its parts stay consistent).
func median(rs []loadResult) loadResult {
	sort.Slice(rs, func(i, j int) bool { return rs[i].total() < rs[j].total() })
	return rs[len(rs)/2]
}

// loadOnce writes vs into a fresh sink as the runner does (Write each, Flush every
// commit-every, Close at the end). The table is dropped afterwards unless keep.
func loadOnce(ctx context.Context, o options, sink string, vs []schemas.DocVector, prefix string, keep bool) (loadResult, error) {
	res := loadResult{sink: sink, n: len(vs)}
	var s connectors.Sink
	switch sink {
	case "parquet":
		dir := filepath.Join(o.work, "parquet-load")
		if err := os.RemoveAll(dir); err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		ps, err := vectorfile.NewParquet(vectorfile.ParquetOptions{Dir: dir, Dim: len(vs[0].Vector)})
		if err != nil {
			return res, err
		}
		s = ps
	default:
		ps, err := pgvector.Open(ctx, pgvector.Options{Config: pgvector.Config{DSN: o.dsn, Table: prefix, Index: sink, BatchRows: o.batchRows}, Dim: len(vs[0].Vector)})
		if err != nil {
			return res, err
		}
		s = ps
	}
	start := time.Now()
	for i, v := range vs {
		if err := s.Write(ctx, v); err != nil {
			return res, err
		}
		if (i+1)%o.commitEvery == 0 {
			if err := s.Flush(ctx); err != nil {
				return res, err
			}
		}
	}
	if err := s.Flush(ctx); err != nil {
		return res, err
	}
	res.load = time.Since(start)
	start = time.Now()
	if err := s.Close(ctx); err != nil {
		return res, err
	}
	res.close = time.Since(start)
	if sink == "parquet" {
		return res, nil
	}
	table := pgvector.TableName(prefix, vs[0].Space)
	conn, err := pgx.Connect(ctx, o.dsn)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.Background())
	if sink == pgvector.IndexDeferred {
		// Close ran the build and ANALYZE back to back; ANALYZE again, alone, says how much of
		// Close was ANALYZE (it samples the same table the same way).
		start = time.Now()
		if _, err := conn.Exec(ctx, "ANALYZE "+ident(table)); err != nil {
			return res, err
		}
		res.analyze = time.Since(start)
	}
	var tb, ib int64
	if err := conn.QueryRow(ctx, "SELECT pg_table_size($1::regclass), coalesce(pg_relation_size(to_regclass($2)), 0)",
		ident(table), ident(table+"_hnsw")).Scan(&tb, &ib); err != nil {
		return res, err
	}
	res.tableMB, res.idMB = float64(tb)/(1<<20), float64(ib)/(1<<20)
	if keep {
		return res, nil
	}
	_, err = conn.Exec(ctx, "DROP TABLE "+ident(table)+", "+ident(prefix+"_spaces")+"; DROP FUNCTION "+ident(prefix+"_version_cmp")+"(text, text)")
	return res, err
}
