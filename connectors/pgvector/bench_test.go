package pgvector

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/schemas"
)

// BenchmarkUpsert measures rows/s of batch upserts of 384-dimensional vectors (bge-small's),
// new rows committed every 512 (run.commit_every's default), with no index, a live HNSW index,
// and the HNSW index built at Close (index: deferred, its build included).
func BenchmarkUpsert(b *testing.B) {
	dsn := pgtest.Database(b)
	const dim, rows = 384, 5000
	r := rand.New(rand.NewPCG(1, 1))
	vecs := make([][]float32, rows) // distinct: HNSW stores equal vectors as one element
	for i := range vecs {
		vecs[i] = unit(r, dim)
	}
	tables := 0 // each round writes new tables: a second round into the same ones changes nothing
	for _, index := range []string{IndexNone, IndexHNSW, IndexDeferred} {
		b.Run(index, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				tables++
				prefix := fmt.Sprintf("b_%s_%d", index, tables)
				s, err := Open(context.Background(), Options{Config: Config{DSN: dsn, Table: prefix, Index: index}})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				for i := range rows {
					v := schemas.DocVector{DocID: fmt.Sprintf("enwiki:%d", i), Version: "1", ContentHash: uint64(i), Title: "title", Source: "enwiki",
						Space: reignSpace, Vector: vecs[i]}
					if err := s.Write(context.Background(), v); err != nil {
						b.Fatal(err)
					}
					if i%512 == 511 {
						if err := s.Flush(context.Background()); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := s.Close(context.Background()); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
			}
			b.ReportMetric(float64(rows*b.N)/total.Seconds(), "rows/s")
		})
	}
}
