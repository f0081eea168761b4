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
