package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/schemas"
)

// recordGN holds every window until open is closed, then embeds it (or fails windows holding
// failOn), and records how often it saw each distinct window.
type recordGN struct {
	open   chan struct{}
	failOn int32
	mu     sync.Mutex
	seen   map[string]int
	n      atomic.Int64
	wg     sync.WaitGroup
}

func (g *recordGN) Abort(error) {}
func (g *recordGN) Submit(ctx context.Context, w []int32, out []float32, done func(error)) error {
	g.mu.Lock()
	g.seen[fmt.Sprint(w)]++
	g.mu.Unlock()
	g.n.Add(1)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		<-g.open
		for _, id := range w {
			if g.failOn != 0 && id == g.failOn {
				done(errors.New("forward pass failed"))
				return
			}
		}
		copy(out, vectorOf(w))
		done(nil)
	}()
	return nil
}

// sharedCorpus is a patent family: a parent, a continuation that repeats its whole text and
// adds claims, a document that holds the parent's text twice, and an unrelated one.
func sharedCorpus() []schemas.Document {
	words := func(prefix string, n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		return strings.Join(w, " ")
	}
	parent := words("p", 40) // 5 windows of 8 content tokens at K=10
	return []schemas.Document{
		{ID: "us:1", Source: "t", Version: "1", Title: "parent", Text: parent},
		{ID: "us:2", Source: "t", Version: "1", Title: "continuation", Text: parent + " " + words("c", 16)},
		{ID: "us:3", Source: "t", Version: "1", Title: "twice", Text: parent + " " + parent},
		{ID: "x:1", Source: "t", Version: "1", Title: "other", Text: words("o", 20)},
	}
}

// distinctWindows counts the windows of docs as the runner cuts them, and how many differ.
func distinctWindows(rg *rig, docs []schemas.Document) (total, distinct int) {
	p := rg.r.parts
	set := map[string]bool{}
	for _, d := range docs {
		for _, w := range p.Chunking.Windows(p.Tokenizer.AppendEncode(nil, d.Text), p.Tokenizer.CLS(), p.Tokenizer.SEP()) {
			total++
			set[fmt.Sprint(w)] = true
		}
	}
	return total, len(set)
}

// Documents in flight together that share windows (and a document that repeats its own) send
// each distinct window to the GN once; every copy gets the same vector, and the cache stores
// each row once.
func TestSharedWindowsEmbeddedOnce(t *testing.T) {
	docs := sharedCorpus()
	rg := newRig(t, t.TempDir(), docs, Options{CommitEvery: 100})
	g := &recordGN{open: make(chan struct{}), seen: map[string]int{}}
	rg.r.parts.Embedder = gnOf{g}
	total, distinct := distinctWindows(rg, docs)
	if total-distinct < 10 {
		t.Fatalf("corpus shares only %d windows", total-distinct)
	}
	errc := make(chan error, 1)
	go func() { errc <- rg.r.Run(context.Background()) }()
	// Hold the GN until every window was looked up: every copy then misses the cache together.
	c := &rg.r.C
	waitLookedUp(c, int64(total))
	close(g.open)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	g.wg.Wait()
	for w, n := range g.seen {
		if n != 1 {
			t.Errorf("window %s sent to the GN %d times", w, n)
		}
	}
	if len(g.seen) != distinct || g.n.Load() != int64(distinct) {
		t.Fatalf("GN saw %d windows (%d distinct); the corpus has %d distinct of %d", g.n.Load(), len(g.seen), distinct, total)
	}
	if c.GNWindows.Load() != int64(distinct) || c.GNShared.Load() != int64(total-distinct) || c.CacheHits.Load() != 0 {
		t.Fatalf("gn_windows %d, shared %d, hits %d; want %d, %d, 0", c.GNWindows.Load(), c.GNShared.Load(), c.CacheHits.Load(), distinct, total-distinct)
	}
	if got := rg.cache.Stats().Rows; got != int64(distinct) || c.ChunkRowsNew.Load() != int64(distinct) {
		t.Fatalf("cache holds %d rows, chunk_rows_written %d; want %d", got, c.ChunkRowsNew.Load(), distinct)
	}
	if len(rg.sink.durable) != len(docs) || len(rg.dl.d) != 0 {
		t.Fatalf("%d vectors, %d dead letters", len(rg.sink.durable), len(rg.dl.d))
	}
	// The parent and the document that holds it twice have the same mean-pool vector: the
	// shared windows really got the leader's vectors.
	vec := map[string][]float32{}
	for _, v := range rg.sink.durable {
		vec[v.DocID] = v.Vector
	}
	for i, x := range vec["us:1"] {
		if d := x - vec["us:3"][i]; d > 1e-6 || d < -1e-6 {
			t.Fatalf("us:3 vector differs from us:1 at %d: %g vs %g", i, vec["us:3"][i], x)
		}
	}
	if n := rg.r.Windows().Open(); n != 0 {
		t.Fatalf("%d flights left open after the run", n)
	}
}

