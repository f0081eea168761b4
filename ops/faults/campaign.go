package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/schemas"
)

// Campaign runs one pipeline definition again and again under faults and checks, after each
// trial, the promises a user relies on: nothing lost, nothing wrong, nothing silent.
type Campaign struct {
	Bin     string // the reignpipe binary under test
	Work    string // scratch folder; every trial gets its own sub-folder
	Input   string // the corpus every run reads
	Model   string // GN name (fetched by ops/fetch)
	K       int    // window length (and stride)
	Timeout time.Duration
	Logf    func(format string, args ...any)

	ref map[string]schemas.DocVector // the clean run's vectors
	// refFailed is how many inputs the clean run dead-lettered: a faulty run must fail the
	// same ones, no more.
	refFailed int64
	// refWritten and refDeleted are the clean run's upserts written and deletions applied,
	// which the distributed trial's ingest stage must match.
	refWritten, refDeleted int64
	refWall                time.Duration
}

// Fault is one way a trial interrupts the pipeline before the final, undisturbed run.
type Fault struct {
	Name string
	// Kills are delays after start at which the run gets Signal, one restart each.
	Kills  []time.Duration
	Signal syscall.Signal
	// OnTemp, when set, kills the run the moment a temp file matching this glob (relative to
	// the trial folder) exists: a write caught half-way.
	OnTemp string
	// DiskFull, when set, puts that output folder (cache, vectors, vectors-jsonl, state) on a
	// small filesystem of its own and fills it once the run has committed, so the writer of
	// that folder meets ENOSPC; space returns before the final run.
	DiskFull string
	// Corrupt, when set, damages the store after a clean run (see corrupt.go); the final run is
	// then a --from-scratch one, followed by `reignpipe verify --repair` and a healing run.
	Corrupt string
}

// Result is what one trial showed.
type Result struct {
	Fault      string
	Kills      int     // signals that landed on a running process
	Lost       int     // documents of the clean run missing at the end
	Wrong      int     // documents whose vector differs from the clean run's
	MaxDelta   float64 // largest |Δ| over all vector components
	Extra      int     // documents the clean run does not have
	AddsUp     bool    // every summary (final run, soft-stopped runs) accounts for every input read
	Temps      int     // temp files left after the final run (crash leftovers must be cleaned)
	RerunGN    int64   // windows a from-scratch rerun sent to the GN (distributed: windows of the clean run no worker cache holds)
	FinalState string  // the final run's "stopped"
	Err        string
}

// OK: the trial kept every promise.
func (r Result) OK() bool {
	return r.Err == "" && r.Lost == 0 && r.Wrong == 0 && r.Extra == 0 && r.AddsUp && r.Temps == 0 && r.RerunGN == 0 && r.FinalState == "completed"
}

// summary is the run's JSON summary; addsUp is invariant 8 on it: every input read is
// accounted for, deletions and inputs a deletion superseded among them.
type summary = engine.Summary

func addsUp(s summary) bool { return s.InputsRead == s.Accounted() }

func (c *Campaign) config(dir string) string {
	return fmt.Sprintf(`version: 1
name: faults
source: {type: jsonl, path: %q, name: f}
gn: {name: %s}
chunking: {k: %d, s: %d}
batching: {max_wait: 5ms}
cache: {dir: %q, rows_per_shard: 32}
sinks:
  - {type: parquet, dir: %q}
  - {type: jsonl, dir: %q}
dead_letter: {path: %q}
run: {state_dir: %q, summary: %q, progress: off, commit_every: 4, commit_interval: 100ms, drain_timeout: 2s}
`, c.Input, c.Model, c.K, c.K, filepath.Join(dir, "cache"), filepath.Join(dir, "vectors"), filepath.Join(dir, "vectors-jsonl"),
		filepath.Join(dir, "deadletter.jsonl"), filepath.Join(dir, "state"), filepath.Join(dir, "summary.json"))
}

