package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

type report struct {
	opts            options
	started         time.Time
	before, after   string // machine and load
	server          string
	corpusRun       string
	realDir, space  string
	realN, dim      int
	copyCos         float64 // mean cosine of a noisy copy to its original
	nnMedian, nnMax float64 // cosine of a real vector to its nearest other real vector
	loads           []loadResult
	loadReps        map[int]int
	searches        []searchResult
	docCmd          string
	docRuns         []docRun
}

func (r *report) render() string {
	o := r.opts
	var b strings.Builder
	fmt.Fprintf(&b, "# pgvector sink and search benchmark (ops/bench/pgvector)\n\n")
	fmt.Fprintf(&b, "Started %s; %s; %s.\n\n", r.started.Format(time.RFC3339), runtime.Version(), r.server)
	fmt.Fprintf(&b, "Machine and load before: %s\n\nafter: %s\n\n", r.before, r.after)
	if r.corpusRun != "" {
		fmt.Fprintf(&b, "Real vectors: %s.\n\n", r.corpusRun)
	}
	fmt.Fprintf(&b, "%d real document vectors (the newest per doc id in %s), space `%s`, %d-d. "+
		"Rows of an N-row table: row i is real vector i mod %d, unchanged for i < %d, otherwise plus Gaussian noise "+
		"N(0, %g²) per component and L2-normalised again, doc id `<real id>#<i div %d>`. Queries: %d fresh noisy copies "+
		"(same sigma, another noise stream) of real vectors spread over the corpus, ids in no table.\n\n",
		r.realN, r.realDir, r.space, r.dim, r.realN, r.realN, o.sigma, r.realN, o.queries)
	fmt.Fprintf(&b, "How tight the copies are: a noisy copy has cosine %.3f to its original on average; a real vector's nearest other real vector has cosine %.3f (median over the real vectors), %.3f at most (identical texts under two ids give 1.000).\n\n",
		r.copyCos, r.nnMedian, r.nnMax)

	if len(r.loads) > 0 {
		fmt.Fprintf(&b, "## Sink throughput\n\nThe same N vectors through each sink, used directly as the runner uses it: Write each, Flush every %d (run.commit_every), Close. "+
			"pgvector: batch_rows %d, distance inner_product, a fresh table per load; `deferred` builds the HNSW index (m 16, ef_construction 64) and runs ANALYZE in Close; "+
			"\"ANALYZE alone\" is a second ANALYZE of the loaded table, timed by itself. Parquet: connectors/vectorfile, default 1,024-row row groups, one part per Flush. "+
			"Sinks interleaved within each repetition; with several repetitions the row is the one with the median total.\n\n", o.commitEvery, o.batchRows)
		b.WriteString("| N | sink | reps | load s | load vectors/s | Close s | ANALYZE alone s | total s | total vectors/s | parquet ÷ this, vectors/s | table MiB | HNSW index MiB |\n")
		b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		parquet := map[int]float64{}
		for _, l := range r.loads {
			if l.sink == "parquet" {
				parquet[l.n] = float64(l.n) / l.total().Seconds()
			}
		}
		for _, l := range r.loads {
			name, tbl, idx, an := "parquet", "", "", ""
			if l.sink != "parquet" {
				name = "pgvector index: " + l.sink
				tbl, idx = fmt.Sprintf("%.1f", l.tableMB), fmt.Sprintf("%.1f", l.idMB)
			}
			if l.sink == "deferred" {
				an = fmt.Sprintf("%.2f", l.analyze.Seconds())
			}
			tv := float64(l.n) / l.total().Seconds()
			fmt.Fprintf(&b, "| %d | %s | %d | %.2f | %.0f | %.2f | %s | %.2f | %.0f | %.1f | %s | %s |\n", l.n, name, r.loadReps[l.n],
				l.load.Seconds(), float64(l.n)/l.load.Seconds(), l.close.Seconds(), an, l.total().Seconds(), tv, parquet[l.n]/tv, tbl, idx)
		}
	}
	if len(r.searches) > 0 {
		fmt.Fprintf(&b, "\n## Search\n\n`pgvector.Searcher.Search` on the last deferred-index table loaded at that size (HNSW m 16, ef_construction 64, built after the load), k = %d, one query at a time from one process; latency = the call (its transaction: SET LOCAL hnsw.ef_search = max(40, 2k) = %d and iterative_scan strict_order, the query; exact adds enable_indexscan = off). "+
			"HNSW and exact alternate query by query, after %d untimed warm-up queries of each. Recall@%d = |HNSW top %d ∩ exact top %d| / %d, averaged over the queries. "+
			"Index scans = idx_scan of the table's HNSW index after the run (warm-up included), against the HNSW calls made: equal means the HNSW queries used the index and the exact ones did not.\n\n",
			o.k, max(40, 2*o.k), warmup, o.k, o.k, o.k, o.k)
		b.WriteString("| vectors | queries | HNSW p50 ms | HNSW p99 ms | exact p50 ms | exact p99 ms | exact ÷ HNSW, p50 | recall@10 mean | recall@10 min | queries with all 10 | same first hit | 10th-hit similarity, exact − HNSW | hits of an exact top-10 document | index scans / HNSW calls |\n")
		b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, s := range r.searches {
			h50, e50 := pct(s.hnsw, 50), pct(s.exact, 50)
			fmt.Fprintf(&b, "| %d | %d | %.2f | %.2f | %.2f | %.2f | %.1f | %.4f | %.1f | %d | %d | %.4f | %.4f | %d / %d |\n", s.n, s.queries, ms(h50), ms(pct(s.hnsw, 99)),
				ms(e50), ms(pct(s.exact, 99)), float64(e50)/float64(h50), s.recall, s.minRecall, s.full, s.top1, s.gap, s.docRecall, s.idxScans, s.hnswCalls)
		}
		b.WriteString("\n\"Same first hit\": queries whose HNSW first hit is the exact first hit. \"10th-hit similarity\": the exact 10th hit's inner product minus HNSW's, mean over the queries (0 when HNSW's 10th is as near as the true 10th). \"Hits of an exact top-10 document\": share of the HNSW hits that are a copy (same real doc id) of a document among the exact top 10's.\n")
		if len(o.efSweep) > 0 {
			b.WriteString("\nRecall@10 of the same index at other ef_search, the same queries and exact answers, through plain SQL of the Searcher's form (one connection, SET LOCAL ef_search and strict_order iterative scan, `WHERE doc_id <> query id ORDER BY embedding <#> q LIMIT 20`, the top 10 of those by similarity, then doc id); latency p50 of that query:\n\n")
			b.WriteString("| vectors | ef_search | recall@10 | same first hit | 10th-hit similarity, exact − HNSW | hits of an exact top-10 document | p50 ms |\n|---:|---:|---:|---:|---:|---:|---:|\n")
			for _, s := range r.searches {
				for _, e := range s.sweep {
					fmt.Fprintf(&b, "| %d | %d | %.4f | %d | %.4f | %.4f | %.2f |\n", s.n, e.ef, e.recall, e.top1, e.gap, e.docRec, ms(e.p50))
				}
			}
		}
	}

	if len(r.docRuns) > 0 {
		fmt.Fprintf(&b, "\n## `search --doc` end to end\n\n`%s` over a table of the %d real vectors (index: hnsw), wall time of the whole command (process start, ONNX Runtime and GN load, reading and cutting the patent, embedding, the query). "+
			"Cold: the search's chunk cache is a copy of the corpus run's, made before each run, so it holds the corpus's windows and the query's go to the GN; warm: the same command again, its windows now cached.\n\n", r.docCmd, r.realN)
		b.WriteString("| chunk cache | runs | wall s, each | median s | windows | from cache | GN windows | query doc id | top hit |\n|---|---:|---|---:|---:|---:|---:|---|---|\n")
		for _, cold := range []bool{true, false} {
			var each []string
			var ws []time.Duration
			var last docRun
			for _, d := range r.docRuns {
				if d.cold == cold {
					each, ws, last = append(each, fmt.Sprintf("%.2f", d.wall.Seconds())), append(ws, d.wall), d
				}
			}
			if len(ws) == 0 {
				continue
			}
			gns := map[int]bool{}
			for _, d := range r.docRuns {
				if d.cold == cold {
					gns[d.gnWins] = true
				}
			}
			gn := fmt.Sprint(last.gnWins)
			if len(gns) > 1 {
				gn += " (runs differ)"
			}
			sortDurations(ws)
			name := map[bool]string{true: "cold", false: "warm"}[cold]
			fmt.Fprintf(&b, "| %s | %d | %s | %.2f | %d | %d | %s | `%s` | `%s` |\n", name, len(ws), strings.Join(each, ", "), ws[len(ws)/2].Seconds(),
				last.windows, last.cacheHits, gn, last.docID, last.top1)
		}
	}
	fmt.Fprintf(&b, "\nCommand: `go run ./ops/bench/pgvector %s`\n", strings.Join(r.flags(), " "))
	return b.String()
}

func (r *report) flags() []string {
	o := r.opts
	join := func(ns []int) string {
		s := make([]string, len(ns))
		for i, n := range ns {
			s[i] = fmt.Sprint(n)
		}
		if len(s) == 0 {
			return "''"
		}
		return strings.Join(s, ",")
	}
	f := []string{"-load-sizes " + join(o.loadSizes), "-hnsw-sizes " + join(o.hnswSizes), "-search-sizes " + join(o.searchSizes),
		"-ef-sweep " + join(o.efSweep), fmt.Sprintf("-reps %d -reps-max-n %d -queries %d -k %d -sigma %g -seed %d", o.reps, o.repsMaxN, o.queries, o.k, o.sigma, o.seed)}
	if o.vectors != "" {
		f = append(f, "-vectors "+o.vectors)
	} else {
		f = append(f, "-corpus "+o.corpus)
	}
	return append(f, "-bin "+o.bin, "-work "+o.work)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
