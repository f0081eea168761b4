package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// The exit code tells a completed run (0) from a failed one (1), a usage error (2) and a run a
// signal stopped before it completed (128+N); the commands that run until stopped exit 0.
func TestExitCode(t *testing.T) {
	cases := []struct {
		name, cmd string
		err       error
		sig       os.Signal
		code      int
	}{
		{"completed", "run", nil, nil, 0},
		{"help", "run", flag.ErrHelp, nil, 0},
		{"failed", "run", errors.New("sink write: disk full"), nil, 1},
		{"usage", "run", usageError("run", "give exactly one pipeline file"), nil, 2},
		{"interrupted by Ctrl-C", "run", errInterrupted, os.Interrupt, 130},
		{"interrupted by SIGTERM", "run", errInterrupted, syscall.SIGTERM, 143},
		{"eval stopped mid-way", "eval", fmt.Errorf("encoding corpus: %w", context.Canceled), os.Interrupt, 130},
		{"failed while a signal came", "run", errors.New("sink write: disk full"), os.Interrupt, 1},
		{"a stage's normal stop", "stage", nil, syscall.SIGTERM, 0},
		{"a stage cancelled while starting", "stage", context.Canceled, syscall.SIGTERM, 1},
		{"a cancel without a signal", "run", context.Canceled, nil, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, msg := exitCode(c.cmd, c.err, c.sig)
			if code != c.code {
				t.Fatalf("exit %d, want %d (%q)", code, c.code, msg)
			}
			if code >= 128 && (!strings.Contains(msg, "interrupted by") || strings.Contains(msg, "context canceled")) {
				t.Fatalf("message %q", msg)
			}
		})
	}
}

// The real binary: a run stopped by SIGINT or SIGTERM drains, prints its summary saying so, and
// exits 130 or 143; one that completes exits 0; one that fails exits 1; a usage error exits 2.
// A watched, empty folder keeps the run going until the signal. A signal while the pgvector
// sink still retries its first connection (a port nobody listens on, retry_timeout: 10m) ends
// the run at once, as interrupted, not after retry_timeout as a failure.
func TestExitCodesOfTheBinary(t *testing.T) {
	model, tok := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	dir := t.TempDir()
	bin := filepath.Join(dir, "reignpipe")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	corpus := filepath.Join(dir, "corpus.jsonl")
	if err := os.WriteFile(corpus, []byte(`{"id": "a", "text": "a short document"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	watched := filepath.Join(dir, "inbox")
	if err := os.Mkdir(watched, 0o755); err != nil {
		t.Fatal(err)
	}
	pipelineWith := func(name, source, sink string) string {
		y := fmt.Sprintf(`version: 1
name: %s
source: %s
gn: {name: bge-small-en-v15, model: %q, tokenizer: %q}
batching: {max_wait: 5ms}
cache: {dir: %q}
sinks: [%s]
run: {state_dir: %q, summary: %q, progress: off}
`, name, source, model, tok, filepath.Join(dir, name, "cache"), sink, filepath.Join(dir, name, "state"), filepath.Join(dir, name, "summary.json"))
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pipeline := func(name, source string) string {
		return pipelineWith(name, source, fmt.Sprintf("{type: jsonl, dir: %q}", filepath.Join(dir, name, "vectors")))
	}
	// A PostgreSQL nobody serves: the port of a listener closed again.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadDB := fmt.Sprintf("{type: pgvector, dsn: \"postgres://reignpipe@%s/vectors?sslmode=disable\", retry_timeout: 10m}", l.Addr())
	l.Close()
	jsonlSource := fmt.Sprintf("{type: jsonl, path: %q}", corpus)
	const started, retrying = "msg=run ", "transient failure, retrying"
	cases := []struct {
		name    string
		args    []string
		signal  syscall.Signal // sent once stderr says waitFor; 0: none
		waitFor string
		code    int
		stdout  string // in the summary
		stderr  string
	}{
		{"completed", []string{"run", pipeline("done", jsonlSource)}, 0, "", 0, `"stopped": "completed"`, ""},
		{"Ctrl-C", []string{"run", pipeline("int", fmt.Sprintf("{type: jsonl, path: %q, watch: true, poll: 100ms}", watched))},
			syscall.SIGINT, started, 130, `"stopped": "interrupted"`, "run interrupted by SIGINT (Ctrl-C) (exit 130)"},
		{"SIGTERM", []string{"run", pipeline("term", fmt.Sprintf("{type: jsonl, path: %q, watch: true, poll: 100ms}", watched))},
			syscall.SIGTERM, started, 143, `"stopped": "interrupted"`, "run interrupted by SIGTERM (exit 143)"},
		{"SIGTERM while pgvector connects", []string{"run", pipelineWith("pgterm", jsonlSource, deadDB)},
			syscall.SIGTERM, retrying, 143, `"stopped": "interrupted"`, "run interrupted by SIGTERM (exit 143)"},
		{"Ctrl-C while pgvector connects", []string{"run", pipelineWith("pgint", jsonlSource, deadDB)},
			syscall.SIGINT, retrying, 130, `"stopped": "interrupted"`, "run interrupted by SIGINT (Ctrl-C) (exit 130)"},
		{"failed", []string{"run", pipeline("fail", fmt.Sprintf("{type: jsonl, path: %q}", filepath.Join(dir, "missing.jsonl")))}, 0, "", 1, "", "source.path"},
		{"usage", []string{"run"}, 0, "", 2, "", "usage: reignpipe run"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout bytes.Buffer
			var stderr lockedBuffer
			cmd := exec.Command(bin, c.args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var signalled time.Time
			if c.signal != 0 {
				// The run has started once it logs its "run" line (GN loaded, source open); the
				// pgvector sink retries once it logs a transient failure.
				deadline := time.Now().Add(2 * time.Minute)
				for !strings.Contains(stderr.String(), c.waitFor) {
					if time.Now().After(deadline) {
						cmd.Process.Kill()
						t.Fatalf("stderr never said %q:\n%s", c.waitFor, stderr.String())
					}
					time.Sleep(50 * time.Millisecond)
				}
				if err := cmd.Process.Signal(c.signal); err != nil {
					t.Fatal(err)
				}
				signalled = time.Now()
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(3 * time.Minute):
				cmd.Process.Kill()
				t.Fatalf("still running:\n%s", stderr.String())
			}
			// A drain of nothing in flight (and the dropped retry) takes well under this.
			if !signalled.IsZero() && time.Since(signalled) > 5*time.Second {
				t.Fatalf("exited %v after the signal\n%s", time.Since(signalled).Round(time.Millisecond), stderr.String())
			}
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderr) {
				t.Fatalf("stdout:\n%s\nstderr:\n%s\nwant %q and %q", stdout.String(), stderr.String(), c.stdout, c.stderr)
			}
			// run.summary says the same as stdout (not an earlier run's summary).
			if c.stdout != "" {
				if b, err := os.ReadFile(filepath.Join(dir, cmdPipelineName(c.args), "summary.json")); err != nil || !strings.Contains(string(b), c.stdout) {
					t.Fatalf("run.summary: %v\n%s", err, b)
				}
			}
		})
	}
}

// cmdPipelineName is the name of the pipeline file the command line runs (its base name).
func cmdPipelineName(args []string) string {
	return strings.TrimSuffix(filepath.Base(args[len(args)-1]), ".yaml")
}

// lockedBuffer is a process's stderr, read while the process still writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
