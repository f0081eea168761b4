package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	kafka "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/internal/kafkaclient"
)

// proc is one stage process of a trial: its summary (stdout) and log (stderr) go to files in
// the trial's directory.
type proc struct {
	label   string
	cmd     *exec.Cmd
	out     string
	started time.Time
	done    chan struct{}
	err     error
}

// start runs `bin args...`; the process is killed when ctx ends (the trial timed out or the
// harness was interrupted).
func start(ctx context.Context, dir, label, bin string, args ...string) (*proc, error) {
	p := &proc{label: label, out: filepath.Join(dir, label+".json"), done: make(chan struct{})}
	stdout, err := os.Create(p.out)
	if err != nil {
		return nil, err
	}
	stderr, err := os.Create(filepath.Join(dir, label+".log"))
	if err != nil {
		stdout.Close()
		return nil, err
	}
	p.cmd = exec.CommandContext(ctx, bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		stdout.Close()
		stderr.Close()
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	// The process's owner is the trial; this goroutine only reaps it and closes its files.
	go func() {
		defer close(p.done)
		p.err = p.cmd.Wait()
		stdout.Close()
		stderr.Close()
	}()
	return p, nil
}

// wait waits for the process to end and returns its JSON summary, decoded into a generic map
// (the raw figures) and into dst.
func (p *proc) wait(ctx context.Context, dst any) (map[string]any, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		<-p.done // CommandContext kills it
		return nil, fmt.Errorf("%s: %w", p.label, ctx.Err())
	}
	if p.err != nil {
		return nil, fmt.Errorf("%s: %w (log: %s)", p.label, p.err, strings.TrimSuffix(p.out, ".json")+".log")
	}
	data, err := os.ReadFile(p.out)
	if err != nil {
		return nil, err
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: summary %q: %w", p.label, data, err)
	}
	if dst != nil {
		if err := json.Unmarshal(data, dst); err != nil {
			return nil, err
		}
	}
	return raw, nil
}

// stop ends the process with SIGTERM: a stage drains, commits and prints its summary.
func (p *proc) stop() { _ = p.cmd.Process.Signal(syscall.SIGTERM) }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// record is one record of a topic as kcat prints it with -f '%p\t%T\t%k\n'.
type record struct {
	partition int
	timestamp time.Time
	key       string
}

// readTopic reads a topic from the beginning to its current end with kcat, keys as text (every
// topic read here is keyed by a doc id).
func readTopic(ctx context.Context, kcat, brokers, topic string) ([]record, error) {
	cmd := exec.CommandContext(ctx, kcat, "-C", "-b", brokers, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%p\t%T\t%k\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kcat %s: %w: %s", topic, err, strings.TrimSpace(stderr.String()))
	}
	var recs []record
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("kcat %s: line %q", topic, line)
		}
		p, err1 := strconv.Atoi(f[0])
		ms, err2 := strconv.ParseInt(f[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("kcat %s: line %q: %w", topic, line, err)
		}
		recs = append(recs, record{partition: p, timestamp: time.UnixMilli(ms), key: f[2]})
	}
	return recs, nil
}

// topicNames are every topic a pipeline with this prefix makes (ops/DISTRIBUTED.md).
func topicNames(prefix string) []string {
	var out []string
	for _, s := range []string{"raw", "chunks", "vectors", "deadletter", "windows", "manifests"} {
		out = append(out, prefix+"."+s)
	}
	return out
}

// deleteTopics removes a trial's topics from the shared broker; a topic that was never made is
// no error.
func deleteTopics(ctx context.Context, brokers, prefix string) error {
	r, err := kafkaclient.ClientConfig{Brokers: []string{brokers}}.Resolve()
	if err != nil {
		return err
	}
	tr := r.Transport()
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(r.Brokers()...), Transport: tr, Timeout: 30 * time.Second}
	resp, err := c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: topicNames(prefix)})
	if err != nil {
		return err
	}
	var errs []error
	for name, e := range resp.Errors {
		if e != nil && !errors.Is(e, kafka.UnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("%s: %w", name, e))
		}
	}
	return errors.Join(errs...)
}
