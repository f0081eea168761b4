package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/serving/query"
	"github.com/reignpipe/reignpipe/pipelines/serving/search"
	"github.com/reignpipe/reignpipe/pipelines/serving/serve"
)

// cmdServe runs the HTTP API (pipelines/serving/serve) until interrupted, then drains it.
func cmdServe(ctx context.Context, args []string) error {
	fs := newFlagSet("serve", args)
	addr := fs.String("addr", "127.0.0.1:8321", "listen address (loopback by default: the API has no authentication)")
	maxConc := fs.Int("max-concurrent", 4, "requests run at once; more are answered 429")
	maxBody := fs.Int64("max-body", 33<<20, "largest request body in bytes (413 past it)")
	timeout := fs.Duration("timeout", 60*time.Second, "longest a request may run (504 past it)")
	grace := fs.Duration("grace", 30*time.Second, "on shutdown, how long running requests may finish")
	sink := fs.Int("sink", -1, "search the pipeline's sinks[N] (default: the first pgvector sink, else the first parquet or jsonl sink)")
	noCache := fs.Bool("no-cache", false, "read no chunk cache: every query window goes to the GN (a baseline; the cache is read beside a running pipeline)")
	queryCache := fs.Int("query-cache", query.DefaultQueryCacheWindows, "query windows the corpus cache lacks kept in memory, so a repeated query costs no GN pass (about 4*dim+100 bytes each; 0 = none)")
	logFormat := fs.String("log-format", "text", "text or json")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return usageError("serve", "give exactly one pipeline file")
	case *maxConc < 1:
		return usageError("serve", "--max-concurrent must be >= 1")
	case *queryCache < 0:
		return usageError("serve", "--query-cache must be >= 0")
	case *maxBody < 1:
		return usageError("serve", "--max-body must be >= 1")
	case *timeout <= 0:
		return usageError("serve", "--timeout must be > 0")
	}
	if err := setupLogger(*logFormat); err != nil {
		return err
	}
	cfg, err := pipelines.Load(pos[0])
	if err != nil {
		return err
	}
	s, err := search.Open(ctx, cfg, search.Options{Sink: *sink, Query: query.Options{NoCache: *noCache, QueryCacheWindows: *queryCache}})
	if err != nil {
		return err
	}
	api := serve.New(s, serve.Options{MaxBodyBytes: *maxBody, MaxConcurrent: *maxConc, Timeout: *timeout,
		Sections: components.Sections(cfg.Source), MaxDocBytes: cfg.Source.MaxDocBytes, Pipeline: cfg.Name})
	srv, err := serve.Listen(*addr, api, 0)
	if err != nil {
		s.Close()
		return err
	}
	attrs := []any{"addr", "http://" + srv.Addr, "space", s.Embedder.Space(), "store", s.Store.Name()}
	if s.Embedder.CacheNote != "" {
		attrs = append(attrs, "chunk_cache", s.Embedder.CacheNote)
	}
	slog.Info("serving POST /v1/embed, POST /v1/search, GET /healthz, GET /metrics", attrs...)
	<-ctx.Done()
	slog.Info("shutting down: finishing running requests", "grace", grace.String())
	err = srv.Shutdown(*grace)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}
