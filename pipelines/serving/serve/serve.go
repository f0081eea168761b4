// Package serve is reignpipe's HTTP API over a pipeline's query side (package pipelines/serving/search):
//
//	POST /v1/embed   a document -> its vectors (the aggregation's and, beside a REIGN vector, the
//	                 GN mean-pool), each with its space label
//	POST /v1/search  a document, or a stored document's id -> the k nearest documents with scores
//	GET  /healthz    200 "ok" while the server takes requests
//	GET  /metrics    Prometheus text, labelled {pipeline, stage="serve"} like every reignpipe process
//
// A document comes as JSON ({"id","title","text"}), as text/plain (the body is the text), or as
// application/xml (one USPTO patent document, read with the pipeline's source.sections). Bad
// input is a 4xx with a JSON {"error": "..."} body that says what was wrong; a full server
// answers 429 at once rather than queueing without bound.
package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/promtext"
	"github.com/reignpipe/reignpipe/pipelines/serving/search"
	"github.com/reignpipe/reignpipe/schemas"
)

// Options bound what one request may cost.
type Options struct {
	// MaxBodyBytes bounds a request body (default 33 MiB: the sources' default text bound plus
	// room for JSON); a larger body is refused with 413.
	MaxBodyBytes int64
	// MaxConcurrent requests run at once (default 4); more are refused with 429.
	MaxConcurrent int
	// Timeout bounds one request's work (default 60s); past it the answer is 504.
	Timeout time.Duration
	// MaxK bounds k (default 1000).
	MaxK int
	// Sections and MaxDocBytes read documents as the pipeline's source does.
	Sections    []string
	MaxDocBytes int64
	Pipeline    string // the metrics' pipeline label
	Logger      *slog.Logger
}

func (o *Options) defaults() {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 33 << 20
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
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// API is the HTTP handler.
type API struct {
	s    *search.Searcher
	o    Options
	slot chan struct{}
	mux  *http.ServeMux
	m    counters
}

type counters struct {
	embeds, searches, clientErrs, serverErrs, rejected, timeouts atomic.Int64
	inflight                                                     atomic.Int64
	nanos                                                        atomic.Int64
}

// New serves s's pipeline.
func New(s *search.Searcher, o Options) *API {
	o.defaults()
	a := &API{s: s, o: o, slot: make(chan struct{}, o.MaxConcurrent), mux: http.NewServeMux()}
	a.mux.HandleFunc("POST /v1/embed", a.limited(&a.m.embeds, a.embed))
	a.mux.HandleFunc("POST /v1/search", a.limited(&a.m.searches, a.search))
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	a.mux.Handle("GET /metrics", promtext.Handler(promtext.Labels{Pipeline: o.Pipeline, Stage: "serve"}, a.metrics))
	return a
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The mux answers unknown paths and wrong methods in plain text; a JSON client gets JSON.
	if _, pattern := a.mux.Handler(r); pattern == "" {
		code, msg := http.StatusNotFound, "no such endpoint: POST /v1/embed, POST /v1/search, GET /healthz and GET /metrics exist"
		for _, p := range []string{"/v1/embed", "/v1/search", "/healthz", "/metrics"} {
			if r.URL.Path == p {
				code, msg = http.StatusMethodNotAllowed, fmt.Sprintf("%s takes %s", p, methodOf(p))
			}
		}
		a.m.clientErrs.Add(1)
		writeError(w, code, msg)
		return
	}
	a.mux.ServeHTTP(w, r)
}

func methodOf(path string) string {
	if strings.HasPrefix(path, "/v1/") {
		return "POST"
	}
	return "GET"
}

// httpError is an error with the status it answers.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func bad(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// limited runs h under the concurrency bound and the request timeout, and turns its error into
// the status it deserves.
func (a *API) limited(n *atomic.Int64, h func(ctx context.Context, r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case a.slot <- struct{}{}:
		default:
			a.m.rejected.Add(1)
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusTooManyRequests, fmt.Sprintf("%d requests are already running (serve --max-concurrent); retry shortly", a.o.MaxConcurrent))
			return
		}
		defer func() { <-a.slot }()
		n.Add(1)
		a.m.inflight.Add(1)
		defer a.m.inflight.Add(-1)
		start := time.Now()
		defer func() { a.m.nanos.Add(int64(time.Since(start))) }()
		ctx, cancel := context.WithTimeout(r.Context(), a.o.Timeout)
		defer cancel()
		r.Body = http.MaxBytesReader(w, r.Body, a.o.MaxBodyBytes)
		out, err := h(ctx, r)
		if err != nil {
			code, msg := a.status(ctx, err)
			if code >= 500 {
				a.m.serverErrs.Add(1)
				a.o.Logger.Error("request failed", "path", r.URL.Path, "err", err)
			} else {
				a.m.clientErrs.Add(1)
			}
			writeError(w, code, msg)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	}
}

