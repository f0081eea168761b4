package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/schemas"
)

// Broker is the test broker the distributed trials run against (ops/with-kafka exports both).
type Broker struct {
	Addr string // REIGNPIPE_KAFKA_BROKERS
	Ctl  string // REIGNPIPE_KAFKA_CTL: ops/kafka, to kill and restart it
}

// BrokerFromEnv finds the broker ops/with-kafka started.
func BrokerFromEnv() (Broker, error) {
	b := Broker{Addr: os.Getenv("REIGNPIPE_KAFKA_BROKERS"), Ctl: os.Getenv("REIGNPIPE_KAFKA_CTL")}
	if b.Addr == "" || b.Ctl == "" {
		return b, errors.New("no test broker: run under ops/with-kafka (REIGNPIPE_KAFKA_BROKERS and REIGNPIPE_KAFKA_CTL)")
	}
	return b, nil
}

func (b Broker) ctl(verb string) error {
	out, err := exec.Command(b.Ctl, verb).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ops/kafka %s: %v\n%s", verb, err, out)
	}
	return nil
}

// DistFault is one distributed trial: SIGKILLs at the given moments, each to a victim (an embed
// worker, the aggregate worker, or the broker), which is restarted after a pause.
type DistFault struct {
	Name    string
	Kills   []time.Duration
	Victims []string // "embed-a", "embed-b", "aggregate", "broker"
}

// RandomDistFaults draws n trials of 1 to 3 kills spread over a run's length.
func (c *Campaign) RandomDistFaults(n int, seed uint64) []DistFault {
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	victims := []string{"embed-a", "embed-b", "aggregate", "broker"}
	span := c.refWall
	if span < 2*time.Second {
		span = 2 * time.Second
	}
	out := make([]DistFault, n)
	for i := range out {
		k := 1 + rng.IntN(3)
		f := DistFault{Name: fmt.Sprintf("dist-%d (%d kills)", i+1, k)}
		at := time.Duration(0)
		for j := 0; j < k; j++ {
			at += time.Duration(rng.Float64()*float64(span)*0.6) + 500*time.Millisecond
			f.Kills = append(f.Kills, at)
			f.Victims = append(f.Victims, victims[rng.IntN(len(victims))])
		}
		out[i] = f
	}
	return out
}

func (c *Campaign) distConfig(dir, topics string, b Broker) string {
	return fmt.Sprintf(`version: 1
name: faults
source: {type: jsonl, path: %q, name: f}
gn: {name: %s}
chunking: {k: %d, s: %d}
batching: {max_wait: 5ms}
cache: {dir: %q}
sinks:
  - {type: kafka}
dead_letter: {path: %q}
run: {state_dir: %q, progress: off, commit_every: 4, commit_interval: 200ms, drain_timeout: 2s}
transport:
  type: kafka
  kafka: {brokers: [%q], topics: %q, partitions: 3}
`, c.Input, c.Model, c.K, c.K, filepath.Join(dir, "cache"), filepath.Join(dir, "deadletter.jsonl"),
		filepath.Join(dir, "state"), b.Addr, topics)
}

// worker is one stage process of a trial, restartable.
type worker struct {
	name string
	args []string
	cmd  *exec.Cmd
	done chan error
	log  *bytes.Buffer // stdout and stderr of every incarnation
	out  *bytes.Buffer // stdout of the latest incarnation: its summary
}

func (c *Campaign) startWorker(w *worker) error {
	w.cmd = exec.Command(c.Bin, append([]string{"stage"}, w.args...)...)
	if w.log == nil {
		w.log = &bytes.Buffer{}
	}
	w.out = &bytes.Buffer{}
	w.cmd.Stdout, w.cmd.Stderr = io.MultiWriter(w.out, w.log), w.log
	if err := w.cmd.Start(); err != nil {
		return err
	}
	w.done = make(chan error, 1)
	go func(cmd *exec.Cmd, done chan error) { done <- cmd.Wait() }(w.cmd, w.done)
	return nil
}

func (w *worker) kill() {
	_ = w.cmd.Process.Kill()
	<-w.done
}

func (w *worker) stop(timeout time.Duration) error {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-w.done:
		return err
	case <-time.After(timeout):
		w.kill()
		return fmt.Errorf("%s still running %v after SIGTERM", w.name, timeout)
	}
}

