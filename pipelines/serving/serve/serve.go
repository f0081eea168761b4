// Package serve is reignpipe's HTTP API over a pipeline's query side (package pipelines/serving/search):
//
//	POST /v1/embed       a document -> its vectors (the aggregation's and, beside a REIGN vector,
//	                     the GN mean-pool), each with its space label
//	POST /v1/search      a document, or a stored document's id -> the k nearest documents
//	POST /v1/embeddings  OpenAI's embeddings API: each input one whole document (openai.go)
//	GET  /v1/models      the model names /v1/embeddings takes (the pipeline's vector spaces)
//	GET  /info           the pipeline, its GN, space, dimension and the server's limits
//	GET  /healthz        200 "ok" while the server takes requests (never needs a key)
//	GET  /metrics        Prometheus text, labelled {pipeline, stage="serve"} like every reignpipe
//	                     process, with per-route latency histograms
//
// A native request's document comes as JSON ({"id","title","text"}), as text/plain (the body
// is the text), or as application/xml (one USPTO patent, read with the pipeline's
// source.sections). Every refusal is a JSON error in its route's shape (errors.go).
//
// A request costs in this order, so that no client can hold what others need: the headers
// (the server's header timeout), the key (auth.go), the whole body under its own deadline
// (408) and size bound (413), and only then a concurrency slot (429 at once when none is free)
// under the request's timeout (504). Its context ends with the timeout, with its client and at
// the end of the shutdown grace; the tokenizing and the windows queued for the GN stop with it
// (query.Embed), and its text is bounded in tokens (413). Every request has an id (the
// client's X-Request-Id when it is sane), echoed in the response and in each log line about it,
// and one access log line (observe.go).
package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reignpipe/reignpipe/internal/promtext"
	"github.com/reignpipe/reignpipe/pipelines/serving/query"
	"github.com/reignpipe/reignpipe/pipelines/serving/search"
	"github.com/reignpipe/reignpipe/schemas"
)

// Options bound what one request may cost, and say who may ask.
type Options struct {
	// MaxBodyBytes bounds a request body (default 33 MiB: the sources' default text bound plus
	// room for JSON); a larger body is refused with 413.
	MaxBodyBytes int64
	// BodyTimeout bounds the time the body may take to arrive (default 30s); past it, 408.
	BodyTimeout time.Duration
	// MaxTokens bounds the content tokens one request's text may cut into, all its documents
	// together (default 1,000,000: a few hundred patents); past it, 413.
	MaxTokens int64
	// MaxConcurrent requests run at once (default 4); more are refused with 429.
	MaxConcurrent int
	// Timeout bounds one request's work once its body is in (default 60s); past it, 504.
	Timeout time.Duration
	// MaxK bounds k (default 1000).
	MaxK int
	// MaxInputs bounds the inputs of one /v1/embeddings request (default 2048, OpenAI's).
	MaxInputs int
	// Keys are the API keys; none = no authentication.
	Keys Keys
	// Admin moves /healthz and /metrics to their own listener (Server's admin address), where
	// they need no key; the API address then answers only the API.
	Admin bool
	// Sections and MaxDocBytes read documents as the pipeline's source does.
	Sections    []string
	MaxDocBytes int64
	Pipeline    string // the metrics' pipeline label and /info's pipeline
	GN          string // the GN's name, for /info
	Logger      *slog.Logger
}

