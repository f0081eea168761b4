package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// The real binary: serve refuses a non-loopback address without a key (exit 1, saying which
// flag would do), and on SIGTERM with a request running past --grace it stops the request (503)
// and exits 0 within the grace and a moment, not later and not with an error.
func TestServeBinaryGraceAndRefusal(t *testing.T) {
	model, tok := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	t.Setenv("REIGNPIPE_API_KEY", "")
	dir := t.TempDir()
	bin := filepath.Join(dir, "reignpipe")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	corpus := filepath.Join(dir, "corpus.jsonl")
	if err := os.WriteFile(corpus, []byte(`{"id": "a", "text": "a short document about bread ovens"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "p.yaml")
	y := fmt.Sprintf(`version: 1
name: servebin
source: {type: jsonl, path: %q}
gn: {name: bge-small-en-v15, model: %q, tokenizer: %q}
batching: {max_wait: 5ms}
cache: {dir: %q}
sinks: [{type: jsonl, dir: %q}]
run: {state_dir: %q, progress: off}
`, corpus, model, tok, filepath.Join(dir, "cache"), filepath.Join(dir, "vectors"), filepath.Join(dir, "state"))
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "run", p).CombinedOutput(); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}

	out, err := exec.Command(bin, "serve", "--addr", "0.0.0.0:0", p).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "--insecure-no-auth") {
		t.Fatalf("serve on 0.0.0.0 without a key: %v\n%s", err, out)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var stderr lockedBuffer
	cmd := exec.Command(bin, "serve", "--addr", addr, "--grace", "1s", "--max-tokens", "100000000", p)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer cmd.Process.Kill()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(stderr.String(), "serving POST") {
		if time.Now().After(deadline) {
			t.Fatalf("serve never said it serves:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every sentence its own (a repeated one would cut into identical windows, one GN pass).
	var lb strings.Builder
	for i := 0; lb.Len() < 1<<20; i++ {
		fmt.Fprintf(&lb, "Wave energy converter %d rides swell %d and pumps hydraulic fluid through generator %d. ", i, i*3, i*7)
	}
	long := lb.String()
	got := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+addr+"/v1/embed", "text/plain", strings.NewReader(long))
		if err != nil {
			got <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	time.Sleep(2 * time.Second) // the body is in and the GN is at work: minutes of it on a CPU
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("still running a minute after SIGTERM with --grace 1s:\n%s", stderr.String())
	}
	took := time.Since(signalled)
	if err != nil {
		t.Fatalf("serve exited %v after SIGTERM, want 0:\n%s", err, stderr.String())
	}
	if took > 8*time.Second {
		t.Fatalf("serve took %s to exit after SIGTERM with --grace 1s", took)
	}
	if code := <-got; code != http.StatusServiceUnavailable {
		t.Fatalf("the request running at the end of the grace got %d, want 503\n%s", code, stderr.String())
	}
	t.Logf("exit 0 %s after SIGTERM", took.Round(time.Millisecond))
}
