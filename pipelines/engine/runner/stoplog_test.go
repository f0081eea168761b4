package runner

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowGN embeds each window after a delay, like a busy GN batcher draining its queue.
type slowGN struct {
	delay time.Duration
	wg    sync.WaitGroup
}

func (g *slowGN) Submit(ctx context.Context, w []int32, out []float32, done func(error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		time.Sleep(g.delay)
		copy(out, vectorOf(w))
		done(nil)
	}()
	return nil
}

func (g *slowGN) Abort(error) {}

// syncBuffer is a log destination read after the run.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A soft stop that drains says so -- with how long it took and how many documents it left for
// the next run -- and never that a hard stop abandoned them: documents that had not reached the
// GN are left at once, without any deadline passing. Only the drain deadline is a hard stop.
func TestStopIsLoggedAsWhatHappened(t *testing.T) {
	cases := []struct {
		name  string
		drain time.Duration
		setup func(rg *rig, cancel func())
		want  string
	}{
		{"soft stop", 30 * time.Second, func(rg *rig, cancel func()) {
			rg.r.parts.Embedder = gnOf{&slowGN{delay: 150 * time.Millisecond}}
			rg.src.delay = 5 * time.Millisecond         // some documents are at the GN when the stop comes
			rg.src.cancelAt, rg.src.cancel = 20, cancel // the input read as the stop comes is left
		}, "soft stop: drained; the documents that had not reached the GN are left for the next run"},
		{"drain deadline", 50 * time.Millisecond, func(rg *rig, cancel func()) {
			rg.r.parts.Embedder = gnOf{&stuckGN{first: cancel}} // stopped once a document is stuck at the GN
		}, "hard stop: run.drain_timeout passed before the in-flight documents were done"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs syncBuffer
			rg := newRig(t, t.TempDir(), corpus(40), Options{DrainTimeout: c.drain, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c.setup(rg, cancel)
			start := time.Now()
			if err := rg.r.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el > 10*time.Second {
				t.Fatalf("the stop took %v", el)
			}
			out := logs.String()
			if rg.r.C.Abandoned.Load() == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("abandoned %d; logs:\n%s\nwant %q", rg.r.C.Abandoned.Load(), out, c.want)
			}
			if c.name == "soft stop" && (strings.Contains(out, "hard stop") || rg.r.C.DocsWritten.Load() == 0) {
				t.Fatalf("a soft stop that drained %d documents reported as:\n%s", rg.r.C.DocsWritten.Load(), out)
			}
		})
	}
}
