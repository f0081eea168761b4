package distributed

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
)

// MetricsHandler serves a stage's counters (and extra gauges such as consumer lag) in the
// Prometheus text format, labelled with the stage.
func MetricsHandler(stage string, c *Counters, extra func() map[string]float64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		for _, m := range []struct {
			name, help string
			v          int64
		}{
			{"reignpipe_stage_inputs_total", "Inputs read by the stage.", c.Inputs.Load()},
			{"reignpipe_stage_written_total", "Documents the stage published.", c.Written.Load()},
			{"reignpipe_stage_dead_letters_total", "Inputs sent to the dead-letter topic.", c.DeadLetters.Load()},
			{"reignpipe_stage_commits_total", "Commits (outputs flushed, inputs acked).", c.Commits.Load()},
		} {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s{stage=%q} %d\n", m.name, m.help, m.name, m.name, stage, m.v)
		}
		if extra == nil {
			return
		}
		ex := extra()
		names := make([]string, 0, len(ex))
		for n := range ex {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "# TYPE %s gauge\n%s{stage=%q} %g\n", n, n, stage, ex[n])
		}
	})
}

// Summary is the JSON line a stage prints when it ends.
type Summary struct {
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
func (s Summary) JSON() []byte {
	b, _ := json.MarshalIndent(s, "", "  ")
	return append(b, '\n')
}
