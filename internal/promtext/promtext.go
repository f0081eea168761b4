// Package promtext writes metrics in the Prometheus text exposition format, one way for every
// process: each sample carries the same label set (pipeline, stage), so a dashboard sums or
// splits the embedded runner and the distributed stages with one query.
package promtext

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Metric is one sample. Kind is "counter" or "gauge"; or "histogram", when Hist holds one
// histogram per value of the label HistLabel (a route), written with that label added to the
// process's labels.
type Metric struct {
	Name, Kind, Help string
	Value            float64
	HistLabel        string
	Hist             map[string]*Histogram
}

// Histogram counts observations into fixed buckets; safe for concurrent use.
type Histogram struct {
	mu     sync.Mutex
	bounds []float64 // upper bounds, ascending
	counts []uint64  // per bucket, not cumulative; the last is +Inf
	sum    float64
}

// LatencyBuckets are the bounds, in seconds, of a request latency histogram: a cache hit
// answers in milliseconds, a long document's GN passes take seconds.
var LatencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// NewHistogram makes a histogram with the given ascending upper bounds.
func NewHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// Observe counts v.
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // the first bound >= v: le is inclusive
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.mu.Unlock()
}

func (h *Histogram) write(b *strings.Builder, name, labels string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var cum uint64
	for i, c := range h.counts {
		cum += c
		le := "+Inf"
		if i < len(h.bounds) {
			le = fmt.Sprintf("%g", h.bounds[i])
		}
		fmt.Fprintf(b, "%s_bucket{%s,le=%q} %d\n", name, labels, le, cum)
	}
	fmt.Fprintf(b, "%s_sum{%s} %g\n%s_count{%s} %d\n", name, labels, h.sum, name, labels, cum)
}

// Labels are the labels every sample of a process carries.
type Labels struct {
	Pipeline string // the pipeline's name
	Stage    string // run (embedded), ingest, embed, aggregate or process
}

func (l Labels) String() string {
	return fmt.Sprintf(`{pipeline=%q,stage=%q}`, l.Pipeline, l.Stage)
}

// Write renders ms in order, then extra (gauges, such as consumer lag) sorted by name.
func Write(w io.Writer, l Labels, ms []Metric, extra map[string]float64) error {
	var b strings.Builder
	lab := l.String()
	for _, m := range ms {
		if m.Help != "" {
			fmt.Fprintf(&b, "# HELP %s %s\n", m.Name, m.Help)
		}
		if m.Kind == "histogram" {
			fmt.Fprintf(&b, "# TYPE %s histogram\n", m.Name)
			keys := make([]string, 0, len(m.Hist))
			for k := range m.Hist {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				m.Hist[k].write(&b, m.Name, fmt.Sprintf(`pipeline=%q,stage=%q,%s=%q`, l.Pipeline, l.Stage, m.HistLabel, k))
			}
			continue
		}
		fmt.Fprintf(&b, "# TYPE %s %s\n%s%s %g\n", m.Name, m.Kind, m.Name, lab, m.Value)
	}
	names := make([]string, 0, len(extra))
	for n := range extra {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "# TYPE %s gauge\n%s%s %g\n", n, n, lab, extra[n])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Handler serves what collect returns at each scrape.
func Handler(l Labels, collect func() ([]Metric, map[string]float64)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		ms, extra := collect()
		_ = Write(w, l, ms, extra)
	})
}

// Serve serves h as /metrics, and /healthz, on addr until stop is called: the one endpoint of
// the embedded runner and of every distributed stage. The endpoints have no authentication, so
// an address that is not loopback (":9090" listens on every interface) is logged as a warning:
// put such a port behind a firewall or a scraping proxy.
func Serve(addr string, h http.Handler) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if !Loopback(addr) {
		slog.Warn("metrics endpoint is reachable from other machines and has no authentication; use 127.0.0.1:PORT to keep it local",
			"addr", ln.Addr().String())
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-errc
	}, nil
}

// Loopback reports whether a listen address only accepts connections from this machine.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
