// Package report shows a run or stage to its user while it works: a progress bar on a
// terminal or log lines, and the Prometheus /metrics of the engine's counters, labelled the
// same in every mode.
package report

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/memstat"
	"github.com/reignpipe/reignpipe/internal/promtext"
	"github.com/reignpipe/reignpipe/pipelines/engine"
)

// Progress reports a running pipeline: a redrawn bar on a terminal, plain log lines otherwise.
type Progress struct {
	c       *engine.Counters
	stats   func() connectors.SourceStats
	mode    string // bar | log | off
	out     io.Writer
	every   time.Duration
	started time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
	rate    rateWindow // bytes of input done, recently; only the reporting goroutine uses it
}

// etaSpan is how far back the ETA's rate looks: long enough to smooth over a few long
// documents, short enough that the start (model warm-up, a resumed run's skipped inputs, the
// queues filling) stops counting after a minute.
const etaSpan = time.Minute

// etaWarmup is how much of the recent rate is needed before an ETA is shown.
const etaWarmup = 5 * time.Second

// rateWindow keeps (time, amount done) samples over the last span and extrapolates the time
// left from the rate between the oldest and the newest.
type rateWindow struct {
	span    time.Duration
	samples []rateSample
}

type rateSample struct {
	at   time.Duration // since the start
	done float64
}

// add records done at time at; samples older than span are dropped, keeping the newest one
// at or before now-span, so the rate always covers a full span once there is one.
func (w *rateWindow) add(at time.Duration, done float64) {
	w.samples = append(w.samples, rateSample{at, done})
	for len(w.samples) > 2 && w.samples[1].at <= at-w.span {
		w.samples = w.samples[1:]
	}
}

// eta is the time the amount left takes at the recent rate; false while the samples cover
// less than etaWarmup, when nothing moved, or when nothing is left.
func (w *rateWindow) eta(left float64) (time.Duration, bool) {
	if len(w.samples) < 2 {
		return 0, false
	}
	first, last := w.samples[0], w.samples[len(w.samples)-1]
	el := last.at - first.at
	moved := last.done - first.done
	if el < etaWarmup || moved <= 0 || left <= 0 {
		return 0, false
	}
	return time.Duration(left / moved * float64(el)), true
}

// StartProgress begins reporting c, with the input's size and position from stats (nil: not
// known); mode "auto" picks a bar when out is a terminal.
func StartProgress(c *engine.Counters, stats func() connectors.SourceStats, mode string, out *os.File) *Progress {
	if stats == nil {
		stats = func() connectors.SourceStats { return connectors.SourceStats{} }
	}
	if mode == "auto" {
		mode = "log"
		if fi, err := out.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			mode = "bar"
		}
	}
	p := &Progress{c: c, stats: stats, mode: mode, out: out, started: time.Now(), stop: make(chan struct{}), rate: rateWindow{span: etaSpan}}
	p.every = 10 * time.Second
	if mode == "bar" {
		p.every = 500 * time.Millisecond
	}
	if mode == "off" {
		return p
	}
	p.rate.add(0, 0) // nothing done at the start: the first report can show an ETA
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				p.report(true)
				return
			case <-t.C:
				p.report(false)
			}
		}
	}()
	return p
}

// Stop ends reporting after one last report.
func (p *Progress) Stop() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	p.wg.Wait()
}

func (p *Progress) report(final bool) {
	c := p.c
	since := time.Since(p.started)
	el := since.Seconds()
	// Windows done, not cut: a window counts once its embedding is there (cache, GN or a
	// shared pass), so the figures follow the GN's work rather than the tokenizers' lead.
	docs, win, hits, gnw := c.DocsWritten.Load(), c.WindowsDone.Load(), c.CacheHits.Load(), c.GNWindows.Load()
	st := p.stats()
	frac, eta := -1.0, ""
	if st.BytesTotal > 0 && st.BytesRead > 0 {
		// The source reads ahead of the stages (decompression, queues), so bytes read alone
		// overstate progress. The bytes done are the bytes read in the proportion of the inputs
		// read that have left the pipeline.
		inputs := c.InputsRead.Load()
		if inputs > 0 {
			perInput := float64(st.BytesRead) / float64(inputs)
			processed, resumed := float64(c.Processed.Load()), float64(c.Resumed.Load())
			frac = min(1, (processed+resumed)*perInput/float64(st.BytesTotal))
			// The rate counts the inputs this run processed: resumed ones are skipped in a
			// moment, and would make the first minute's ETA far too short.
			p.rate.add(since, processed*perInput)
			if d, ok := p.rate.eta(float64(st.BytesTotal) * (1 - frac)); ok && !final {
				eta = d.Round(time.Second).String()
			}
		}
	}
	hitRate := 0.0
	if cut := c.Windows.Load(); cut > 0 {
		hitRate = float64(hits) / float64(cut)
	}
	if p.mode == "log" {
		attrs := []any{"docs", docs, "deleted", c.DocsDeleted.Load(), "failed", c.DocsFailed.Load(), "windows", win,
			"windows_per_s", fmt.Sprintf("%.1f", float64(win)/max(el, 1e-9)),
			"cache_hit_rate", fmt.Sprintf("%.3f", hitRate), "gn_windows", gnw}
		// Memory, split into the Go runtime's and the rest, so a long run shows what grows.
		m := memstat.Read()
		attrs = append(attrs, "rss_mib", fmt.Sprintf("%.0f", memstat.MiB(m.RSS)), "go_mib", fmt.Sprintf("%.0f", memstat.MiB(m.Go)),
			"go_heap_mib", fmt.Sprintf("%.0f", memstat.MiB(m.GoHeap)))
		if frac >= 0 {
			attrs = append(attrs, "done", fmt.Sprintf("%.1f%%", 100*frac))
		}
		if eta != "" {
			attrs = append(attrs, "eta", eta)
		}
		slog.Info("progress", attrs...)
		return
	}
	bar := ""
	if frac >= 0 {
		const width = 24
		n := int(frac * width)
		bar = "[" + strings.Repeat("=", n) + strings.Repeat(" ", width-n) + fmt.Sprintf("] %5.1f%% ", 100*frac)
	}
	line := fmt.Sprintf("\r%sdocs %d  windows %d  %.1f win/s  cache hits %.1f%%  GN %d", bar, docs, win,
		float64(win)/max(el, 1e-9), 100*hitRate, gnw)
	if del := c.DocsDeleted.Load(); del > 0 {
		line += fmt.Sprintf("  deleted %d", del)
	}
	if eta != "" {
		line += "  ETA " + eta
	}
	fmt.Fprintf(p.out, "%-100s", line)
	if final {
		fmt.Fprintln(p.out)
	}
}

