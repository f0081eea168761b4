package reaggregate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// A document's chunks come back in window order, repeats included; a window the cache lacks
// is a MissingError naming it; Vector is the mean-pool of the chunks by the manifest.
func TestReader(t *testing.T) {
	const dim = 2
	c, err := shardcache.Open(shardcache.Options{Dir: t.TempDir(), Fingerprint: "fake-gn", Dim: dim, K: 8, S: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, r := range []shardcache.Row{
		{Key: 1, DocID: "t:a", ChunkIndex: 0, NTokens: 8, Embedding: []float32{1, 0}},
		{Key: 2, DocID: "t:a", ChunkIndex: 1, NTokens: 8, Embedding: []float32{0, 1}},
	} {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []shardcache.Manifest{
		{DocID: "t:a", Version: "1", Keys: []uint64{2, 1, 2}},
		{DocID: "t:b", Version: "1", Keys: []uint64{1, 9}},
	} {
		if err := c.PutManifest(m); err != nil {
			t.Fatal(err)
		}
	}
	rd := NewReader(c, dim)
	ma, _, _ := c.Manifest("t:a")
	chunks, err := rd.Chunks(ma)
	if err != nil || len(chunks) != 3 || chunks[0][1] != 1 || chunks[1][0] != 1 || chunks[2][1] != 1 {
		t.Fatalf("chunks %v, %v", chunks, err)
	}
	mb, _, _ := c.Manifest("t:b")
	var missing *MissingError
	if _, err := rd.Chunks(mb); !errors.As(err, &missing) || missing.Window != 1 || missing.Key != 9 || missing.DocID != "t:b" {
		t.Fatalf("missing window: %v", err)
	}
	mp, err := aggregate.NewMeanPool(dim, "fake-gn")
	if err != nil {
		t.Fatal(err)
	}
	v, err := rd.Vector("t:a", mp)
	if want := []float32{float32(1 / math.Sqrt(5)), float32(2 / math.Sqrt(5))}; err != nil || math.Abs(float64(v[0]-want[0])) > 1e-6 || math.Abs(float64(v[1]-want[1])) > 1e-6 {
		t.Fatalf("vector %v, %v; want %v", v, err, want)
	}
	if _, err := rd.Vector("t:none", mp); err == nil {
		t.Fatal("a document without a manifest gave a vector")
	}
}

// countingSink records, for each flush, how many vectors it had taken since the last one.
type countingSink struct {
	n       int
	batches []int
}

func (s *countingSink) Delete(context.Context, schemas.Deletion) error { s.n++; return nil }
func (s *countingSink) Write(context.Context, schemas.DocVector) error { s.n++; return nil }
func (s *countingSink) Flush(context.Context) error {
	if s.n > 0 {
		s.batches = append(s.batches, s.n)
	}
	s.n = 0
	return nil
}
func (s *countingSink) Close(ctx context.Context) error { return s.Flush(ctx) }

// Re-aggregation into the configured sinks commits at the run's cadence (run.commit_every), so
// a sink -- a database's transaction -- never holds more than that many vectors, however large
// the corpus; a document whose window is missing is dead-lettered, not lost in a log line.
func TestRunIntoCommitsAtTheRunCadence(t *testing.T) {
	cfg, c := testStore(t)
	for i := range 35 {
		keys := []uint64{1, 2, 3}
		if i == 17 {
			keys = []uint64{1, 99} // 99 is in no shard
		}
		if err := c.PutManifest(shardcache.Manifest{DocID: fmt.Sprintf("t:%d", i), Version: "1", Keys: keys}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sink := &countingSink{}
	sum, err := RunInto(context.Background(), cfg, func(gn.Identity, aggregate.Aggregator, aggregate.Aggregator) ([]connectors.Sink, []string, error) {
		return []connectors.Sink{sink}, []string{"counting"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Documents != 35 || sum.Written != 34 || sum.Failed != 1 || sum.Commits != 4 {
		t.Fatalf("summary %+v", sum)
	}
	for _, n := range sink.batches {
		if n > 10 {
			t.Fatalf("a commit held %d vectors, over run.commit_every 10: %v", n, sink.batches)
		}
	}
	dl, err := os.ReadFile(cfg.DeadLetterPath())
	if err != nil || !strings.Contains(string(dl), `"t:17"`) || !strings.Contains(string(dl), "not in the cache") {
		t.Fatalf("dead letters %q (%v)", dl, err)
	}
}

// testStore is a pipeline (commit_every 10, a parquet sink) and its opened chunk cache, which
// holds windows 1, 2 and 3.
func testStore(t *testing.T) (*pipelines.Config, *shardcache.Cache) {
	t.Helper()
	model, tok := testenv.GN(t, "bge-small-en-v15")
	dir := t.TempDir()
	y := fmt.Sprintf(`version: 1
name: rc
source: {type: jsonl, path: unused.jsonl}
gn: {name: bge-small-en-v15, model: %q, tokenizer: %q}
chunking: {k: 64, s: 64}
cache: {dir: %q}
sinks: [{type: parquet, dir: %q}]
run: {state_dir: %q, commit_every: 10, progress: off}
`, model, tok, filepath.Join(dir, "cache"), filepath.Join(dir, "vectors"), filepath.Join(dir, "state"))
	cfg, err := pipelines.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	id, err := gn.Identify(gn.Config{Name: "bge-small-en-v15", Model: model, Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	c, err := shardcache.Open(shardcache.Options{Dir: cfg.Cache.Dir, Fingerprint: id.Fingerprint, Dim: id.Dim, K: 64, S: 64})
	if err != nil {
		t.Fatal(err)
	}
	emb := make([]float32, id.Dim)
	emb[0] = 1
	for k := uint64(1); k <= 3; k++ {
		if _, err := c.Add(shardcache.Row{Key: k, DocID: "t:0", Embedding: emb}); err != nil {
			t.Fatal(err)
		}
	}
	return cfg, c
}

// idSink records the doc ids it is given.
type idSink struct{ ids []string }

func (s *idSink) Delete(_ context.Context, d schemas.Deletion) error {
	s.ids = append(s.ids, "-"+d.DocID)
	return nil
}
func (s *idSink) Write(_ context.Context, v schemas.DocVector) error {
	s.ids = append(s.ids, v.DocID)
	return nil
}
func (s *idSink) Flush(context.Context) error { return nil }
func (s *idSink) Close(context.Context) error { return nil }

// A deleted document has no manifest, so re-aggregation (and so tune --apply) never writes
// it again: not the version deleted, not an older one put after the deletion, and not after
// the cache was reopened. A document deleted and then put at a newer version is back.
func TestRunIntoSkipsDeletedDocuments(t *testing.T) {
	cfg, c := testStore(t)
	for i := range 6 {
		if err := c.PutManifest(shardcache.Manifest{DocID: fmt.Sprintf("t:%d", i), Version: "2", Keys: []uint64{1, 2, 3}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t:1", "t:4", "t:5"} {
		if err := c.DeleteManifest(schemas.Deletion{DocID: id, Version: "2"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.PutManifest(shardcache.Manifest{DocID: "t:4", Version: "1", Keys: []uint64{1}}); !errors.Is(err, shardcache.ErrSuperseded) {
		t.Fatalf("an older manifest after the deletion: %v", err)
	}
	if err := c.PutManifest(shardcache.Manifest{DocID: "t:5", Version: "3", Keys: []uint64{2}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sink := &idSink{}
	sum, err := RunInto(context.Background(), cfg, func(gn.Identity, aggregate.Aggregator, aggregate.Aggregator) ([]connectors.Sink, []string, error) {
		return []connectors.Sink{sink}, []string{"ids"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sink.ids, " "); got != "t:0 t:2 t:3 t:5" || sum.Documents != 4 || sum.Written != 4 {
		t.Fatalf("re-aggregated %q (summary %+v), want t:0 t:2 t:3 t:5", got, sum)
	}
}