// start launches one run of the trial's pipeline.
func (c *Campaign) start(dir string, extra ...string) (*exec.Cmd, *bytes.Buffer, error) {
	yaml := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(yaml, []byte(c.config(dir)), 0o644); err != nil {
		return nil, nil, err
	}
	args := append([]string{"run"}, extra...)
	cmd := exec.Command(c.Bin, append(args, yaml)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out, cmd.Start()
}

// runToEnd runs the pipeline undisturbed and returns its summary.
func (c *Campaign) runToEnd(dir string, extra ...string) (summary, error) {
	cmd, out, err := c.start(dir, extra...)
	if err != nil {
		return summary{}, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(c.Timeout):
		_ = cmd.Process.Kill()
		<-done
		return summary{}, fmt.Errorf("run did not finish in %v:\n%s", c.Timeout, tail(out.String()))
	}
	s, serr := readSummary(dir)
	if err != nil {
		return s, fmt.Errorf("run failed (%v):\n%s", err, tail(out.String()))
	}
	return s, serr
}

func readSummary(dir string) (summary, error) {
	var s summary
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

// Reference makes the clean run every trial is compared with.
func (c *Campaign) Reference() error {
	dir := filepath.Join(c.Work, "reference")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	start := time.Now()
	s, err := c.runToEnd(dir)
	if err != nil {
		return fmt.Errorf("clean run: %w", err)
	}
	c.refWall = time.Since(start)
	if s.Stopped != "completed" || !addsUp(s) || s.DocsWritten == 0 {
		return fmt.Errorf("clean run: %+v", s)
	}
	c.refFailed, c.refWritten, c.refDeleted = s.DocsFailed, s.DocsWritten, s.DocsDeleted
	c.ref, err = vectorfile.Latest(filepath.Join(dir, "vectors"))
	if err != nil {
		return err
	}
	if _, back := c.ref["f:d0002"]; s.DocsDeleted > 0 && (!back || c.ref["f:d0001"].DocID != "") {
		return fmt.Errorf("clean run: the corpus's deletions were not applied (d0001 live: %v, d0002 back: %v)", c.ref["f:d0001"].DocID != "", back)
	}
	c.Logf("clean run: %d documents, %d deleted, %d failed, %d windows in %.1f s", len(c.ref), s.DocsDeleted, s.DocsFailed, s.Windows, c.refWall.Seconds())
	return nil
}

// RandomFaults draws n trials of 1 to 3 SIGKILLs at random moments of a run's length.
func (c *Campaign) RandomFaults(n int, seed uint64) []Fault {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]Fault, n)
	span := c.refWall
	if span < time.Second {
		span = time.Second
	}
	for i := range out {
		k := 1 + rng.IntN(3)
		f := Fault{Name: fmt.Sprintf("random-%d (%d kills)", i+1, k), Signal: syscall.SIGKILL}
		for j := 0; j < k; j++ {
			// Early kills land in start-up and parsing; late ones in commits. A run restarted
			// after a kill is shorter (cached windows), so later kills spread over less.
			f.Kills = append(f.Kills, time.Duration(rng.Float64()*float64(span)*0.9)+100*time.Millisecond)
		}
		out[i] = f
	}
	return out
}

// TargetedFaults kill the run while it holds an open temp file of each kind, and once by
// SIGTERM (a soft stop) mid-run.
func (c *Campaign) TargetedFaults() []Fault {
	return []Fault{
		{Name: "kill in shard write", Signal: syscall.SIGKILL, OnTemp: "cache/shards/*.tmp"},
		{Name: "kill in vector part write", Signal: syscall.SIGKILL, OnTemp: "vectors/.part-*.tmp"},
		{Name: "kill in JSONL part write", Signal: syscall.SIGKILL, OnTemp: "vectors-jsonl/.part-*.tmp"},
		{Name: "kill in checkpoint write", Signal: syscall.SIGKILL, OnTemp: "state/.tmp-*"},
		{Name: "SIGTERM mid-run", Signal: syscall.SIGTERM, Kills: []time.Duration{c.refWall / 2}},
	}
}