// MetricsHandler serves c (and extra gauges, such as a Kafka source's lag) in the Prometheus
// text format, every sample labelled with l: the same metrics for a run and every stage.
func MetricsHandler(c *engine.Counters, l promtext.Labels, extra func() map[string]float64) http.Handler {
	return promtext.Handler(l, func() ([]promtext.Metric, map[string]float64) {
		ms := []promtext.Metric{
			{Name: "reignpipe_inputs_read_total", Kind: "counter", Help: "Inputs read from the source (documents and bad inputs).", Value: float64(c.InputsRead.Load())},
			{Name: "reignpipe_docs_written_total", Kind: "counter", Help: "Documents whose vector (or chunks) was committed.", Value: float64(c.DocsWritten.Load())},
			{Name: "reignpipe_docs_deleted_total", Kind: "counter", Help: "Deletion records applied in every output and committed.", Value: float64(c.DocsDeleted.Load())},
			{Name: "reignpipe_docs_superseded_by_delete_total", Kind: "counter", Help: "Upserts kept out because a remembered deletion supersedes their version.", Value: float64(c.Superseded.Load())},
			{Name: "reignpipe_docs_failed_total", Kind: "counter", Help: "Inputs sent to the dead-letter output.", Value: float64(c.DocsFailed.Load())},
			{Name: "reignpipe_windows_total", Kind: "counter", Help: "GN windows cut.", Value: float64(c.Windows.Load())},
			{Name: "reignpipe_cache_hits_total", Kind: "counter", Help: "Windows served from the chunk cache.", Value: float64(c.CacheHits.Load())},
			{Name: "reignpipe_gn_windows_total", Kind: "counter", Help: "Windows the GN embedded.", Value: float64(c.GNWindows.Load())},
			{Name: "reignpipe_windows_done_total", Kind: "counter", Help: "Windows with their embedding, from the cache, the GN or a shared pass.", Value: float64(c.WindowsDone.Load())},
			{Name: "reignpipe_cache_hits_at_batch_total", Kind: "counter", Help: "Cache hits found only when their GN batch formed (another process's window arrived meanwhile).", Value: float64(c.CacheLate.Load())},
			{Name: "reignpipe_gn_windows_dropped_total", Kind: "counter", Help: "Windows dropped before their GN pass (their input stopped being this process's).", Value: float64(c.GNDropped.Load())},
			{Name: "reignpipe_docs_revoked_total", Kind: "counter", Help: "Inputs dropped unacked because their partition moved to another worker.", Value: float64(c.Revoked.Load())},
			{Name: "reignpipe_dead_letters_total", Kind: "counter", Help: "Dead letters written.", Value: float64(c.DeadLetters.Load())},
			{Name: "reignpipe_gn_windows_shared_total", Kind: "counter", Help: "Cache misses that took an identical in-flight window's vector instead of the GN.", Value: float64(c.GNShared.Load())},
			{Name: "reignpipe_tokens_total", Kind: "counter", Help: "Content tokens.", Value: float64(c.Tokens.Load())},
			{Name: "reignpipe_commits_total", Kind: "counter", Help: "Durable commits.", Value: float64(c.Commits.Load())},
			{Name: "reignpipe_in_flight", Kind: "gauge", Help: "Inputs between source and writer.", Value: float64(c.InFlight.Load())},
			{Name: "reignpipe_watermark", Kind: "gauge", Help: "Inputs committed from the start of the source.", Value: float64(c.Watermark.Load())},
		}
		var ex map[string]float64
		if extra != nil {
			ex = extra()
		}
		return ms, ex
	})
}
