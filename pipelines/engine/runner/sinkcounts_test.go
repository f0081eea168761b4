package runner

import (
	"context"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// countingSink is a sink that tells what it did with the vectors (connectors.SinkCounter).
type countingSink struct{ memSink }

func (c *countingSink) Counts() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return map[string]int64{"inserted": int64(len(c.durable)), "deleted": int64(len(c.deleted))}
}

// The summary reports the counts of the sinks that keep them (a deletion's among them), under
// their output names, and nothing for the others.
func TestSummaryCarriesSinkCounts(t *testing.T) {
	p := chunk.Params{K: 10, S: 10}
	cache, err := shardcache.Open(shardcache.Options{Dir: t.TempDir(), Fingerprint: "fake-gn", Dim: dim, K: p.K, S: p.S, RowsPerShard: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	agg, _ := aggregate.NewMeanPool(dim, "fake-gn")
	plain, counting := &memSink{}, &countingSink{}
	docs := append(corpus(7), schemas.Document{ID: "t:2", Source: "t", Version: "1", Deleted: true})
	r, err := New(Parts{Source: &sliceSource{docs: docs}, Tokenizer: wordTokenizer{}, Chunking: p, Fingerprint: "fake-gn", Dim: dim,
		Embedder: gnOf{&fakeGN{}}, Cache: cache, Aggregation: engine.Aggregation{Aggregator: agg}, Sinks: []connectors.Sink{plain, counting}, DeadLetter: &memDL{}},
		Options{CommitEvery: 3, TokenizeWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := engine.Summary{Outputs: []string{"out/v", "pgvector:127.0.0.1:5432/db table reignpipe"}}
	r.Summarize(&s, connectors.SourceStats{})
	if got := s.Sinks["pgvector:127.0.0.1:5432/db table reignpipe"]; len(s.Sinks) != 1 || got["inserted"] != 7 || got["deleted"] != 1 {
		t.Fatalf("sinks %v, want the counting sink's 7 inserted and 1 deleted only", s.Sinks)
	}
	if s.DocsWritten != 7 || s.DocsDeleted != 1 {
		t.Fatalf("written %d deleted %d", s.DocsWritten, s.DocsDeleted)
	}
}
