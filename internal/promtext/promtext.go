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
	"time"
)

// Metric is one sample. Kind is "counter" or "gauge".
type Metric struct {
	Name, Kind, Help string
	Value            float64
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
