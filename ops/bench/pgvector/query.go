package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	pgv "github.com/pgvector/pgvector-go"
	pgxvec "github.com/pgvector/pgvector-go/pgx"

	"github.com/reignpipe/reignpipe/connectors/pgvector"
	"github.com/reignpipe/reignpipe/schemas"
)

// searchResult is the query side at one table size.
type searchResult struct {
	n                    int
	queries, warmup      int
	hnsw, exact          []time.Duration // per query, sorted
	recall, minRecall    float64         // recall@k of HNSW against the exact top k
	full                 int             // queries whose HNSW top k is the exact one
	docRecall            float64         // share of HNSW hits that are copies of a document in the exact top k
	top1                 int             // queries whose HNSW first hit is the exact first hit
	gap                  float64         // mean over queries of exact minus HNSW similarity of the k-th hit
	sweep                []efRecall      // recall@k at other ef_search values, plain SQL
	idxScans             int64           // scans of the HNSW index over the whole measurement
	hnswCalls, exactCall int
}

// warmup queries run first, untimed: the first ones open the pool's connections and read the
// index into shared buffers, which is not what a search costs in a serving process.
const warmup = 10

// measureSearch times HNSW and exact top-k queries on each search table, the two kinds
// alternating query by query so that the shared machine's load falls on both alike.
func measureSearch(ctx context.Context, o options, real []schemas.DocVector, rep *report) error {
	qs := heldOut(real, o.queries, o.sigma, o.seed)
	for _, n := range o.searchSizes {
		fmt.Fprintf(os.Stderr, "pgvector bench: %d queries against %d vectors\n", len(qs), n)
		r, err := searchOnce(ctx, o, n, qs)
		if err != nil {
			return fmt.Errorf("search at %d: %w", n, err)
		}
		rep.searches = append(rep.searches, r)
	}
	return nil
}

func searchOnce(ctx context.Context, o options, n int, qs []schemas.DocVector) (searchResult, error) {
	res := searchResult{n: n, queries: len(qs), warmup: warmup}
	s, err := pgvector.OpenSearcher(ctx, pgvector.SearchOptions{DSN: o.dsn, Table: searchTable(n)})
	if err != nil {
		return res, err
	}
	space := qs[0].Space
	search := func(q schemas.DocVector, exact bool) ([]schemas.Hit, time.Duration, error) {
		start := time.Now()
		a, err := s.Search(ctx, space, q.Vector, o.k, schemas.Exclude{DocID: q.DocID}, exact)
		if exact {
			res.exactCall++
		} else {
			res.hnswCalls++
		}
		if err != nil {
			return nil, time.Since(start), err
		}
		return a.Hits, time.Since(start), nil
	}
	for i := 0; i < warmup; i++ {
		for _, exact := range []bool{false, true} {
			if _, _, err := search(qs[i%len(qs)], exact); err != nil {
				s.Close()
				return res, err
			}
		}
	}
	res.minRecall = 1
	truths := make([][]schemas.Hit, len(qs))
	for qi, q := range qs {
		approx, dh, err := search(q, false)
		if err != nil {
			s.Close()
			return res, err
		}
		truth, de, err := search(q, true)
		if err != nil {
			s.Close()
			return res, err
		}
		if len(truth) != o.k {
			s.Close()
			return res, fmt.Errorf("the exact scan returned %d hits for %s, not %d", len(truth), q.DocID, o.k)
		}
		res.hnsw, res.exact = append(res.hnsw, dh), append(res.exact, de)
		truths[qi] = truth
		ids := make([]string, len(approx))
		for i, h := range approx {
			ids[i] = h.DocID
		}
		got, docs := overlap(truth, ids)
		if len(approx) > 0 && approx[0].DocID == truth[0].DocID {
			res.top1++
		}
		if len(approx) == o.k {
			res.gap += (truth[o.k-1].Score - approx[o.k-1].Score) / float64(len(qs))
		}
		rc := float64(got) / float64(o.k)
		res.recall += rc / float64(len(qs))
		res.docRecall += float64(docs) / float64(o.k) / float64(len(qs))
		res.minRecall = min(res.minRecall, rc)
		if got == o.k {
			res.full++
		}
	}
	// Closing the pool ends its backends, which flushes their statistics: the index's scan
	// count then says whether the HNSW queries used the index and the exact ones did not.
	s.Close()
	sortDurations(res.hnsw)
	sortDurations(res.exact)
	conn, err := pgx.Connect(ctx, o.dsn)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.Background())
	if err := pgxvec.RegisterTypes(ctx, conn); err != nil {
		return res, err
	}
	table := pgvector.TableName(searchTable(n), space)
	for try := 0; ; try++ {
		err = conn.QueryRow(ctx, "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = $1", table+"_hnsw").Scan(&res.idxScans)
		if err != nil {
			return res, err
		}
		if res.idxScans >= int64(res.hnswCalls) || try == 20 {
			break
		}
		time.Sleep(250 * time.Millisecond) // a backend's exit flushes its counts asynchronously
		if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			return res, err
		}
	}
	for _, ef := range o.efSweep {
		r, err := sweepRecall(ctx, conn, table, ef, o.k, qs, truths)
		if err != nil {
			return res, err
		}
		res.sweep = append(res.sweep, r)
	}
	return res, nil
}