// Trial runs one fault, then the pipeline to its end, and checks the outcome.
func (c *Campaign) Trial(i int, f Fault) Result {
	r := Result{Fault: f.Name}
	dir := filepath.Join(c.Work, fmt.Sprintf("trial-%03d", i))
	if err := os.RemoveAll(dir); err != nil {
		r.Err = err.Error()
		return r
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.Err = err.Error()
		return r
	}
	if f.DiskFull != "" {
		defer unmountAll(dir)
		landed, err := c.fillDisk(dir, f.DiskFull)
		if err != nil {
			r.Err = err.Error()
			return r
		}
		if landed {
			r.Kills++
		}
	}
	var final []string
	if f.Corrupt != "" {
		if _, err := c.runToEnd(dir); err != nil {
			r.Err = "clean run before the damage: " + err.Error()
			return r
		}
		if err := corrupt(dir, f.Corrupt); err != nil {
			r.Err = err.Error()
			return r
		}
		r.Kills++
		if err := c.verifyFinds(dir); err != nil {
			r.Err = err.Error()
			return r
		}
		final = []string{"--from-scratch"}
	}
	kills := f.Kills
	if f.OnTemp != "" {
		kills = []time.Duration{-1}
	}
	softOK := true
	for _, at := range kills {
		landed, err := c.interrupt(dir, at, f)
		if err != nil {
			r.Err = err.Error()
			return r
		}
		if landed {
			r.Kills++
		}
		if landed && f.Signal == syscall.SIGTERM {
			// A soft stop writes its summary, which must add up too.
			if s, err := readSummary(dir); err != nil || s.Stopped != "interrupted" || !addsUp(s) {
				softOK = false
				r.Err = fmt.Sprintf("soft-stopped run's summary: %+v (%v)", s, err)
			}
		}
	}
	s, err := c.runToEnd(dir, final...)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.FinalState, r.AddsUp = s.Stopped, addsUp(s) && softOK
	for _, pattern := range []string{"state/.tmp-*", "vectors/*.tmp", "vectors-jsonl/*.tmp", "cache/shards/*.tmp"} {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		r.Temps += len(m)
	}
	if s.DocsFailed > c.refFailed {
		r.Err = fmt.Sprintf("final run dead-lettered %d inputs, the clean run %d", s.DocsFailed, c.refFailed)
	}
	got, err := vectorfile.Latest(filepath.Join(dir, "vectors"))
	if err != nil {
		r.Err = "reading vectors: " + err.Error()
		return r
	}
	c.compare(&r, got, 0)
	if jl, err := vectorfile.Latest(filepath.Join(dir, "vectors-jsonl")); err != nil || len(jl) != len(got) {
		r.Err = fmt.Sprintf("JSONL sink holds %d documents, Parquet %d (%v)", len(jl), len(got), err)
	}
	if f.Corrupt != "" {
		// The damaged files are still on disk (only the rows read were replaced): verify must
		// find and repair them, and one run re-embeds what the repair quarantined.
		if err := c.verifyRepair(dir); err != nil {
			r.Err = err.Error()
			return r
		}
		if _, err := c.runToEnd(dir, "--from-scratch"); err != nil {
			r.Err = "run after verify --repair: " + err.Error()
			return r
		}
	}
	// The cache must now hold every window: a from-scratch rerun embeds nothing.
	again, err := c.runToEnd(dir, "--from-scratch")
	if err != nil {
		r.Err = "rerun: " + err.Error()
		return r
	}
	r.RerunGN = again.GNWindows
	return r
}

