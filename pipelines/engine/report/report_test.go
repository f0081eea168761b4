package report

import (
	"bytes"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/promtext"
	"github.com/reignpipe/reignpipe/pipelines/engine"
)

// The ETA is the amount left at the rate of the last minute: not the average since the start,
// which a slow start (or a resumed run's skipped inputs) would skew for the whole run.
func TestETA(t *testing.T) {
	s := time.Second
	cases := []struct {
		name    string
		samples []rateSample // (time since start, bytes done)
		left    float64
		want    time.Duration // 0: no ETA
	}{
		{"steady", []rateSample{{0, 0}, {10 * s, 100}}, 900, 90 * s},
		{"too early", []rateSample{{0, 0}, {2 * s, 100}}, 900, 0},
		{"one sample", []rateSample{{10 * s, 100}}, 900, 0},
		{"stalled", []rateSample{{0, 100}, {30 * s, 100}}, 900, 0},
		{"nothing left", []rateSample{{0, 0}, {10 * s, 100}}, 0, 0},
		// 10 B/s for a minute, then 20 B/s: only the last minute counts.
		{"faster now", []rateSample{{0, 0}, {60 * s, 600}, {120 * s, 1800}}, 1200, 60 * s},
		// Slow first minute (model warm-up): the last minute did 25 B/s; the average since the
		// start (15 B/s) would say 80 s.
		{"slow start forgotten", []rateSample{{0, 0}, {30 * s, 150}, {60 * s, 300}, {90 * s, 900}, {120 * s, 1800}}, 1200, 48 * s},
		// Bar frames every half second: the window keeps the newest sample a full span back.
		{"frames", func() []rateSample {
			var out []rateSample
			for i := 0; i <= 240; i++ {
				out = append(out, rateSample{time.Duration(i) * s / 2, float64(i) * 5})
			}
			return out
		}(), 1000, 100 * s},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := rateWindow{span: etaSpan}
			for _, x := range c.samples {
				w.add(x.at, x.done)
			}
			got, ok := w.eta(c.left)
			if c.want == 0 && ok || c.want != 0 && (!ok || (got-c.want).Abs() > time.Millisecond) {
				t.Fatalf("eta %v (%v), want %v", got, ok, c.want)
			}
			if len(w.samples) > 0 && w.samples[len(w.samples)-1].at-w.samples[0].at > etaSpan+s {
				t.Fatalf("kept %v of samples", w.samples[len(w.samples)-1].at-w.samples[0].at)
			}
		})
	}
}

// The bar counts windows once they have their embedding, not when they are cut: while the GN
// holds every window, it shows none done.
func TestProgressCountsWindowsDone(t *testing.T) {
	var c engine.Counters
	var out bytes.Buffer
	p := &Progress{c: &c, stats: func() connectors.SourceStats { return connectors.SourceStats{} }, mode: "bar", out: &out, started: time.Now(), rate: rateWindow{span: etaSpan}}
	c.Windows.Add(12) // cut and looked up, every one at the GN
	p.report(false)
	if !strings.Contains(out.String(), "windows 0 ") || !strings.Contains(out.String(), "GN 0") {
		t.Fatalf("with 12 windows cut and none embedded the bar read %q", out.String())
	}
	out.Reset()
	c.WindowsDone.Add(12)
	c.GNWindows.Add(9)
	c.CacheHits.Add(3)
	p.report(true)
	if got := out.String(); !strings.Contains(got, "windows "+strconv.Itoa(12)+" ") || !strings.Contains(got, "GN 9") || !strings.Contains(got, "cache hits 25.0%") {
		t.Fatalf("bar %q", got)
	}
}

// Deletions show in the bar once there are any, and in /metrics with the upserts they kept out.
func TestDeletesReported(t *testing.T) {
	var c engine.Counters
	var out bytes.Buffer
	p := &Progress{c: &c, stats: func() connectors.SourceStats { return connectors.SourceStats{} }, mode: "bar", out: &out, started: time.Now(), rate: rateWindow{span: etaSpan}}
	p.report(false)
	if strings.Contains(out.String(), "deleted") {
		t.Fatalf("a run with no deletion shows them: %q", out.String())
	}
	out.Reset()
	c.DocsDeleted.Add(4)
	c.Superseded.Add(2)
	p.report(false)
	if !strings.Contains(out.String(), "deleted 4") {
		t.Fatalf("bar %q", out.String())
	}
	rec := httptest.NewRecorder()
	MetricsHandler(&c, promtext.Labels{Pipeline: "p", Stage: "run"}, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`reignpipe_docs_deleted_total{pipeline="p",stage="run"} 4`, `reignpipe_docs_superseded_by_delete_total{pipeline="p",stage="run"} 2`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, rec.Body.String())
		}
	}
}