func (o *Options) defaults() {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 33 << 20
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 30 * time.Second
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 1_000_000
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = 4
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	if o.MaxK <= 0 {
		o.MaxK = 1000
	}
	if o.MaxInputs <= 0 {
		o.MaxInputs = 2048
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// API is the HTTP handler of the API address.
type API struct {
	s      *search.Searcher
	o      Options
	slot   chan struct{}
	mux    *http.ServeMux // matches paths to routes; the routes run through ServeHTTP
	routes map[string]*route
	m      counters
	// stopping is every request's base context; cancelled when the shutdown grace ends.
	stopping context.Context
	stop     context.CancelFunc
	running  sync.WaitGroup // every ServeHTTP call, so the parts are not closed under one
}

// route is one endpoint: how its errors look, whether it needs a key, whether it reads a body
// and runs in a concurrency slot, and its work.
type route struct {
	method, path string
	shape        shape
	public       bool     // no key needed (/healthz)
	accept       []string // the media types of its body; nil = no body, no slot
	h            func(ctx context.Context, c *call) (any, error)
	latency      *promtext.Histogram
}

// call is one request on its way through a route.
type call struct {
	r      *http.Request
	ct     string // the body's media type
	body   []byte
	log    *slog.Logger
	id     string
	budget *query.Budget
	// what the access log reports
	windows, gnWindows, cacheHits int
}

func (c *call) cost(r *query.Result) {
	c.windows += r.Windows
	c.gnWindows += r.GNWindows
	c.cacheHits += r.CacheHits
}

type counters struct {
	embeds, searches, embeddings                                   atomic.Int64
	clientErrs, serverErrs, rejected, timeouts, unauthorized, slow atomic.Int64
	inflight                                                       atomic.Int64
}

var docTypes = []string{"application/json", "text/plain", "application/xml", "text/xml"}

// New serves s's pipeline.
func New(s *search.Searcher, o Options) *API {
	o.defaults()
	a := &API{s: s, o: o, slot: make(chan struct{}, o.MaxConcurrent), mux: http.NewServeMux(), routes: map[string]*route{}}
	a.stopping, a.stop = context.WithCancel(context.Background())
	a.add(&route{method: "POST", path: "/v1/embed", shape: nativeError, accept: docTypes, h: a.embed})
	a.add(&route{method: "POST", path: "/v1/search", shape: nativeError, accept: docTypes, h: a.search})
	a.add(&route{method: "POST", path: "/v1/embeddings", shape: openAIError, accept: []string{"application/json"}, h: a.embeddings})
	a.add(&route{method: "GET", path: "/v1/models", shape: openAIError, h: a.models})
	a.add(&route{method: "GET", path: "/info", shape: nativeError, h: a.info})
	if !o.Admin {
		for _, rt := range a.adminRoutes() {
			a.add(rt)
		}
	}
	return a
}

func (a *API) add(rt *route) {
	rt.latency = promtext.NewHistogram(promtext.LatencyBuckets)
	pattern := rt.method + " " + rt.path
	a.routes[pattern] = rt
	a.mux.HandleFunc(pattern, func(http.ResponseWriter, *http.Request) {})
}

// adminRoutes are /healthz and /metrics; /metrics needs a key on the API address only.
func (a *API) adminRoutes() []*route {
	return []*route{
		{method: "GET", path: "/healthz", shape: nativeError, public: true, h: func(context.Context, *call) (any, error) { return nil, nil }},
		{method: "GET", path: "/metrics", shape: nativeError, public: a.o.Admin, h: a.metricsText},
	}
}

// AdminHandler serves /healthz and /metrics without a key, for the admin address.
func (a *API) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("GET /metrics", promtext.Handler(promtext.Labels{Pipeline: a.o.Pipeline, Stage: "serve"}, a.metrics))
	return mux
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.running.Add(1)
	defer a.running.Done()
	start := time.Now()
	c := &call{r: r, id: requestID(r)}
	c.log = a.o.Logger.With("request_id", c.id)
	sw := &statusWriter{ResponseWriter: w}
	sw.Header().Set("X-Request-Id", c.id)
	_, pattern := a.mux.Handler(r)
	rt := a.routes[pattern]
	if rt == nil {
		a.refuse(sw, c, a.unrouted(r), nativeError)
	} else {
		a.serve(sw, c, rt)
		rt.latency.Observe(time.Since(start).Seconds())
	}
	name := r.URL.Path
	if rt != nil {
		name = rt.path
	} else if len(name) > 64 {
		name = name[:64] + "…"
	}
	c.log.LogAttrs(r.Context(), slog.LevelInfo, "request", slog.String("method", r.Method), slog.String("route", name),
		slog.Int("status", sw.status()), slog.Duration("latency", time.Since(start)), slog.Int("bytes_in", len(c.body)),
		slog.Int("windows", c.windows), slog.Int("gn_windows", c.gnWindows), slog.Int("cache_hits", c.cacheHits))
}

// unrouted is the answer to a path or method no route has: the mux would answer in plain text.
func (a *API) unrouted(r *http.Request) *apiError {
	for _, rt := range a.routes {
		if rt.path == r.URL.Path {
			return &apiError{status: http.StatusMethodNotAllowed, kind: kindMethod, msg: fmt.Sprintf("%s takes %s", rt.path, rt.method)}
		}
	}
	return &apiError{status: http.StatusNotFound, kind: kindNotFound, msg: "no such endpoint; GET /info lists the routes"}
}

// serve runs one request through rt: key, body, slot, work, answer.
func (a *API) serve(w http.ResponseWriter, c *call, rt *route) {
	if !rt.public && !a.o.Keys.allow(c.r) {
		a.m.unauthorized.Add(1)
		w.Header().Set("WWW-Authenticate", `Bearer realm="reignpipe"`)
		a.refuse(w, c, errUnauthorized, rt.shape)
		return
	}
	ctx := c.r.Context()
	if rt.accept != nil {
		var err error
		if c.ct, err = mediaType(c.r, rt.accept...); err != nil {
			a.refuse(w, c, err, rt.shape)
			return
		}
		if c.body, err = readBody(w, c.r, a.o.MaxBodyBytes, a.o.BodyTimeout); err != nil {
			if ae, ok := err.(*apiError); ok && ae.status == http.StatusRequestTimeout {
				a.m.slow.Add(1)
			}
			a.refuse(w, c, err, rt.shape)
			return
		}
		select {
		case a.slot <- struct{}{}:
		default:
			a.m.rejected.Add(1)
			w.Header().Set("Retry-After", "1")
			a.refuse(w, c, &apiError{status: http.StatusTooManyRequests, kind: kindOverloaded,
				msg: fmt.Sprintf("%d requests are already running (serve --max-concurrent); retry shortly", a.o.MaxConcurrent)}, rt.shape)
			return
		}
		defer func() { <-a.slot }()
		a.m.inflight.Add(1)
		defer a.m.inflight.Add(-1)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.o.Timeout)
		defer cancel()
		c.budget = &query.Budget{Max: a.o.MaxTokens}
		ctx = query.WithBudget(ctx, c.budget)
	}
	out, err := rt.h(ctx, c)
	if err != nil {
		ae := a.classify(ctx, err)
		if ae.status >= 500 {
			c.log.Error("request failed", "route", rt.path, "err", err)
		}
		a.refuse(w, c, ae, rt.shape)
		return
	}
	switch v := out.(type) {
	case nil:
		fmt.Fprintln(w, "ok")
	case []byte:
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(v)
	default:
		// Indented, as the answers always were: a person reading curl's output is a client too.
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
	}
}