// interrupt starts a run and stops it at `at` (or when f.OnTemp's file appears, at < 0). It
// reports whether the signal reached a running process.
func (c *Campaign) interrupt(dir string, at time.Duration, f Fault) (bool, error) {
	cmd, out, err := c.start(dir)
	if err != nil {
		return false, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var fire <-chan time.Time
	var poll *time.Ticker
	if at >= 0 {
		fire = time.After(at)
	} else {
		poll = time.NewTicker(time.Millisecond)
		defer poll.Stop()
	}
	deadline := time.After(c.Timeout)
	var tick <-chan time.Time
	if poll != nil {
		tick = poll.C
	}
	for {
		select {
		case err := <-done:
			if err != nil {
				return false, fmt.Errorf("run failed before the fault (%v):\n%s", err, tail(out.String()))
			}
			c.Logf("  run ended before the fault at %v", at)
			return false, nil // finished before the fault: the final run has nothing left
		case <-fire:
			return c.signal(cmd, done, f.Signal, out)
		case <-tick:
			if m, _ := filepath.Glob(filepath.Join(dir, f.OnTemp)); len(m) > 0 {
				return c.signal(cmd, done, f.Signal, out)
			}
		case <-deadline:
			_ = cmd.Process.Kill()
			<-done
			return false, fmt.Errorf("interrupted run did not end in %v:\n%s", c.Timeout, tail(out.String()))
		}
	}
}

func (c *Campaign) signal(cmd *exec.Cmd, done chan error, sig syscall.Signal, out *bytes.Buffer) (bool, error) {
	if err := cmd.Process.Signal(sig); err != nil {
		c.Logf("  signal: %v", err)
		<-done
		return false, nil // it had just exited
	}
	select {
	case <-done:
	case <-time.After(c.Timeout):
		_ = cmd.Process.Kill()
		<-done
		return true, fmt.Errorf("run ignored %v:\n%s", sig, tail(out.String()))
	}
	return true, nil
}

// compare counts documents of the clean run that are missing from got, that differ from it
// by more than tol in any component (0: bit-identical) or in version or content hash, and
// documents the clean run does not have.
func (c *Campaign) compare(r *Result, got map[string]schemas.DocVector, tol float64) {
	for id, want := range c.ref {
		g, ok := got[id]
		if !ok {
			r.Lost++
			continue
		}
		d := maxDelta(want.Vector, g.Vector)
		r.MaxDelta = max(r.MaxDelta, d)
		if d > tol || g.Version != want.Version || g.ContentHash != want.ContentHash {
			r.Wrong++
		}
	}
	for id := range got {
		if _, ok := c.ref[id]; !ok {
			r.Extra++
		}
	}
}

func maxDelta(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// Table renders results as markdown, one row per trial and a total.
func Table(rs []Result) string {
	var b strings.Builder
	b.WriteString("| trial | kills | lost | wrong | max abs delta | extra | summary adds up | temps left | rerun GN windows | final | ok |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	passed := 0
	for _, r := range rs {
		if r.OK() {
			passed++
		}
		status := "yes"
		if !r.OK() {
			status = "**no**"
			if r.Err != "" {
				status += ": " + strings.ReplaceAll(firstLine(r.Err), "|", "/")
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %g | %d | %v | %d | %d | %s | %s |\n",
			r.Fault, r.Kills, r.Lost, r.Wrong, r.MaxDelta, r.Extra, r.AddsUp, r.Temps, r.RerunGN, r.FinalState, status)
	}
	fmt.Fprintf(&b, "\n%d/%d trials kept every promise.\n", passed, len(rs))
	return b.String()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Corpus writes the fixture every run reads: documents of 1 to ~12 windows at K=128, a few
// repeated texts (shared windows across documents), two bad lines, and deletion lines halfway
// (n >= 4): d0001 deleted for good, d0002 deleted and back with new text, an unknown id.
func Corpus(path string, n int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	words := strings.Fields("the pipeline reads every document once and embeds each window of tokens " +
		"with a frozen guidance network before the aggregator turns a sequence of chunk vectors into one " +
		"vector per document patent claims describe an apparatus comprising a sensor coupled to a controller " +
		"wikipedia articles cite sources history geography science mathematics")
	if n <= 0 {
		return errors.New("faults: empty corpus")
	}
	var b strings.Builder
	for i := 0; i < n; i++ {
		nw := 20 + rng.IntN(1200)
		var t strings.Builder
		for j := 0; j < nw; j++ {
			t.WriteString(words[rng.IntN(len(words))])
			t.WriteByte(' ')
		}
		text := t.String()
		if i%9 == 5 { // a continuation repeating an earlier document's text
			text = fmt.Sprintf("repeat %d ", i%3) + strings.Repeat("shared paragraph of a patent family ", 80)
		}
		line, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("d%04d", i), "title": fmt.Sprintf("Doc %d", i), "text": text})
		b.Write(line)
		b.WriteByte('\n')
		if i == n/3 || i == 2*n/3 {
			b.WriteString("{\"id\": \"broken\", \"text\": \n")
		}
		// Deletions: of an earlier document for good, of one that then comes back with new
		// text, and of an id the corpus never had. A trial must not bring the first back nor
		// lose the second.
		if i == n/2 {
			for _, id := range []string{"d0001", "d0002", "never-seen"} {
				fmt.Fprintf(&b, "{\"id\": %q, \"deleted\": true}\n", id)
			}
		}
		if i == n/2+1 {
			line, _ := json.Marshal(map[string]string{"id": "d0002", "title": "Doc 2, back", "text": "the second document came back with other words after its deletion"})
			b.Write(append(line, '\n'))
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
