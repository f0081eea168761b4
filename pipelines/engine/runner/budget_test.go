package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/schemas"
)

func TestByteBudget(t *testing.T) {
	b := newByteBudget(100)
	ctx := context.Background()
	if err := b.acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	// 60 + 50 > 100: waits until the first is released.
	got := make(chan error, 1)
	go func() { got <- b.acquire(ctx, 50) }()
	select {
	case err := <-got:
		t.Fatalf("second acquire returned %v while the budget was full", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.release(60)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	b.release(50)
	// Larger than the whole budget: admitted when nothing else is held.
	if err := b.acquire(ctx, 500); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if err := b.acquire(cctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire on a full budget after cancel = %v", err)
	}
	b.release(500)
	if b.used != 0 || b.held != 0 {
		t.Fatalf("used %d held %d after releasing everything", b.used, b.held)
	}
}

// A document over MaxDocBytes is dead-lettered with its size and the bound, before it costs a
// tokenizer or a GN pass; the rest of the run goes on.
func TestOversizeDocumentDeadLettered(t *testing.T) {
	docs := corpus(6)
	docs[2].Text = strings.Repeat("huge ", 400)
	rg := newRig(t, t.TempDir(), docs, Options{MaxDocBytes: 1000})
	if err := rg.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := &rg.r.C
	if c.DocsWritten.Load() != 5 || c.DocsFailed.Load() != 1 || len(rg.dl.d) != 1 {
		t.Fatalf("written %d failed %d dead letters %d", c.DocsWritten.Load(), c.DocsFailed.Load(), len(rg.dl.d))
	}
	d := rg.dl.d[0]
	if d.DocID != docs[2].ID || d.Stage != "size" || !strings.Contains(d.Err, "2000 bytes") || !strings.Contains(d.Err, "max_doc_bytes (1000)") {
		t.Fatalf("dead letter %+v", d)
	}
	if c.Watermark.Load() != 6 {
		t.Fatalf("watermark %d, want 6 (the oversize input is done: dead-lettered)", c.Watermark.Load())
	}
}

// gateGN holds every window until open is closed, counting the text bytes of the documents
// the runner has admitted meanwhile through the source.
type gateGN struct {
	open chan struct{}
	wg   sync.WaitGroup
	n    atomic.Int64 // windows submitted
}

func (g *gateGN) Abort(error) {}
func (g *gateGN) Submit(ctx context.Context, w []int32, out []float32, done func(error)) error {
	g.n.Add(1)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		<-g.open
		copy(out, vectorOf(w))
		done(nil)
	}()
	return nil
}

// With InflightBytes the reader stops taking documents while their text fills the budget,
// whatever Queue allows, and resumes as documents finish.
func TestInflightBytesBoundReading(t *testing.T) {
	var docs []schemas.Document
	for _, d := range corpus(40) {
		d.Text = strings.Repeat(strings.Fields(d.Text)[0]+" ", 25) // 25 words: about 100 bytes each
		docs = append(docs, d)
	}
	size := int64(len(docs[0].Text))
	rg := newRig(t, t.TempDir(), docs, Options{InflightBytes: 3 * size, Queue: 64})
	g := &gateGN{open: make(chan struct{})}
	rg.r.parts.Embedder = gnOf{g}
	var reads atomic.Int64
	errc := make(chan error, 1)
	go func() { errc <- rg.r.Run(context.Background()) }()
	time.Sleep(300 * time.Millisecond)
	reads.Store(int64(rg.src.readCount()))
	// Three documents fit; the fourth has been read and waits for room.
	if n := reads.Load(); n > 4 {
		t.Fatalf("%d documents read while 3 fit the in-flight budget", n)
	}
	close(g.open)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if c := &rg.r.C; c.DocsWritten.Load() != 40 {
		t.Fatalf("written %d of 40", c.DocsWritten.Load())
	}
}
