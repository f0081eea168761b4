package runner

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/schemas"
)

// lagGN embeds windows of more than five tokens only after a delay: a long document finishes
// after a short one read later.
type lagGN struct{ wg sync.WaitGroup }

func (g *lagGN) Submit(ctx context.Context, w []int32, out []float32, done func(error)) error {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if len(w) > 5 {
			time.Sleep(150 * time.Millisecond)
		}
		copy(out, vectorOf(w))
		done(nil)
	}()
	return nil
}
func (g *lagGN) Abort(error) {}

// The same doc id twice in one input: both copies are written, the repeat is counted, and
// the copies reach the sinks in input order even when the later one finishes first -- so every
// reader, which keeps the last-written of two equal versions, keeps the later copy.
func TestDuplicateIDKeepsInputOrder(t *testing.T) {
	docs := []schemas.Document{
		{ID: "t:x", Source: "t", Version: "1", Text: strings.Repeat("long text here ", 6)}, // slow at the GN
		{ID: "t:y", Source: "t", Version: "1", Text: "other"},
		{ID: "t:x", Source: "t", Version: "1", Text: "short"}, // read later, done first
	}
	rg := newRig(t, t.TempDir(), docs, Options{CommitEvery: 100, TrackIDs: 100})
	g := &lagGN{}
	rg.r.parts.Embedder = gnOf{g}
	if err := rg.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.wg.Wait()
	var xs []int
	for _, v := range rg.sink.durable {
		if v.DocID == "t:x" {
			xs = append(xs, v.NTokens)
		}
	}
	if len(xs) != 2 || xs[0] != 18 || xs[1] != 1 {
		t.Fatalf("copies of t:x written with %v tokens, want the long one (18) then the short one (1)", xs)
	}
	if c := &rg.r.C; c.Duplicates.Load() != 1 || c.DocsWritten.Load() != 3 || c.InFlight.Load() != 0 {
		t.Fatalf("duplicates %d, written %d, in flight %d", c.Duplicates.Load(), c.DocsWritten.Load(), c.InFlight.Load())
	}
	if len(rg.r.order.inflight) != 0 || len(rg.r.order.parked) != 0 {
		t.Fatalf("order left %v in flight, %v parked", rg.r.order.inflight, rg.r.order.parked)
	}
}
