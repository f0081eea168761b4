package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/serving/query"
	"github.com/reignpipe/reignpipe/schemas"
)

// In distributed mode no worker fills the query side's cache.dir, so the query side makes it a
// replica of the cluster's chunk store (against the real broker, with a real embed worker):
//   - a corpus document costs no GN pass, with nothing materialised beforehand;
//   - a document the cluster embeds after the query side opened becomes a hit once its replica
//     applied it;
//   - while another process keeps that directory a replica (`stage replica`), a query side reads
//     it beside that process, and a corpus document still costs no GN pass.
func TestQueryReadsTheClusterStore(t *testing.T) {
	s := newStoreSetup(t)
	ctx := context.Background()
	docs, _ := storeCorpus(8)
	first, later := docs[:6], docs[6:]
	serveCache := filepath.Join(s.dir, "serve-cache")
	cfgPath := s.storeConfig(t, "dist", "kafka", serveCache, "  - {type: kafka}")
	cfg, err := pipelines.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	wa := s.startWorker(t, "embed-a", cfgPath, filepath.Join(s.dir, "cache-a"))
	produceRaw(t, s, first)
	waitDocs(t, []*worker{wa}, 0, int64(len(first)))

	embed := func(e *query.Embedder, d schemas.Document) *query.Result {
		t.Helper()
		res, err := e.Embed(ctx, schemas.Document{ID: "client:q", Text: d.Text})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	e, err := query.Open(ctx, cfg, query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.CacheNote, serveCache+", a replica of the cluster's chunk store ("+s.topics+".windows, "+s.topics+".manifests) this process keeps") {
		t.Fatalf("cache note %q", e.CacheNote)
	}
	for _, d := range first {
		if res := embed(e, d); res.Windows == 0 || res.CacheHits != res.Windows || res.GNWindows != 0 {
			t.Fatalf("corpus document %s through the replica: %+v", d.ID, res)
		}
	}
	produceRaw(t, s, later)
	waitDocs(t, []*worker{wa}, 0, int64(len(docs)))
	var res *query.Result
	waitFor(t, "the query side's replica to apply the later documents", time.Minute, func() (bool, string) {
		res = embed(e, later[1])
		return res.GNWindows == 0, fmt.Sprintf("%d of %d windows hit", res.CacheHits, res.Windows)
	})
	if err := e.Close(); err != nil { // one GN runtime per process; the replica flushes and checkpoints
		t.Fatal(err)
	}

	// Another process keeps the directory now: the query side reads it beside that one.
	rep := &worker{label: "replica", addr: freeAddr(t)}
	rep.cmd = s.start(t, "replica", "replica", "--cache-dir", serveCache, "--metrics-addr", rep.addr, cfgPath)
	// It serves metrics once it has the directory open.
	waitFor(t, "the replica stage to open the directory", time.Minute, func() (bool, string) {
		_, ok := rep.tryMetrics()
		return ok, "no metrics yet"
	})
	e, err = query.Open(ctx, cfg, query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !strings.Contains(e.CacheNote, "read beside it") {
		t.Fatalf("cache note %q", e.CacheNote)
	}
	for _, d := range docs {
		if res := embed(e, d); res.CacheHits != res.Windows || res.GNWindows != 0 {
			t.Fatalf("corpus document %s beside the replica stage: %+v", d.ID, res)
		}
	}
	stop(t, rep.label, rep.cmd)
	stop(t, wa.label, wa.cmd)
}
