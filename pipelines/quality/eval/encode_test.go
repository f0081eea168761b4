package eval

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
)

// EncodeSides runs the corpus, then the queries, each as a mean-pool run of its own under the
// output folder, and adds up their window counts; a failed document fails the evaluation.
func TestEncodeSides(t *testing.T) {
	ds := &beir.Dataset{Corpus: []beir.Doc{{ID: "d1", Text: "x"}, {ID: "d2", Text: ""}}, Queries: []beir.Query{{ID: "q1", Text: "y"}}}
	cfg := &pipelines.Config{Name: "p", Aggregate: components.WithCheckpoint(pipelines.AggregateConfig{}, "ck")}
	out := t.TempDir()
	var runs []string
	enc := func(_ context.Context, c *pipelines.Config, src connectors.Source) (engine.Summary, error) {
		runs = append(runs, c.Name+" "+c.Source.Name+" "+c.Aggregate.Type+" "+c.Sinks[0].Dir())
		return engine.Summary{Windows: 3, GNWindows: 2, CacheHits: 1}, nil
	}
	n, err := EncodeSides(context.Background(), enc, cfg, ds, out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"eval-c c meanpool " + filepath.Join(out, "vectors-c"), "eval-q q meanpool " + filepath.Join(out, "vectors-q")}
	if strings.Join(runs, "|") != strings.Join(want, "|") || n != (EncodeCounts{Windows: 6, GNWindows: 4, CacheHits: 2}) {
		t.Fatalf("runs %q, counts %+v", runs, n)
	}
	if cfg.Aggregate.Type != "reign" || cfg.Name != "p" {
		t.Fatalf("the caller's config changed: %+v", cfg)
	}
	failing := func(context.Context, *pipelines.Config, connectors.Source) (engine.Summary, error) {
		return engine.Summary{DocsFailed: 1}, nil
	}
	if _, err := EncodeSides(context.Background(), failing, cfg, ds, out); err == nil || !strings.Contains(err.Error(), "1 documents failed") {
		t.Fatalf("failed document: %v", err)
	}
	if _, err := EncodeSides(context.Background(), nil, cfg, ds, out); err == nil {
		t.Fatal("no encoder accepted")
	}
}