// overlap counts the ids that are in the exact top k, and those that are copies (same id
// before '#') of a document there.
func overlap(truth []schemas.Hit, ids []string) (same, sameDoc int) {
	want, wantDoc := map[string]bool{}, map[string]bool{}
	for _, h := range truth {
		want[h.DocID], wantDoc[realID(h.DocID)] = true, true
	}
	for _, id := range ids {
		if want[id] {
			same++
		}
		if wantDoc[realID(id)] {
			sameDoc++
		}
	}
	return same, sameDoc
}

func realID(id string) string {
	if i := strings.LastIndexByte(id, '#'); i >= 0 {
		return id[:i]
	}
	return id
}

// efRecall is recall@k of the HNSW index at one ef_search.
type efRecall struct {
	ef             int
	recall, docRec float64
	top1           int
	gap            float64
	p50            time.Duration
}

// sweepRecall asks the index with another ef_search, in the plain form of the Searcher's
// query (same settings and filter, 2k rows from the index, the best k by similarity then doc
// id): whether a wider search recovers what the default misses. It is not the Searcher's code,
// so the ef it shares with the default is there as a check that both give the same answers.
func sweepRecall(ctx context.Context, conn *pgx.Conn, table string, ef, k int, qs []schemas.DocVector, truths [][]schemas.Hit) (efRecall, error) {
	r := efRecall{ef: ef}
	var lat []time.Duration
	sql := fmt.Sprintf("SELECT doc_id, -(embedding <#> $1) FROM %s WHERE doc_id <> $2 ORDER BY embedding <#> $1 LIMIT %d", ident(table), 2*k)
	type hit struct {
		id    string
		score float64
	}
	for i, q := range qs {
		var hits []hit
		start := time.Now()
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, set := range []string{fmt.Sprintf("SET LOCAL hnsw.ef_search = %d", ef), "SET LOCAL hnsw.iterative_scan = strict_order"} {
				if _, err := tx.Exec(ctx, set); err != nil {
					return err
				}
			}
			rows, err := tx.Query(ctx, sql, pgv.NewVector(q.Vector), q.DocID)
			if err != nil {
				return err
			}
			hits, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (hit, error) {
				var h hit
				err := r.Scan(&h.id, &h.score)
				return h, err
			})
			return err
		})
		if err != nil {
			return r, err
		}
		lat = append(lat, time.Since(start))
		sort.SliceStable(hits, func(a, b int) bool {
			if hits[a].score != hits[b].score {
				return hits[a].score > hits[b].score
			}
			return hits[a].id < hits[b].id
		})
		hits = hits[:min(k, len(hits))]
		ids := make([]string, len(hits))
		for j, h := range hits {
			ids[j] = h.id
		}
		same, doc := overlap(truths[i], ids)
		if len(hits) > 0 && hits[0].id == truths[i][0].DocID {
			r.top1++
		}
		if len(hits) == k {
			r.gap += (truths[i][k-1].Score - hits[k-1].score) / float64(len(qs))
		}
		r.recall += float64(same) / float64(k) / float64(len(qs))
		r.docRec += float64(doc) / float64(k) / float64(len(qs))
	}
	sortDurations(lat)
	r.p50 = pct(lat, 50)
	return r, nil
}

func sortDurations(ds []time.Duration) { sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] }) }