func (a *API) status(ctx context.Context, err error) (int, string) {
	var he *httpError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &he):
		return he.code, he.msg
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d bytes (serve --max-body)", tooBig.Limit)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		a.m.timeouts.Add(1)
		return http.StatusGatewayTimeout, fmt.Sprintf("the request took longer than %s (serve --timeout): %v", a.o.Timeout, err)
	case errors.As(err, new(*connectors.NotFoundError)):
		return http.StatusNotFound, err.Error()
	}
	return http.StatusInternalServerError, err.Error()
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// request is the JSON body of both endpoints. A search names either a document (text, with
// optional id and title) or a stored document by stored_id.
type request struct {
	ID       string `json:"id"`
	Title    string `json:"title"`
	Text     string `json:"text"`
	StoredID string `json:"stored_id"`
	K        int    `json:"k"`
	Exact    bool   `json:"exact"`
	GN       bool   `json:"gn"`
}

// readRequest reads the body in whichever of the three forms it comes; for text and XML bodies
// k, exact and gn come from the query string.
func (a *API) readRequest(r *http.Request) (request, *schemas.Document, error) {
	var q request
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json", "":
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&q); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				return q, nil, err
			}
			return q, nil, bad("the body is not a JSON request (id, title, text, stored_id, k, exact, gn): %v", err)
		}
		if q.StoredID != "" {
			if q.Text != "" {
				return q, nil, bad("give text or stored_id, not both")
			}
			return q, nil, nil
		}
		id := q.ID
		if id == "" {
			id = "query:request"
		}
		d, err := search.TextDocument(strings.NewReader(q.Text), id, q.Title, a.o.MaxDocBytes)
		if err != nil {
			return q, nil, bad("%v", err)
		}
		return q, &d, nil
	case "text/plain":
		d, err := search.TextDocument(r.Body, "query:request", "", a.o.MaxDocBytes)
		if err != nil {
			return q, nil, maybeBad(err)
		}
		q.K, q.Exact, q.GN = queryInt(r, "k"), queryBool(r, "exact"), queryBool(r, "gn")
		return q, &d, nil
	case "application/xml", "text/xml":
		d, err := a.patent(r.Body)
		if err != nil {
			return q, nil, maybeBad(err)
		}
		q.K, q.Exact, q.GN = queryInt(r, "k"), queryBool(r, "exact"), queryBool(r, "gn")
		return q, d, nil
	}
	return q, nil, &httpError{http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: send application/json, text/plain or application/xml (a USPTO patent)", ct)}
}

func maybeBad(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return err
	}
	return bad("%v", err)
}

// patent reads one USPTO XML document through the source's own reader, which reads files.
func (a *API) patent(body io.Reader) (*schemas.Document, error) {
	f, err := os.CreateTemp("", "reignpipe-query-*.xml")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	d, err := search.ReadDocument(f.Name(), search.DocOptions{Format: "uspto", Sections: a.o.Sections, MaxBytes: a.o.MaxDocBytes})
	if err != nil {
		return nil, errors.New(strings.ReplaceAll(err.Error(), f.Name(), "the request body"))
	}
	return &d, nil
}

func queryInt(r *http.Request, key string) int {
	n, _ := strconv.Atoi(r.URL.Query().Get(key))
	return n
}

