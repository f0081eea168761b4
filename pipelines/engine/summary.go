package engine

import (
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/memstat"
)

// Summary is the JSON summary every run and every distributed stage prints (and writes to
// run.summary). Its input counts add up: inputs_read = docs_written + docs_failed +
// docs_resumed + docs_abandoned + docs_revoked (skipped inputs are counted by the source, by
// reason, before they become inputs).
type Summary struct {
	Pipeline string `json:"pipeline"`
	// Stage is the distributed stage (ingest, embed, aggregate, process); empty for a run.
	Stage       string    `json:"stage,omitempty"`
	Started     time.Time `json:"started"`
	WallSeconds float64   `json:"wall_seconds"`
	// BusySeconds is the wall time less the time spent waiting for input with nothing to do:
	// the rates below are over it, so a continuous stage that waited for its input reports the
	// pace of its work.
	BusySeconds float64 `json:"busy_seconds"`
	// Stopped is how it ended: completed, interrupted (a run stopped by a signal before its
	// input ended: exit 130 or 143), stopped (a stage stopped by a signal, its normal end:
	// exit 0) or failed.
	Stopped string `json:"stopped"`
	Error   string `json:"error,omitempty"`

	InputsRead  int64 `json:"inputs_read"`
	DocsWritten int64 `json:"docs_written"`
	DocsDeleted int64 `json:"docs_deleted"` // deletion records applied in every output
	DocsFailed  int64 `json:"docs_failed"`
	// Superseded: upserts kept out because the document was deleted at their version or a
	// later one, and the deletion is remembered (run.delete_retention): not embedded, not
	// written.
	Superseded  int64            `json:"docs_superseded_by_delete"`
	DocsResumed int64            `json:"docs_resumed"` // committed by an earlier run, skipped
	Abandoned   int64            `json:"docs_abandoned"`
	Revoked     int64            `json:"docs_revoked,omitempty"`  // their partition moved to another worker, which reads them
	Duplicates  int64            `json:"duplicate_ids,omitempty"` // doc ids this run delivered twice (see the ledger's rule)
	Skipped     map[string]int64 `json:"docs_skipped"`
	// TextRepairs counts what the sources' text policy changed (connectors/textpolicy):
	// repaired_utf8 (runs of invalid UTF-8 made one U+FFFD), stripped_control, no_title.
	TextRepairs map[string]int64 `json:"text_repairs"`

	Tokens       int64   `json:"tokens"`
	Windows      int64   `json:"windows"`
	CacheHits    int64   `json:"cache_hits"`
	CacheHitRate float64 `json:"cache_hit_rate"`
	CacheLate    int64   `json:"cache_hits_at_batch,omitempty"` // of cache_hits: found when their GN batch formed
	CacheCorrupt int64   `json:"cache_corrupt_reembedded"`      // damaged cached windows embedded again (and replaced)
	GNWindows    int64   `json:"gn_windows"`
	GNShared     int64   `json:"gn_windows_shared"` // cache misses that took an identical in-flight window's vector instead of the GN
	GNDropped    int64   `json:"gn_windows_dropped,omitempty"`
	GNForward    int64   `json:"gn_forward_passes"`
	// GNSeconds is the time spent inside the GN's forward passes; against wall_seconds it says
	// whether the GN was kept busy (the rest of the pipeline is off its critical path when the
	// two are close on a fresh cache).
	GNSeconds     float64  `json:"gn_seconds"`
	GNPadRatio    float64  `json:"gn_padding_ratio"` // padded tokens / real tokens in GN batches
	ChunkRowsNew  int64    `json:"chunk_rows_written"`
	ChunkRecords  int64    `json:"chunk_records,omitempty"` // chunk records published (embed stage)
	DocsPerSec    float64  `json:"docs_per_second"`
	WindowsPerSec float64  `json:"windows_per_second"`
	Commits       int64    `json:"commits"`
	Watermark     int64    `json:"watermark"`
	Space         string   `json:"vector_space"`
	DeadLetter    string   `json:"dead_letter,omitempty"`
	Outputs       []string `json:"outputs"`
	// Sinks holds, by output name, what the sinks that can tell (connectors.SinkCounter) did
	// with the vectors: a file or Kafka sink's written vectors and deleted tombstones, a
	// database sink's inserted, updated, unchanged, older_skipped rows and the deletions it
	// applied (deleted).
	Sinks map[string]map[string]int64 `json:"sinks,omitempty"`
	// Store is what a distributed worker's replica of the cluster's chunk store did
	// (pipelines/engine/replica: windows and manifests applied and published).
	Store any `json:"store,omitempty"`
	// PeakRSSMiB is the process's peak resident set (VmHWM; -1 without /proc), GoMiB what the
	// Go runtime held at the end: the difference is C memory (ONNX Runtime, Pebble).
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	GoMiB      float64 `json:"go_memory_mib"`
}

