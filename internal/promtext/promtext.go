// Package promtext writes metrics in the Prometheus text exposition format, one way for every
// process: each sample carries the same label set (pipeline, stage), so a dashboard sums or
// splits the embedded runner and the distributed stages with one query.
package promtext

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
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