// pct is the p-th percentile of sorted ds (nearest rank).
func pct(ds []time.Duration, p float64) time.Duration {
	i := int(p/100*float64(len(ds))+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// docRun is one `reignpipe search --doc` run.
type docRun struct {
	cold                       bool
	wall                       time.Duration
	windows, cacheHits, gnWins int
	docID, space, top1         string
}

// measureSearchDoc times `reignpipe search --doc` over a table of the real vectors: cold, with
// a chunk cache holding the corpus's windows only (the query's go to the GN), and warm, the same
// command again with the query's windows cached. The search has a cache of its own, replaced by
// a copy of the corpus run's before every cold run: the corpus cache never receives query
// windows, so a later bench run is cold again.
func measureSearchDoc(ctx context.Context, o options, real []schemas.DocVector, rep *report) error {
	if _, err := os.Stat(o.queryDoc); err != nil {
		return fmt.Errorf("-query-doc %s: %w (it is in the shared real data; -query-doc '' skips this part)", o.queryDoc, err)
	}
	fmt.Fprintf(os.Stderr, "pgvector bench: the %d real vectors into table prefix doc (index: hnsw)\n", len(real))
	if _, err := loadOnce(ctx, o, pgvector.IndexHNSW, real, "doc", true); err != nil {
		return err
	}
	corpus, err := filepath.Abs(o.corpus)
	if err != nil {
		return err
	}
	cache, corpusCache := filepath.Join(o.work, "search-cache"), filepath.Join(o.work, "cache")
	yaml := pipelineYAML(&o, corpus, cache, fmt.Sprintf("  - type: pgvector\n    dsn: %s\n    table: doc\n    index: hnsw\n", o.dsn))
	path := filepath.Join(o.work, "search.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(corpusCache, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	inCorpus := map[string]bool{}
	for _, v := range real {
		inCorpus[v.DocID] = true
	}
	rep.docCmd = fmt.Sprintf("%s search --doc %s --format json %s", o.bin, o.queryDoc, path)
	for i := 0; i < 2*o.docRuns; i++ {
		cold := i < o.docRuns
		if cold {
			if err := copyDir(corpusCache, cache); err != nil {
				return err
			}
		}
		r, err := searchDoc(ctx, o, path)
		if err != nil {
			return err
		}
		r.cold = cold
		if inCorpus[r.docID] {
			return fmt.Errorf("-query-doc %s is %s, a document of the corpus: give a held-out one", o.queryDoc, r.docID)
		}
		if cold && r.gnWins == 0 {
			return fmt.Errorf("a cold search --doc embedded no window: the windows of %s are in the corpus cache %s already (a corpus document, or a cache an older bench added queries to: give another -query-doc or -work)", o.queryDoc, corpusCache)
		}
		if r.space != rep.space {
			return fmt.Errorf("search embedded the query in space %s, the real vectors are in %s (another gn?)", r.space, rep.space)
		}
		fmt.Fprintf(os.Stderr, "pgvector bench:   search --doc cold=%v %.2f s, %d windows, %d GN\n", cold, r.wall.Seconds(), r.windows, r.gnWins)
		rep.docRuns = append(rep.docRuns, r)
	}
	return nil
}

func searchDoc(ctx context.Context, o options, pipeline string) (docRun, error) {
	var r docRun
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, o.bin, "search", "--doc", o.queryDoc, "--format", "json", pipeline)
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r.wall = time.Since(start)
	if err != nil {
		return r, fmt.Errorf("%s search: %w\n%s", o.bin, err, errb.String())
	}
	var res struct {
		Query struct {
			DocID     string `json:"doc_id"`
			Space     string `json:"space"`
			Windows   int    `json:"windows"`
			CacheHits int    `json:"cache_hits"`
			GNWindows int    `json:"gn_windows"`
		} `json:"query"`
		Hits []struct {
			DocID string `json:"doc_id"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return r, fmt.Errorf("search output %q: %w", out.String(), err)
	}
	q := res.Query
	r.docID, r.space, r.windows, r.cacheHits, r.gnWins = q.DocID, q.Space, q.Windows, q.CacheHits, q.GNWindows
	if len(res.Hits) > 0 {
		r.top1 = res.Hits[0].DocID
	}
	return r, nil
}

// copyDir replaces dst with a copy of src (cp -a keeps what the cache's files are).
func copyDir(src, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp -a %s %s: %w: %s", src, dst, err, out)
	}
	return nil
}