func queryBool(r *http.Request, key string) bool {
	b, _ := strconv.ParseBool(r.URL.Query().Get(key))
	return b
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

func (a *API) embed(ctx context.Context, r *http.Request) (any, error) {
	_, doc, err := a.readRequest(r)
	if err != nil {
		return nil, err
	}
	if doc == nil {
		return nil, bad("embed takes a document (text), not stored_id")
	}
	res, err := a.s.Embedder.Embed(ctx, *doc)
	if err != nil {
		return nil, err
	}
	v := res.Vector
	out := embedOut{DocID: v.DocID, Title: v.Title, ContentHash: fmt.Sprintf("%016x", v.ContentHash), NChunks: v.NChunks,
		NTokens: v.NTokens, Windows: res.Windows, CacheHits: res.CacheHits, GNWindows: res.GNWindows,
		Vectors: []vectorOut{{Space: v.Space, Kind: "aggregate", Dim: len(v.Vector), Vector: v.Vector}}}
	if v.GNSpace != "" {
		out.Vectors = append(out.Vectors, vectorOut{Space: v.GNSpace, Kind: "gn-meanpool", Dim: len(v.GNVector), Vector: v.GNVector})
	}
	return out, nil
}

func (a *API) search(ctx context.Context, r *http.Request) (any, error) {
	q, doc, err := a.readRequest(r)
	if err != nil {
		return nil, err
	}
	if q.K == 0 {
		q.K = 10
	}
	if q.K < 1 || q.K > a.o.MaxK {
		return nil, bad("k=%d: must be in [1, %d]", q.K, a.o.MaxK)
	}
	return a.s.Search(ctx, search.Request{Doc: doc, ID: q.StoredID, K: q.K, Exact: q.Exact, GN: q.GN})
}

func (a *API) metrics() ([]promtext.Metric, map[string]float64) {
	st := a.s.Embedder.Stats()
	c := func(name, help string, v int64) promtext.Metric {
		return promtext.Metric{Name: name, Kind: "counter", Help: help, Value: float64(v)}
	}
	return []promtext.Metric{
		c("reignpipe_serve_embed_requests_total", "POST /v1/embed requests taken", a.m.embeds.Load()),
		c("reignpipe_serve_search_requests_total", "POST /v1/search requests taken", a.m.searches.Load()),
		c("reignpipe_serve_client_errors_total", "requests answered 4xx (bad input)", a.m.clientErrs.Load()),
		c("reignpipe_serve_server_errors_total", "requests answered 5xx", a.m.serverErrs.Load()),
		c("reignpipe_serve_rejected_total", "requests refused with 429 (serve --max-concurrent)", a.m.rejected.Load()),
		c("reignpipe_serve_timeouts_total", "requests past serve --timeout", a.m.timeouts.Load()),
		{Name: "reignpipe_serve_request_seconds_total", Kind: "counter", Help: "time spent in requests", Value: float64(a.m.nanos.Load()) / 1e9},
		{Name: "reignpipe_serve_inflight", Kind: "gauge", Help: "requests running now", Value: float64(a.m.inflight.Load())},
		c("reignpipe_query_documents_total", "query documents embedded", st.Queries),
		c("reignpipe_query_windows_total", "windows cut from query documents", st.Windows),
		c("reignpipe_query_cache_hits_total", "query windows found in the chunk cache", st.CacheHits),
		c("reignpipe_query_gn_windows_total", "query windows embedded by the GN", st.GNWindows),
		c("reignpipe_query_cache_corrupt_total", "damaged cached windows a query embedded again", st.CacheCorrupt),
	}, nil
}

// Server is the API listening on an address, with the owner of its background work.
type Server struct {
	Addr string // the address it listens on (the port filled in when 0 was asked for)
	srv  *http.Server
	errc chan error
	stop chan struct{}
	done chan struct{}
	api  *API
	once sync.Once
	err  error
}

// Listen starts serving a on addr. Every FlushEvery (default 30s) the query windows the GN
// embedded are flushed to the chunk cache, so later queries, and later runs, find them.
func Listen(addr string, a *API, flushEvery time.Duration) (*Server, error) {
	if flushEvery <= 0 {
		flushEvery = 30 * time.Second
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if !promtext.Loopback(addr) {
		a.o.Logger.Warn("serving on an address other machines can reach; the API has no authentication", "addr", ln.Addr().String())
	}
	s := &Server{
		Addr: ln.Addr().String(), api: a, errc: make(chan error, 1), stop: make(chan struct{}), done: make(chan struct{}),
		srv: &http.Server{
			Handler: a, ReadHeaderTimeout: 10 * time.Second,
			// The body is read inside the request's work; the write gets the same budget on top.
			ReadTimeout: a.o.Timeout, WriteTimeout: 2*a.o.Timeout + 10*time.Second, IdleTimeout: 2 * time.Minute,
		},
	}
	go func() { s.errc <- s.srv.Serve(ln) }()
	go s.flushLoop(flushEvery)
	return s, nil
}

func (s *Server) flushLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.api.s.Embedder.Flush(); err != nil {
				s.api.o.Logger.Warn("query windows not flushed to the chunk cache; retrying later", "err", err)
			}
		}
	}
}

// Shutdown stops taking connections, lets running requests finish within grace, then stops the
// flusher. The caller closes the searcher afterwards (which flushes the cache a last time).
// A second call returns the first one's result.
func (s *Server) Shutdown(grace time.Duration) error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		s.err = s.srv.Shutdown(ctx)
		if serr := <-s.errc; !errors.Is(serr, http.ErrServerClosed) && s.err == nil {
			s.err = serr
		}
		close(s.stop)
		<-s.done
	})
	return s.err
}
