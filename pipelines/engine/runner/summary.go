package runner

import (
	"encoding/json"
	"math"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/memstat"
)

// Summary is the JSON run summary every run writes and prints. Its input counts add up:
// inputs_read = written + failed + resumed + abandoned (skipped inputs are counted by the
// source before they become inputs, by reason).
type Summary struct {
	Pipeline    string    `json:"pipeline"`
	Started     time.Time `json:"started"`
	WallSeconds float64   `json:"wall_seconds"`
	Stopped     string    `json:"stopped"` // completed | interrupted | failed
	Error       string    `json:"error,omitempty"`

	InputsRead  int64            `json:"inputs_read"`
	DocsWritten int64            `json:"docs_written"`
	DocsFailed  int64            `json:"docs_failed"`
	DocsResumed int64            `json:"docs_resumed"` // committed by an earlier run, skipped
	Abandoned   int64            `json:"docs_abandoned"`
	Skipped     map[string]int64 `json:"docs_skipped"`
	// TextRepairs counts what the sources' text policy changed (connectors/textpolicy):
	// repaired_utf8 (runs of invalid UTF-8 made one U+FFFD), stripped_control, no_title.
	TextRepairs map[string]int64 `json:"text_repairs"`

	Tokens       int64   `json:"tokens"`
	Windows      int64   `json:"windows"`
	CacheHits    int64   `json:"cache_hits"`
	CacheHitRate float64 `json:"cache_hit_rate"`
	CacheCorrupt int64   `json:"cache_corrupt_reembedded"` // damaged cached windows embedded again (and replaced)
	GNWindows    int64   `json:"gn_windows"`
	GNShared     int64   `json:"gn_windows_shared"` // cache misses that took an identical in-flight window's vector instead of the GN
	GNForward    int64   `json:"gn_forward_passes"`
	// GNSeconds is the time spent inside the GN's forward passes; against wall_seconds it says
	// whether the GN was kept busy (the rest of the pipeline is off its critical path when the
	// two are close on a fresh cache).
	GNSeconds     float64  `json:"gn_seconds"`
	GNPadRatio    float64  `json:"gn_padding_ratio"` // padded tokens / real tokens in GN batches
	ChunkRowsNew  int64    `json:"chunk_rows_written"`
	WindowsPerSec float64  `json:"windows_per_second"`
	Watermark     int64    `json:"watermark"`
	Space         string   `json:"vector_space"`
	DeadLetter    string   `json:"dead_letter,omitempty"`
	Outputs       []string `json:"outputs"`
	// Sinks holds, by output name, what the sinks that can tell (connectors.SinkCounter) did
	// with the vectors: a database sink's inserted, updated, unchanged, older_skipped rows.
	Sinks map[string]map[string]int64 `json:"sinks,omitempty"`
	// Store is what a distributed embed worker's replica of the cluster's chunk store did
	// (pipelines/replica: windows and manifests applied and published, window_conflicts).
	Store any `json:"store,omitempty"`
	// PeakRSSMiB is the process's peak resident set (VmHWM; -1 without /proc), GoMiB what the
	// Go runtime held at the end: the difference is C memory (ONNX Runtime, Pebble).
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	GoMiB      float64 `json:"go_memory_mib"`
}

// Summarize fills the counts from a finished run.
func (r *Runner) Summarize(s *Summary, src connectors.SourceStats) {
	c := &r.C
	s.WallSeconds = time.Since(s.Started).Seconds()
	s.InputsRead = c.InputsRead.Load()
	s.DocsWritten = c.DocsWritten.Load()
	s.DocsFailed = c.DocsFailed.Load()
	s.DocsResumed = c.Resumed.Load()
	s.Abandoned = c.Abandoned.Load()
	s.Skipped = src.Skipped
	if s.Skipped == nil {
		s.Skipped = map[string]int64{}
	}
	s.TextRepairs = src.Text
	if s.TextRepairs == nil {
		s.TextRepairs = map[string]int64{}
	}
	s.Tokens = c.Tokens.Load()
	s.Windows = c.Windows.Load()
	s.CacheHits = c.CacheHits.Load()
	s.CacheCorrupt = c.CacheCorrupt.Load()
	if s.Windows > 0 {
		s.CacheHitRate = float64(s.CacheHits) / float64(s.Windows)
	}
	s.GNWindows = c.GNWindows.Load()
	s.GNShared = c.GNShared.Load()
	s.ChunkRowsNew = c.ChunkRowsNew.Load()
	if s.WallSeconds > 0 {
		s.WindowsPerSec = float64(s.Windows) / s.WallSeconds
	}
	s.Watermark = c.Watermark.Load()
	for i, sink := range r.parts.Sinks {
		if sc, ok := sink.(connectors.SinkCounter); ok && i < len(s.Outputs) {
			if s.Sinks == nil {
				s.Sinks = map[string]map[string]int64{}
			}
			s.Sinks[s.Outputs[i]] = sc.Counts()
		}
	}
	m := memstat.Read()
	s.PeakRSSMiB, s.GoMiB = math.Round(memstat.MiB(m.PeakRSS)), math.Round(memstat.MiB(m.Go))
	if r.parts.Aggregator != nil {
		s.Space = r.parts.Aggregator.Space()
	} else {
		s.Space = "chunks:" + r.parts.Fingerprint // embed stage: chunk embeddings only
	}
}

// JSON renders the summary.
func (s *Summary) JSON() []byte {
	b, _ := json.MarshalIndent(s, "", "  ")
	return append(b, '\n')
}
