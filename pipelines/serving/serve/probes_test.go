package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/pipelines/serving/search"
	"github.com/reignpipe/reignpipe/pipelines/serving/search/searchtest"
)

// The probes of issue 29, each as an operator ran it, over one real corpus shared by the tests
// of this file (a corpus run costs seconds; the chunk cache can be open once per process).
var (
	sharedOnce sync.Once
	sharedS    *search.Searcher
	sharedDir  string
	sharedErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedS != nil {
		sharedS.Close()
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// shared is the searcher over the shared corpus, and the corpus's vectors folder.
func shared(t *testing.T) (*search.Searcher, string) {
	t.Helper()
	sharedOnce.Do(func() {
		if sharedDir, sharedErr = os.MkdirTemp("", "serve-probes-"); sharedErr != nil {
			return
		}
		cfg := searchtest.Corpus(t, sharedDir, "")
		sharedS, sharedErr = search.Open(context.Background(), cfg, search.Options{Sink: -1})
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedS, filepath.Join(sharedDir, "vectors")
}

// serveShared starts a server with options o over the shared corpus; it is shut down when the
// test ends (the searcher stays open for the next test).
func serveShared(t *testing.T, o Options, l Listening) (*API, *Server) {
	t.Helper()
	s, _ := shared(t)
	o.Pipeline = "searchtest"
	a := New(s, o)
	if l.Addr == "" {
		l.Addr = "127.0.0.1:0"
	}
	srv, err := Listen(l, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Shutdown(10 * time.Second); err != nil {
			t.Error(err)
		}
	})
	return a, srv
}

// slowPost sends a request whose body arrives at one byte per second, and returns the status
// (0 when the connection ended without one).
func slowPost(addr, path, body string) int {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return -1
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", path, len(body))
	got := make(chan int, 1)
	go func() {
		var code int
		var proto string
		fmt.Fscan(c, &proto, &code)
		got <- code
	}()
	for i := 0; i < len(body); i++ {
		select {
		case code := <-got:
			return code
		case <-time.After(time.Second):
		}
		if _, err := c.Write([]byte{body[i]}); err != nil {
			break
		}
	}
	return <-got
}

// Four clients sending their bodies at 1 byte/s do not lock the others out: they hold no
// concurrency slot while their bodies arrive, normal clients get answers meanwhile, and the
// slow ones are answered 408 when the body deadline passes.
func TestProbeSlowClients(t *testing.T) {
	a, srv := serveShared(t, Options{MaxConcurrent: 4, BodyTimeout: 3 * time.Second}, Listening{})
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = slowPost(srv.Addr, "/v1/search", strings.Repeat("bread ", 20))
		}()
	}
	time.Sleep(500 * time.Millisecond) // the slow ones are connected and sending
	for i := range 3 {
		code, body := post(t, "http://"+srv.Addr+"/v1/search?k=2", "text/plain", searchtest.Texts()["bread"])
		if code != 200 {
			t.Fatalf("normal client %d beside four slow ones: %d %s", i, code, body)
		}
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusRequestTimeout {
			t.Errorf("slow client %d: %d, want 408", i, c)
		}
	}
	if a.m.slow.Load() != 4 || a.m.rejected.Load() != 0 {
		t.Fatalf("slow bodies %d, rejected %d; want 4 and 0", a.m.slow.Load(), a.m.rejected.Load())
	}
}

// cpuSeconds is the CPU time this process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// A request that times out stops burning CPU: its windows still queued are dropped, no more
// reach the GN, and the process goes (nearly) idle within a GN batch of the 504.
func TestProbeTimedOutRequestStops(t *testing.T) {
	a, srv := serveShared(t, Options{Timeout: 2 * time.Second, MaxTokens: 1 << 30}, Listening{})
	// ~1 MB of text no run has seen: hundreds of new windows, minutes of GN work on a CPU.
	var b strings.Builder
	for i := 0; b.Len() < 1<<20; i++ {
		fmt.Fprintf(&b, "Paragraph %d: tidal turbine %d converts the kinetic energy of sea water number %d into electricity.\n", i, i*7, i*13)
	}
	start := time.Now()
	code, body := post(t, "http://"+srv.Addr+"/v1/embed", "text/plain", b.String())
	if code != http.StatusGatewayTimeout || strings.Contains(string(body), "deadline") {
		t.Fatalf("big request past the timeout: %d %s", code, body)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the 504 came after %s; the timeout is 2s", d)
	}
	time.Sleep(time.Second) // the GN batch in progress at the timeout lands
	st0, cpu0 := a.s.Embedder.Stats(), cpuSeconds()
	time.Sleep(3 * time.Second)
	st1, cpu1 := a.s.Embedder.Stats(), cpuSeconds()
	if st1.GNWindows != st0.GNWindows {
		t.Fatalf("the GN went on embedding the timed-out request's windows: %d then %d", st0.GNWindows, st1.GNWindows)
	}
	if used := cpu1 - cpu0; used > 0.5 {
		t.Fatalf("%.2f s of CPU in the 3 s after the request was stopped; the work did not stop", used)
	}
	t.Logf("windows cut %d, GN windows %d by the end; %.2f s CPU in 3 s after", st1.Windows, st1.GNWindows, cpu1-cpu0)
}

// A request's text is bounded in tokens: past the bound, 413 with the bound in the message; a
// document over it alone sends no window to the embed step.
func TestProbeTokenBound(t *testing.T) {
	a, srv := serveShared(t, Options{MaxTokens: 100}, Listening{})
	before := a.s.Embedder.Stats()
	code, body := post(t, "http://"+srv.Addr+"/v1/embed", "text/plain", strings.Repeat("a bread oven ", 200))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "over 100 tokens") || !strings.Contains(string(body), "--max-tokens") {
		t.Fatalf("text over the token bound: %d %s", code, body)
	}
	if after := a.s.Embedder.Stats(); after.Windows != before.Windows {
		t.Fatalf("%d windows went to the embed step for a refused request", after.Windows-before.Windows)
	}
	// The bound is the request's, across the inputs of one embeddings request (an input cut
	// before the bound passed may have queued its windows: the refusal cancels them).
	s, _ := shared(t)
	in := []string{strings.Repeat("word ", 60), strings.Repeat("other ", 60)}
	code, body = post(t, "http://"+srv.Addr+"/v1/embeddings", "application/json", jsonBody(map[string]any{"model": s.Embedder.Space(), "input": in}))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "over 100 tokens") {
		t.Fatalf("inputs together over the token bound: %d %s", code, body)
	}
	if code, body := post(t, "http://"+srv.Addr+"/v1/embed", "text/plain", "a bread oven"); code != 200 {
		t.Fatalf("a request under the bound: %d %s", code, body)
	}
}