// refuse answers e in the route's shape and counts it.
func (a *API) refuse(w http.ResponseWriter, c *call, err error, sh shape) {
	e, ok := err.(*apiError)
	if !ok {
		e = a.classify(c.r.Context(), err)
	}
	if e.status >= 500 {
		a.m.serverErrs.Add(1)
	} else {
		a.m.clientErrs.Add(1)
	}
	sh(w, e, c.id)
}

// vectorOut is one vector of /v1/embed's answer.
type vectorOut struct {
	Space  string    `json:"space"`
	Kind   string    `json:"kind"` // aggregate (the pipeline's vector) or gn-meanpool (beside REIGN)
	Dim    int       `json:"dim"`
	Vector []float32 `json:"vector"`
}

type embedOut struct {
	DocID       string      `json:"doc_id"`
	Title       string      `json:"title,omitempty"`
	ContentHash string      `json:"content_hash"`
	NChunks     int         `json:"n_chunks"`
	NTokens     int         `json:"n_tokens"`
	Windows     int         `json:"windows"`
	CacheHits   int         `json:"cache_hits"`
	GNWindows   int         `json:"gn_windows"`
	Vectors     []vectorOut `json:"vectors"`
}

func (a *API) embed(ctx context.Context, c *call) (any, error) {
	q, doc, err := a.readRequest(c.r, c.ct, c.body)
	if err != nil {
		return nil, err
	}
	if doc == nil {
		return nil, badParam("stored_id", "embed takes a document (text), not stored_id")
	}
	if q.K != nil || q.Exact || q.GN {
		return nil, bad("embed takes a document only; k, exact and gn are search's (its answer holds every vector of the document)")
	}
	a.m.embeds.Add(1)
	res, err := a.s.Embedder.Embed(ctx, *doc)
	if err != nil {
		return nil, err
	}
	c.cost(res)
	v := res.Vector
	out := embedOut{DocID: v.DocID, Title: v.Title, ContentHash: fmt.Sprintf("%016x", v.ContentHash), NChunks: v.NChunks,
		NTokens: v.NTokens, Windows: res.Windows, CacheHits: res.CacheHits, GNWindows: res.GNWindows,
		Vectors: []vectorOut{{Space: v.Space, Kind: "aggregate", Dim: len(v.Vector), Vector: v.Vector}}}
	if v.GNSpace != "" {
		out.Vectors = append(out.Vectors, vectorOut{Space: v.GNSpace, Kind: "gn-meanpool", Dim: len(v.GNVector), Vector: v.GNVector})
	}
	return out, nil
}