// A failed forward pass fails every document waiting on that window, not only the one that
// submitted it, and the failed flight is not reused.
func TestSharedWindowFailureReachesEveryWaiter(t *testing.T) {
	docs := sharedCorpus()[:2] // the parent and its continuation
	rg := newRig(t, t.TempDir(), docs, Options{CommitEvery: 100})
	g := &recordGN{open: make(chan struct{}), seen: map[string]int{}, failOn: wordTokenizer{}.AppendEncode(nil, "p3")[0]}
	rg.r.parts.Embedder = gnOf{g}
	total, _ := distinctWindows(rg, docs)
	errc := make(chan error, 1)
	go func() { errc <- rg.r.Run(context.Background()) }()
	c := &rg.r.C
	waitLookedUp(c, int64(total))
	close(g.open)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	g.wg.Wait()
	if len(rg.dl.d) != 2 || len(rg.sink.durable) != 0 {
		t.Fatalf("%d dead letters, %d vectors; want both documents dead-lettered", len(rg.dl.d), len(rg.sink.durable))
	}
	for _, d := range rg.dl.d {
		if d.Stage != "gn" || !strings.Contains(d.Err, "forward pass failed") {
			t.Errorf("dead letter %s: stage %q, %q", d.DocID, d.Stage, d.Err)
		}
	}
	if n := rg.r.Windows().Open(); n != 0 {
		t.Fatalf("%d flights left open after the run", n)
	}
}

// At the hard stop the GN fails what it still holds; a document waiting on another's window is
// abandoned with it (read again next run), never dead-lettered.
func TestSharedWindowAbandonedWithItsLeader(t *testing.T) {
	docs := sharedCorpus()[:2]
	rg := newRig(t, t.TempDir(), docs, Options{CommitEvery: 100, DrainTimeout: 50 * time.Millisecond})
	g := &abortGN{held: map[*heldWindow]bool{}}
	rg.r.parts.Embedder = gnOf{g}
	total, _ := distinctWindows(rg, docs)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- rg.r.Run(ctx) }()
	c := &rg.r.C
	waitLookedUp(c, int64(total))
	cancel() // soft stop; the GN never answers, so the drain deadline passes: hard stop
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if c.Abandoned.Load() != 2 || len(rg.dl.d) != 0 || len(rg.sink.durable) != 0 {
		t.Fatalf("abandoned %d, dead letters %d, vectors %d; want 2, 0, 0", c.Abandoned.Load(), len(rg.dl.d), len(rg.sink.durable))
	}
	if n := rg.r.Windows().Open(); n != 0 {
		t.Fatalf("%d flights left open after the run", n)
	}
}

type heldWindow struct{ done func(error) }

// abortGN never runs a window; Abort fails every one it holds, like the batcher's hard stop.
type abortGN struct {
	mu   sync.Mutex
	held map[*heldWindow]bool
}

func (g *abortGN) Submit(ctx context.Context, w []int32, out []float32, done func(error)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held[&heldWindow{done: done}] = true
	return nil
}

func (g *abortGN) Abort(err error) {
	g.mu.Lock()
	held := g.held
	g.held = map[*heldWindow]bool{}
	g.mu.Unlock()
	for h := range held {
		h.done(err)
	}
}

// waitLookedUp waits (up to 10 s) until n windows missed the cache and were submitted to the GN
// or joined a flight: with the GN held shut, every copy has then missed together.
func waitLookedUp(c *engine.Counters, n int64) {
	for deadline := time.Now().Add(10 * time.Second); c.GNWindows.Load()+c.GNShared.Load() < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}