// DistTrial runs ingest, two embed workers and an aggregate worker as processes joined by the
// broker, kills as f says, and reads the vector topic until every document of the clean run is
// there, then compares. Once the stages have stopped it checks their summaries, that no temp
// file is left, and that the workers' caches reopen, verify clean and hold every window of the
// clean run (RerunGN counts those they miss).
func (c *Campaign) DistTrial(i int, f DistFault, b Broker) Result {
	r := Result{Fault: f.Name, FinalState: "completed"}
	dir := filepath.Join(c.Work, fmt.Sprintf("dist-%03d", i))
	// A kept -work folder holds an earlier campaign's trial: its ingest checkpoint would skip
	// the whole corpus.
	if err := os.RemoveAll(dir); err != nil {
		r.Err = err.Error()
		return r
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.Err = err.Error()
		return r
	}
	topics := fmt.Sprintf("faults-%d-%d", time.Now().UnixNano(), i)
	yaml := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(yaml, []byte(c.distConfig(dir, topics, b)), 0o644); err != nil {
		r.Err = err.Error()
		return r
	}
	ws := map[string]*worker{
		"ingest":    {name: "ingest", args: []string{"ingest", "--idle-exit", "3s", yaml}},
		"embed-a":   {name: "embed-a", args: []string{"embed", "--cache-dir", filepath.Join(dir, "cache-a"), yaml}},
		"embed-b":   {name: "embed-b", args: []string{"embed", "--cache-dir", filepath.Join(dir, "cache-b"), yaml}},
		"aggregate": {name: "aggregate", args: []string{"aggregate", yaml}},
	}
	// Ingest first: it creates the topics the others join.
	if err := c.startWorker(ws["ingest"]); err != nil {
		r.Err = err.Error()
		return r
	}
	time.Sleep(2 * time.Second)
	for _, n := range []string{"embed-a", "embed-b", "aggregate"} {
		if err := c.startWorker(ws[n]); err != nil {
			r.Err = err.Error()
			return r
		}
	}
	defer func() {
		for _, w := range ws {
			if w.cmd != nil && w.cmd.ProcessState == nil {
				w.kill()
			}
		}
	}()
	start := time.Now()
	for j, at := range f.Kills {
		time.Sleep(time.Until(start.Add(at)))
		v := f.Victims[j]
		if v == "broker" {
			if err := b.ctl("kill"); err != nil {
				r.Err = err.Error()
				return r
			}
			time.Sleep(time.Second)
			if err := b.ctl("start"); err != nil {
				r.Err = err.Error()
				return r
			}
			r.Kills++
			continue
		}
		w := ws[v]
		select {
		case err := <-w.done:
			r.Err = fmt.Sprintf("%s had exited before its kill (%v):\n%s", v, err, tail(w.log.String()))
			return r
		default:
		}
		w.kill()
		r.Kills++
		time.Sleep(500 * time.Millisecond)
		if err := c.startWorker(w); err != nil {
			r.Err = err.Error()
			return r
		}
	}
	got, err := readVectorTopic(b, topics+".vectors", c.ref, c.Timeout)
	if err != nil {
		// A stalled trial: the stages' goroutine dumps (SIGQUIT) and whole logs go beside the
		// trial's files, for whoever keeps -work.
		r.Err = err.Error()
		for _, n := range []string{"ingest", "embed-a", "embed-b", "aggregate"} {
			w := ws[n]
			if w.cmd.ProcessState == nil {
				_ = w.cmd.Process.Signal(syscall.SIGQUIT)
				select {
				case <-w.done:
				case <-time.After(5 * time.Second):
					w.kill()
				}
			}
			log := filepath.Join(dir, n+".log")
			_ = os.WriteFile(log, w.log.Bytes(), 0o644)
			r.Err += fmt.Sprintf("\n--- %s (whole log: %s) ---\n%s", n, log, tail(w.log.String()))
		}
		return r
	}
	for _, n := range []string{"embed-a", "embed-b", "aggregate"} {
		if err := ws[n].stop(time.Minute); err != nil {
			r.Err = fmt.Sprintf("%s: exit after SIGTERM: %v\n%s", n, err, tail(ws[n].log.String()))
		}
	}
	if err := <-ws["ingest"].done; err != nil {
		r.Err = fmt.Sprintf("ingest: %v\n%s", err, tail(ws["ingest"].log.String()))
	}
	// The same windows and GN as the embedded clean run: vectors agree to the float rounding
	// of a different batch composition, which the stage tests hold to 1e-6.
	c.compare(&r, got, 1e-6)
	if r.Err != "" {
		return r
	}
	outs := map[string]string{}
	for n, w := range ws {
		outs[n] = w.out.String()
	}
	if err := c.checkStageSummaries(outs); err != nil {
		r.Err = "summaries: " + err.Error()
	} else {
		r.AddsUp = true
	}
	var temps []string
	r.Temps, temps = crashTemps(dir)
	if r.Temps > 0 && r.Err == "" {
		r.Err = "temps left: " + strings.Join(temps, ", ")
	}
	n, err := uncachedWindows(filepath.Join(c.Work, "reference", "cache"), []string{filepath.Join(dir, "cache-a"), filepath.Join(dir, "cache-b")})
	if err != nil && r.Err == "" {
		r.Err = "caches: " + err.Error()
	}
	r.RerunGN = n
	return r
}

// readVectorTopic consumes topic with a fresh group until every document of want is there and
// then until the topic stays quiet for a few seconds, keeping the last vector of each key and
// dropping the keys whose last record is a tombstone (a deletion), as compaction would.
func readVectorTopic(b Broker, topic string, want map[string]schemas.DocVector, timeout time.Duration) (map[string]schemas.DocVector, error) {
	cons, err := kafkaclient.NewConsumer(kafkaclient.ClientConfig{Brokers: []string{b.Addr}},
		kafkaclient.ConsumerOptions{Group: fmt.Sprintf("faults-reader-%d", time.Now().UnixNano()), Topics: []string{topic}})
	if err != nil {
		return nil, err
	}
	defer cons.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got := map[string]schemas.DocVector{}
	seen := map[string]bool{}
	missing := len(want)
	for {
		next, quiet := ctx, context.CancelFunc(func() {})
		if missing == 0 {
			// Every wanted document arrived: what follows (a tombstone of a document written
			// earlier on another partition) is read until the topic is quiet.
			next, quiet = context.WithTimeout(ctx, 3*time.Second)
		}
		d, err := cons.Next(next)
		quietEnded := next.Err() != nil && ctx.Err() == nil
		quiet()
		if err != nil && missing == 0 && quietEnded {
			return got, nil
		}
		if err != nil {
			return got, fmt.Errorf("reading %s: %w; %d of %d documents arrived", topic, err, len(want)-missing, len(want))
		}
		if len(d.Value) == 0 {
			delete(got, d.Key)
			continue
		}
		v, err := schemas.DecodeDocVector(d.Value)
		if err != nil {
			return got, fmt.Errorf("record %s: %w", d.Key, err)
		}
		if _, ok := want[v.DocID]; ok && !seen[v.DocID] {
			seen[v.DocID] = true
			missing--
		}
		got[v.DocID] = v
	}
}