// Accounted is what became of the inputs read, which is InputsRead once a run or stage has
// ended (invariant 8): written, deleted, failed, resumed, abandoned, revoked or superseded by
// a deletion.
func (s *Summary) Accounted() int64 {
	return s.DocsWritten + s.DocsDeleted + s.DocsFailed + s.DocsResumed + s.Abandoned + s.Revoked + s.Superseded
}

// How a run or stage stopped (Summary.Stopped).
const (
	Completed   = "completed"
	Interrupted = "interrupted"
	Stopped     = "stopped"
	Failed      = "failed"
)

// StopOf says how a run (continuous false) or a stage (continuous true) ended: failed with
// runErr, interrupted or stopped when ctx was cancelled, completed otherwise. A stage runs
// until it is stopped, so a signal is its normal end; a run stopped before its input ended is
// interrupted, and its exit code says so.
func StopOf(ctx context.Context, runErr error, continuous bool) string {
	switch {
	case runErr != nil:
		return Failed
	case ctx.Err() != nil && continuous:
		return Stopped
	case ctx.Err() != nil:
		return Interrupted
	}
	return Completed
}

// Summarize fills s's counts from c, the source's stats src, and the sinks that can say
// what became of their vectors (named by s.Outputs, in the same order as sinks).
func Summarize(s *Summary, c *Counters, src connectors.SourceStats, sinks []connectors.Sink) {
	s.WallSeconds = time.Since(s.Started).Seconds()
	s.BusySeconds = max(0, s.WallSeconds-c.Idle().Seconds())
	s.InputsRead = c.InputsRead.Load()
	s.DocsWritten = c.DocsWritten.Load()
	s.DocsDeleted = c.DocsDeleted.Load()
	s.DocsFailed = c.DocsFailed.Load()
	s.Superseded = c.Superseded.Load()
	s.DocsResumed = c.Resumed.Load()
	s.Abandoned = c.Abandoned.Load()
	s.Revoked = c.Revoked.Load()
	s.Duplicates = c.Duplicates.Load()
	// Present as {} when empty: a reader of the JSON finds the key whatever the run did.
	s.Skipped, s.TextRepairs = orEmpty(src.Skipped), orEmpty(src.Text)
	s.Tokens = c.Tokens.Load()
	s.Windows = c.Windows.Load()
	s.CacheHits = c.CacheHits.Load()
	s.CacheLate = c.CacheLate.Load()
	s.CacheCorrupt = c.CacheCorrupt.Load()
	if s.Windows > 0 {
		s.CacheHitRate = float64(s.CacheHits) / float64(s.Windows)
	}
	s.GNWindows = c.GNWindows.Load()
	s.GNShared = c.GNShared.Load()
	s.GNDropped = c.GNDropped.Load()
	s.ChunkRowsNew = c.ChunkRowsNew.Load()
	s.ChunkRecords = c.ChunkRecords.Load()
	if s.BusySeconds > 0 {
		s.DocsPerSec = float64(s.DocsWritten) / s.BusySeconds
		s.WindowsPerSec = float64(s.Windows) / s.BusySeconds
	}
	s.Commits = c.Commits.Load()
	s.Watermark = c.Watermark.Load()
	for i, sink := range sinks {
		if sc, ok := sink.(connectors.SinkCounter); ok && i < len(s.Outputs) {
			if s.Sinks == nil {
				s.Sinks = map[string]map[string]int64{}
			}
			s.Sinks[s.Outputs[i]] = sc.Counts()
		}
	}
	m := memstat.Read()
	s.PeakRSSMiB, s.GoMiB = math.Round(memstat.MiB(m.PeakRSS)), math.Round(memstat.MiB(m.Go))
}

// JSON renders the summary as one indented JSON document with a trailing newline.
func (s *Summary) JSON() []byte {
	b, _ := json.MarshalIndent(s, "", "  ")
	return append(b, '\n')
}

func orEmpty(m map[string]int64) map[string]int64 {
	if m == nil {
		return map[string]int64{}
	}
	return m
}
