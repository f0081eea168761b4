package cluster

import (
	"encoding/json"
	"net/http"

	"github.com/reignpipe/reignpipe/internal/promtext"
)

// MetricsHandler serves a stage's counters (and extra gauges such as consumer lag) in the
// Prometheus text format, every sample labelled with l.
func MetricsHandler(l promtext.Labels, c *Counters, extra func() map[string]float64) http.Handler {
	return promtext.Handler(l, func() ([]promtext.Metric, map[string]float64) {
		ms := []promtext.Metric{
			{Name: "reignpipe_stage_inputs_total", Kind: "counter", Help: "Inputs read by the stage.", Value: float64(c.Inputs.Load())},
			{Name: "reignpipe_stage_written_total", Kind: "counter", Help: "Documents the stage published.", Value: float64(c.Written.Load())},
			{Name: "reignpipe_stage_dead_letters_total", Kind: "counter", Help: "Inputs sent to the dead-letter topic.", Value: float64(c.DeadLetters.Load())},
			{Name: "reignpipe_stage_commits_total", Kind: "counter", Help: "Commits (outputs flushed, inputs acked).", Value: float64(c.Commits.Load())},
		}
		var ex map[string]float64
		if extra != nil {
			ex = extra()
		}
		return ms, ex
	})
}

// Summary is the JSON line a stage prints when it ends.
type StageSummary struct {
	Pipeline    string           `json:"pipeline"`
	Stage       string           `json:"stage"`
	WallSeconds float64          `json:"wall_seconds"`
	Stopped     string           `json:"stopped"`
	Error       string           `json:"error,omitempty"`
	Inputs      int64            `json:"inputs_read"`
	Written     int64            `json:"docs_written"`
	DeadLetters int64            `json:"dead_letters"`
	Commits     int64            `json:"commits"`
	Skipped     map[string]int64 `json:"docs_skipped,omitempty"`
}

// JSON is the summary as one indented JSON document with a trailing newline.
func (s StageSummary) JSON() []byte {
	b, _ := json.MarshalIndent(s, "", "  ")
	return append(b, '\n')
}