// On shutdown a request running past the grace is stopped at the grace's end: Shutdown returns
// nil soon after (what a SIGTERM turns into exit 0), the request is answered 503, and nothing
// runs on the parts afterwards.
func TestProbeGrace(t *testing.T) {
	s, _ := shared(t)
	a := New(s, Options{Pipeline: "searchtest", MaxTokens: 1 << 30})
	srv, err := Listen(Listening{Addr: "127.0.0.1:0"}, a)
	if err != nil {
		t.Fatal(err)
	}
	// Every sentence its own (a repeated one would cut into identical windows, one GN pass).
	var lb strings.Builder
	for i := 0; lb.Len() < 1<<20; i++ {
		fmt.Fprintf(&lb, "Wave energy converter %d rides swell %d and pumps hydraulic fluid through generator %d. ", i, i*3, i*7)
	}
	long := lb.String()
	got := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+srv.Addr+"/v1/embed", "text/plain", strings.NewReader(long))
		if err != nil {
			got <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	deadline := time.Now().Add(20 * time.Second)
	for a.m.inflight.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if a.m.inflight.Load() == 0 {
		t.Fatal("the request never started")
	}
	grace := time.Second
	start := time.Now()
	if err := srv.Shutdown(grace); err != nil {
		t.Fatalf("shutdown after stopping a request: %v; a drain that had to stop requests is a clean stop", err)
	}
	took := time.Since(start)
	if took > grace+stragglerWait+3*time.Second {
		t.Fatalf("shutdown took %s with a grace of %s", took, grace)
	}
	if code := <-got; code != http.StatusServiceUnavailable {
		t.Fatalf("the request stopped at the grace's end got %d, want 503", code)
	}
	if n := a.m.inflight.Load(); n != 0 {
		t.Fatalf("%d requests still running after Shutdown returned", n)
	}
	t.Logf("shutdown with a running request took %s (grace %s)", took, grace)
}

// Every request has an id: the client's X-Request-Id when it is sane, else a new one, echoed
// in the response header and in the error body.
func TestProbeRequestID(t *testing.T) {
	_, srv := serveShared(t, Options{}, Listening{})
	for _, tc := range []struct {
		sent string
		kept bool
	}{{"trace-0af7651916cd43dd", true}, {"bad id with spaces", false}, {"", false}, {strings.Repeat("x", 200), false}} {
		req, _ := http.NewRequest("POST", "http://"+srv.Addr+"/v1/search?k=0", strings.NewReader("bread"))
		req.Header.Set("Content-Type", "text/plain")
		if tc.sent != "" {
			req.Header.Set("X-Request-Id", tc.sent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e map[string]string
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		id := resp.Header.Get("X-Request-Id")
		if (id == tc.sent) != tc.kept || !saneID(id) || e["request_id"] != id {
			t.Fatalf("sent %q: header %q, body %v", tc.sent, id, e)
		}
	}
}
