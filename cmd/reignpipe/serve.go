package main

import (
	"context"
	"log/slog"
	"os"
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
	addr := fs.String("addr", "127.0.0.1:8321", "listen address; one other machines can reach needs an API key (or --insecure-no-auth)")
	adminAddr := fs.String("admin-addr", "", "serve /healthz and /metrics on this address instead, without a key (e.g. 127.0.0.1:9321)")
	keyFile := fs.String("api-key-file", "", "file of API keys, one per line (also $"+serve.KeyEnv+", comma-separated); clients send Authorization: Bearer KEY")
	noAuth := fs.Bool("insecure-no-auth", false, "serve a non-loopback --addr without an API key")
	tlsCert := fs.String("tls-cert", "", "PEM certificate (chain) to serve HTTPS with; needs --tls-key")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	maxConc := fs.Int("max-concurrent", 4, "requests run at once; more are answered 429")
	maxBody := fs.Int64("max-body", 33<<20, "largest request body in bytes (413 past it)")
	bodyTimeout := fs.Duration("body-timeout", 30*time.Second, "longest a request body may take to arrive (408 past it)")
	maxTokens := fs.Int64("max-tokens", 1_000_000, "most GN tokens one request's text may cut into, all its inputs together (413 past it)")
	maxK := fs.Int("max-k", 1000, "largest k a search may ask for")
	timeout := fs.Duration("timeout", 60*time.Second, "longest a request may run once its body is in (504 past it)")
	grace := fs.Duration("grace", 30*time.Second, "on shutdown, how long running requests may finish before they are stopped")
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
	case *maxTokens < 1:
		return usageError("serve", "--max-tokens must be >= 1")
	case *maxK < 1:
		return usageError("serve", "--max-k must be >= 1")
	case *timeout <= 0 || *bodyTimeout <= 0:
		return usageError("serve", "--timeout and --body-timeout must be > 0")
	case (*tlsCert == "") != (*tlsKey == ""):
		return usageError("serve", "give both --tls-cert and --tls-key, or neither")
	}
	if err := setupLogger(*logFormat); err != nil {
		return err
	}
	keys, err := serve.LoadKeys(*keyFile, os.Getenv(serve.KeyEnv))
	if err != nil {
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
	api := serve.New(s, serve.Options{MaxBodyBytes: *maxBody, BodyTimeout: *bodyTimeout, MaxTokens: *maxTokens,
		MaxConcurrent: *maxConc, Timeout: *timeout, MaxK: *maxK, Keys: keys, Admin: *adminAddr != "",
		Sections: components.Sections(cfg.Source), MaxDocBytes: cfg.Source.MaxDocBytes, Pipeline: cfg.Name, GN: cfg.GN.Name})
	srv, err := serve.Listen(serve.Listening{Addr: *addr, AdminAddr: *adminAddr, TLSCert: *tlsCert, TLSKey: *tlsKey,
		InsecureNoAuth: *noAuth}, api)
	if err != nil {
		s.Close()
		return err
	}
	scheme := "http://"
	if srv.TLS {
		scheme = "https://"
	}
	attrs := []any{"addr", scheme + srv.Addr, "space", s.Embedder.Space(), "store", s.Store.Name(), "api_keys", keys.Len()}
	if srv.AdminAddr != "" {
		attrs = append(attrs, "admin", "http://"+srv.AdminAddr)
	}
	if s.Embedder.CacheNote != "" {
		attrs = append(attrs, "chunk_cache", s.Embedder.CacheNote)
	}
	slog.Info("serving POST /v1/embed, /v1/search, /v1/embeddings; GET /v1/models, /info, /healthz, /metrics", attrs...)
	<-ctx.Done()
	slog.Info("shutting down: finishing running requests", "grace", grace.String())
	err = srv.Shutdown(*grace)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}
