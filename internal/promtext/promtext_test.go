package promtext

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// Every sample, the extra gauges included, carries the same labels, and every metric has its
// TYPE line: what a Prometheus scrape of any reignpipe process parses.
func TestEverySampleLabelled(t *testing.T) {
	h := Handler(Labels{Pipeline: "wiki", Stage: "embed"}, func() ([]Metric, map[string]float64) {
		return []Metric{{Name: "reignpipe_a_total", Kind: "counter", Help: "A.", Value: 3}, {Name: "reignpipe_b", Kind: "gauge", Value: 1.5}},
			map[string]float64{"reignpipe_consumer_lag": 7, "reignpipe_aaa": 1}
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("content type %q", ct)
	}
	var samples []string
	types := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[1] == "TYPE" {
			types[f[2]] = true
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		samples = append(samples, line)
		name, rest, ok := strings.Cut(line, "{")
		if !ok || !strings.HasPrefix(rest, `pipeline="wiki",stage="embed"} `) || !types[name] {
			t.Errorf("sample %q: want labels {pipeline=\"wiki\",stage=\"embed\"} and a TYPE line", line)
		}
	}
	want := []string{"reignpipe_a_total{", "reignpipe_b{", "reignpipe_aaa{", "reignpipe_consumer_lag{"}
	if len(samples) != len(want) {
		t.Fatalf("samples %q", samples)
	}
	for i, w := range want {
		if !strings.HasPrefix(samples[i], w) {
			t.Errorf("sample %d = %q, want %s... (counters in order, then extras by name)", i, samples[i], w)
		}
	}
}

// A histogram is written as Prometheus parses it: cumulative buckets with an inclusive le, a
// +Inf bucket equal to the count, the sum, and the process's labels before the histogram's own.
func TestHistogram(t *testing.T) {
	h := NewHistogram([]float64{0.1, 1})
	for _, v := range []float64{0.05, 0.1, 0.5, 3} {
		h.Observe(v)
	}
	var b strings.Builder
	err := Write(&b, Labels{Pipeline: "p", Stage: "serve"}, []Metric{{Name: "lat_seconds", Kind: "histogram", Help: "L.",
		HistLabel: "route", Hist: map[string]*Histogram{"/v1/search": h, "/v1/embed": NewHistogram([]float64{0.1, 1})}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `# HELP lat_seconds L.
# TYPE lat_seconds histogram
lat_seconds_bucket{pipeline="p",stage="serve",route="/v1/embed",le="0.1"} 0
lat_seconds_bucket{pipeline="p",stage="serve",route="/v1/embed",le="1"} 0
lat_seconds_bucket{pipeline="p",stage="serve",route="/v1/embed",le="+Inf"} 0
lat_seconds_sum{pipeline="p",stage="serve",route="/v1/embed"} 0
lat_seconds_count{pipeline="p",stage="serve",route="/v1/embed"} 0
lat_seconds_bucket{pipeline="p",stage="serve",route="/v1/search",le="0.1"} 2
lat_seconds_bucket{pipeline="p",stage="serve",route="/v1/search",le="1"} 3
lat_seconds_bucket{pipeline="p",stage="serve",route="/v1/search",le="+Inf"} 4
lat_seconds_sum{pipeline="p",stage="serve",route="/v1/search"} 3.65
lat_seconds_count{pipeline="p",stage="serve",route="/v1/search"} 4
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