func (a *API) search(ctx context.Context, c *call) (any, error) {
	q, doc, err := a.readRequest(c.r, c.ct, c.body)
	if err != nil {
		return nil, err
	}
	k := 10
	if q.K != nil {
		k = *q.K
	}
	if k < 1 || k > a.o.MaxK {
		return nil, badParam("k", "k=%d: must be in [1, %d] (serve --max-k)", k, a.o.MaxK)
	}
	if q.GN && a.s.Embedder.GNSpace() == "" {
		return nil, badParam("gn", "gn: this pipeline's vectors already are the GN mean-pool (aggregate.type: meanpool); leave gn off")
	}
	a.m.searches.Add(1)
	res, err := a.s.Search(ctx, search.Request{Doc: doc, ID: q.StoredID, K: k, Exact: q.Exact, GN: q.GN})
	if err != nil {
		return nil, err
	}
	c.windows, c.gnWindows, c.cacheHits = res.Query.Windows, res.Query.GNWindows, res.Query.CacheHits
	res.Answer.Store = storeKind(res.Answer.Store)
	return res, nil
}

// info is GET /info: what a client needs to know before it asks.
func (a *API) info(context.Context, *call) (any, error) {
	e := a.s.Embedder
	models := []map[string]any{{"space": e.Space(), "dimension": e.Dim(), "kind": "aggregate"}}
	if gs := e.GNSpace(); gs != "" {
		models = append(models, map[string]any{"space": gs, "dimension": e.GNDim(), "kind": "gn-meanpool"})
	}
	var routes []string
	for p := range a.routes {
		routes = append(routes, p)
	}
	slices.Sort(routes)
	return map[string]any{
		"pipeline": a.o.Pipeline, "gn": map[string]any{"name": a.o.GN, "dimension": e.GNDim()},
		"space": e.Space(), "dimension": e.Dim(), "spaces": models, "store": storeKind(a.s.Store.Name()),
		"chunk_cache": cacheNote(e), "auth": a.o.Keys.Len() > 0, "routes": routes,
		"limits": map[string]any{
			"max_body_bytes": a.o.MaxBodyBytes, "body_timeout": a.o.BodyTimeout.String(), "max_tokens": a.o.MaxTokens,
			"max_concurrent": a.o.MaxConcurrent, "timeout": a.o.Timeout.String(), "max_k": a.o.MaxK,
			"max_inputs": a.o.MaxInputs, "max_doc_bytes": a.o.MaxDocBytes,
		},
	}, nil
}

