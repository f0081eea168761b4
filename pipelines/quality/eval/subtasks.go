package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/quality/dataset"
)

// MacroSummary is `reignpipe eval --subset all`: every subtask evaluated against its own
// corpus, and each system's unweighted mean over the subtasks (LoCo's headline number).
type MacroSummary struct {
	Data     string   `json:"data"`
	Format   string   `json:"format"`
	Split    string   `json:"split"`
	K        int      `json:"k"`
	Subtasks []string `json:"subtasks"`
	// Records the reader left out over all subtasks, by reason (e.g. a null LoCo passage).
	RecordsSkipped map[string]int          `json:"records_skipped,omitempty"`
	Macro          map[string]MacroMetrics `json:"macro"` // system → mean over subtasks
	PerSubset      map[string]*Summary     `json:"per_subtask"`
	// Systems lists the keys of Macro in the order the subtasks' summaries list them.
	Systems []string `json:"-"`
}

// MacroMetrics are one system's metrics averaged over subtasks.
type MacroMetrics struct {
	NDCG     float64 `json:"ndcg"`
	P        float64 `json:"precision"`
	R        float64 `json:"recall"`
	MAP      float64 `json:"map"`
	Subtasks int     `json:"subtasks"`
}

// EvaluateSubtasks evaluates each of src's subtasks against its own corpus, under OUT/<subtask>,
// and writes the macro average to OUT/eval-macro.json.
func EvaluateSubtasks(ctx context.Context, cfg *pipelines.Config, src *dataset.Source, data string, o Options) (*MacroSummary, error) {
	tasks := src.Subtasks()
	if len(tasks) == 0 {
		return nil, fmt.Errorf("eval: --subset all: %s has no subtasks", src.Format)
	}
	ms := &MacroSummary{Data: data, Format: src.Format, Split: o.Split, K: o.K, Subtasks: tasks, RecordsSkipped: src.Skipped,
		Macro: map[string]MacroMetrics{}, PerSubset: map[string]*Summary{}}
	for _, task := range tasks {
		sub, err := src.Subset(task)
		if err != nil {
			return nil, err
		}
		so := o
		so.Out = filepath.Join(o.Out, task)
		sum, err := Evaluate(ctx, cfg, sub, data, so)
		if err != nil {
			return nil, fmt.Errorf("subtask %s: %w", task, err)
		}
		sum.Subset = task
		ms.PerSubset[task] = sum
		if o.OnSubtask != nil {
			o.OnSubtask(sum)
		}
		for _, s := range sum.Systems {
			m, seen := ms.Macro[s.System]
			if !seen {
				ms.Systems = append(ms.Systems, s.System)
			}
			m.NDCG += s.NDCG
			m.P += s.P
			m.R += s.R
			m.MAP += s.MAP
			m.Subtasks++
			ms.Macro[s.System] = m
		}
	}
	for _, name := range ms.Systems {
		m := ms.Macro[name]
		n := float64(m.Subtasks)
		m.NDCG, m.P, m.R, m.MAP = m.NDCG/n, m.P/n, m.R/n, m.MAP/n
		ms.Macro[name] = m
	}
	b, _ := json.MarshalIndent(ms, "", "  ")
	if err := atomicfile.Write(filepath.Join(o.Out, "eval-macro.json"), append(b, '\n')); err != nil {
		return nil, err
	}
	return ms, nil
}