// storeKind is the kind of store a name says ("files", "pgvector"): the rest of the name is
// the folder or table it reads, the server's business.
func storeKind(name string) string {
	kind, _, _ := strings.Cut(name, " ")
	return kind
}

// cacheNote says whether queries use the chunk cache; why not is in the server's start-up log
// line (the note names the cache's folder).
func cacheNote(e *query.Embedder) string {
	if e.CacheNote == "" {
		return "used"
	}
	return "not used (the server's start-up log says why)"
}

func (a *API) metricsText(context.Context, *call) (any, error) {
	var b strings.Builder
	ms, extra := a.metrics()
	err := promtext.Write(&b, promtext.Labels{Pipeline: a.o.Pipeline, Stage: "serve"}, ms, extra)
	return []byte(b.String()), err
}

func (a *API) metrics() ([]promtext.Metric, map[string]float64) {
	st := a.s.Embedder.Stats()
	c := func(name, help string, v int64) promtext.Metric {
		return promtext.Metric{Name: name, Kind: "counter", Help: help, Value: float64(v)}
	}
	hist := map[string]*promtext.Histogram{}
	for _, rt := range a.routes {
		hist[rt.path] = rt.latency
	}
	return []promtext.Metric{
		c("reignpipe_serve_embed_requests_total", "POST /v1/embed requests taken", a.m.embeds.Load()),
		c("reignpipe_serve_search_requests_total", "POST /v1/search requests taken", a.m.searches.Load()),
		c("reignpipe_serve_embeddings_requests_total", "POST /v1/embeddings requests taken", a.m.embeddings.Load()),
		c("reignpipe_serve_client_errors_total", "requests answered 4xx", a.m.clientErrs.Load()),
		c("reignpipe_serve_server_errors_total", "requests answered 5xx", a.m.serverErrs.Load()),
		c("reignpipe_serve_rejected_total", "requests refused with 429 (serve --max-concurrent)", a.m.rejected.Load()),
		c("reignpipe_serve_timeouts_total", "requests past serve --timeout", a.m.timeouts.Load()),
		c("reignpipe_serve_unauthorized_total", "requests refused with 401 (no or a wrong API key)", a.m.unauthorized.Load()),
		c("reignpipe_serve_slow_bodies_total", "bodies not in within serve --body-timeout (408)", a.m.slow.Load()),
		{Name: "reignpipe_serve_inflight", Kind: "gauge", Help: "requests running now", Value: float64(a.m.inflight.Load())},
		{Name: "reignpipe_serve_request_duration_seconds", Kind: "histogram", Help: "request latency by route, from the headers read to the answer written",
			HistLabel: "route", Hist: hist},
		c("reignpipe_query_documents_total", "query documents embedded", st.Queries),
		c("reignpipe_query_windows_total", "windows cut from query documents", st.Windows),
		c("reignpipe_query_cache_hits_total", "query windows found in the chunk cache", st.CacheHits),
		c("reignpipe_query_gn_windows_total", "query windows embedded by the GN", st.GNWindows),
		c("reignpipe_query_cache_corrupt_total", "damaged cached windows a query embedded again", st.CacheCorrupt),
	}, nil
}

// textDoc is one OpenAI input as a document: the same text policy a source applies.
func (a *API) textDoc(text string, i int) (schemas.Document, error) {
	d, err := search.TextDocument(strings.NewReader(text), fmt.Sprintf("query:input-%d", i), "", a.o.MaxDocBytes)
	if err != nil {
		return d, badParam("input", "input[%d]: %v", i, err)
	}
	return d, nil
}
