package gn

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/stages/gn/gnbatch"
)

// fakeEmbedder writes a function of each window's own tokens, so a result landing in the
// wrong request's Out is caught, and records every batch's shape.
type fakeEmbedder struct {
	dim  int
	err  error
	gate chan struct{} // when set, each Embed waits for a receive or close

	mu      sync.Mutex
	batches [][]int // window lengths per pass
}

func (f *fakeEmbedder) Dim() int { return f.dim }

func (f *fakeEmbedder) Embed(w [][]int32, out [][]float32) error {
	if f.gate != nil {
		<-f.gate
	}
	lens := make([]int, len(w))
	for i := range w {
		lens[i] = len(w[i])
		out[i][0], out[i][1] = fakeVec(w[i])
	}
	f.mu.Lock()
	f.batches = append(f.batches, lens)
	f.mu.Unlock()
	return f.err
}

func fakeVec(w []int32) (float32, float32) {
	var s int64
	for _, id := range w {
		s += int64(id)
	}
	return float32(len(w)), float32(s % 100003)
}

func TestBatcherBudgetOrderAndDoneOnce(t *testing.T) {
	f := &fakeEmbedder{dim: 4}
	opts := BatcherOptions{TokenBudget: 2048, MaxBatch: 8, MaxWait: 2 * time.Millisecond, QueueSize: 16}
	b, err := NewBatcher(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	const docs = 6
	type req struct {
		tokens []int32
		out    []float32
		calls  atomic.Int32
		err    atomic.Value
	}
	var all [docs][]*req
	var wg sync.WaitGroup
	for d := range docs {
		rng := rand.New(rand.NewPCG(uint64(d), 7))
		n := 3 + rng.IntN(6)
		for i := range n {
			l := 512
			if i == n-1 {
				l = 2 + rng.IntN(510) // a document's short tail
			}
			tok := make([]int32, l)
			for j := range tok {
				tok[j] = int32(rng.IntN(30000))
			}
			all[d] = append(all[d], &req{tokens: tok, out: make([]float32, 4)})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, r := range all[d] {
				err := b.Submit(context.Background(), Request{Tokens: r.tokens, Out: r.out, Done: func(err error) {
					r.calls.Add(1)
					if err != nil {
						r.err.Store(err)
					}
				}})
				if err != nil {
					t.Errorf("Submit: %v", err)
				}
				_ = b.Stats() // concurrent reader, for -race
			}
		}()
	}
	wg.Wait()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	total := 0
	for d := range docs {
		for _, r := range all[d] {
			total++
			if c := r.calls.Load(); c != 1 {
				t.Fatalf("Done called %d times", c)
			}
			if e := r.err.Load(); e != nil {
				t.Fatalf("Done(%v)", e)
			}
			if l, s := fakeVec(r.tokens); r.out[0] != l || r.out[1] != s {
				t.Fatalf("request got another window's result: %v, want [%v %v]", r.out[:2], l, s)
			}
		}
	}
	for _, lens := range f.batches {
		lmax := 0
		for _, l := range lens {
			lmax = max(lmax, l)
		}
		if len(lens) > opts.MaxBatch || len(lens)*lmax > opts.TokenBudget {
			t.Fatalf("batch %v breaks MaxBatch %d / TokenBudget %d", lens, opts.MaxBatch, opts.TokenBudget)
		}
	}
	st := b.Stats()
	if st.Windows != int64(total) || st.Batches != int64(len(f.batches)) {
		t.Fatalf("stats %+v, want %d windows in %d batches", st, total, len(f.batches))
	}
	t.Logf("%d windows in %d batches: fill %.2f padding %.2f (full %d timed %d close %d)",
		st.Windows, st.Batches, st.FillRatio, st.PaddingRatio, st.FullBatches, st.TimedBatches, st.CloseBatches)
}

// queueOf builds a Batcher without its goroutine, to test the cutting policy alone.
func queueOf(t *testing.T, opts BatcherOptions, lens []int, at time.Time) *Batcher {
	t.Helper()
	o, err := opts.withDefaults("cpu")
	if err != nil {
		t.Fatal(err)
	}
	b := &Batcher{opts: o}
	for i, l := range lens {
		p := &pending{Request: Request{Tokens: make([]int32, l)}, seq: int64(i + 1), at: at}
		b.queue = append(b.queue, p)
	}
	for i := 1; i < len(b.queue); i++ { // insertion sort, as Submit keeps it
		for j := i; j > 0 && byLengthDesc(b.queue[j-1], b.queue[j]) > 0; j-- {
			b.queue[j-1], b.queue[j] = b.queue[j], b.queue[j-1]
		}
	}
	return b
}

func lensOf(batch []*pending) []int {
	out := make([]int, len(batch))
	for i, p := range batch {
		out[i] = len(p.Tokens)
	}
	return out
}

func TestBatcherCutsBySimilarLength(t *testing.T) {
	now := time.Now()
	opts := BatcherOptions{TokenBudget: 16384, MaxBatch: 64, MaxWait: 20 * time.Millisecond}
	// 40 full windows and 5 tails interleaved, as long documents give them.
	var lens []int
	for i := range 40 {
		lens = append(lens, 512)
		if i%8 == 7 {
			lens = append(lens, 90+i)
		}
	}
	b := queueOf(t, opts, lens, now)
	batch, reason, _ := b.next(now)
	if reason != cutFull || len(batch) != 32 || lensOf(batch)[31] != 512 {
		t.Fatalf("first cut %v (reason %d), want 32 full windows", lensOf(batch), reason)
	}
	if batch, _, wait := b.next(now); batch != nil || wait <= 0 || wait > opts.MaxWait {
		t.Fatalf("partial batch %v ran early (wait %v)", lensOf(batch), wait)
	}
	batch, reason, _ = b.next(now.Add(opts.MaxWait))
	if reason != cutTimed || len(batch) != 13 || len(b.queue) != 0 {
		t.Fatalf("timed cut %v reason %d, %d left", lensOf(batch), reason, len(b.queue))
	}

	// 64 tails alone fill a batch by count and go sorted, with no waiting.
	var tails []int
	for i := range 70 {
		tails = append(tails, 20+(i*37)%200)
	}
	b = queueOf(t, opts, tails, now)
	batch, reason, _ = b.next(now)
	got := lensOf(batch)
	if reason != cutFull || len(got) != 64 {
		t.Fatalf("tails cut %v reason %d", got, reason)
	}
	for i := 1; i < len(got); i++ {
		if got[i] > got[i-1] {
			t.Fatalf("batch not sorted by length: %v", got)
		}
	}
	b.closed = true
	if batch, reason, _ = b.next(now); reason != cutClose || len(batch) != 6 {
		t.Fatalf("close cut %v reason %d", lensOf(batch), reason)
	}
}

func TestBatcherOldestFullCutFirst(t *testing.T) {
	now := time.Now()
	opts := BatcherOptions{TokenBudget: 1000, MaxBatch: 2, MaxWait: time.Second}
	// Submitted order: 10, 10, 500, 500 -> two full cuts; the short pair holds the oldest.
	b := queueOf(t, opts, []int{10, 10, 500, 500}, now)
	if batch, _, _ := b.next(now); lensOf(batch)[0] != 10 {
		t.Fatalf("got %v, want the pair holding the oldest window", lensOf(batch))
	}
}

func TestBatcherMaxWaitFlush(t *testing.T) {
	f := &fakeEmbedder{dim: 2}
	b, err := NewBatcher(f, BatcherOptions{MaxWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	done := make(chan error, 1)
	start := time.Now()
	if err := b.Submit(context.Background(), Request{Tokens: []int32{101, 7, 102}, Out: make([]float32, 2), Done: func(err error) { done <- err }}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(start) < 10*time.Millisecond {
			t.Fatalf("partial batch ran before MaxWait")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a lone request never ran: MaxWait flush missing")
	}
	if st := b.Stats(); st.TimedBatches != 1 {
		t.Fatalf("stats %+v, want one timed batch", st)
	}
}

func TestBatcherCloseDrainsAndRefuses(t *testing.T) {
	f := &fakeEmbedder{dim: 2}
	b, err := NewBatcher(f, BatcherOptions{MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	for i := range 10 {
		r := Request{Tokens: make([]int32, 5+i), Out: make([]float32, 2), Done: func(error) { calls.Add(1) }}
		if err := b.Submit(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 10 {
		t.Fatalf("Close returned with %d of 10 requests done", calls.Load())
	}
	if st := b.Stats(); st.CloseBatches != 1 || st.Windows != 10 {
		t.Fatalf("stats %+v, want one close batch of 10", st)
	}
	err = b.Submit(context.Background(), Request{Tokens: []int32{1}, Out: make([]float32, 2), Done: func(error) { t.Error("Done after refused Submit") }})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close: %v, want ErrClosed", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestBatcherErrorReachesEveryDone(t *testing.T) {
	boom := errors.New("boom")
	f := &fakeEmbedder{dim: 2, err: boom}
	b, err := NewBatcher(f, BatcherOptions{MaxBatch: 4, MaxWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var errs []error
	for range 9 {
		r := Request{Tokens: make([]int32, 8), Out: make([]float32, 2), Done: func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}}
		if err := b.Submit(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	if len(errs) != 9 {
		t.Fatalf("%d Done calls, want 9", len(errs))
	}
	for _, e := range errs {
		if !errors.Is(e, boom) {
			t.Fatalf("Done(%v), want the Embed error", e)
		}
	}
	if st := b.Stats(); st.Failed != st.Batches || st.Batches < 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestBatcherBackPressure(t *testing.T) {
	f := &fakeEmbedder{dim: 2, gate: make(chan struct{})}
	b, err := NewBatcher(f, BatcherOptions{MaxBatch: 2, QueueSize: 2, MaxWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	req := func() Request {
		return Request{Tokens: make([]int32, 3), Out: make([]float32, 2), Done: func(error) { calls.Add(1) }}
	}
	for range 2 {
		if err := b.Submit(context.Background(), req()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := b.Submit(ctx, req()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit on a full queue: %v, want it to block until the deadline", err)
	}
	close(f.gate)
	if err := b.Submit(context.Background(), req()); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if calls.Load() != 3 {
		t.Fatalf("%d Done calls, want 3", calls.Load())
	}
}

func TestBatcherRejectsBadInput(t *testing.T) {
	f := &fakeEmbedder{dim: 2}
	if _, err := NewBatcher(nil, BatcherOptions{}); err == nil {
		t.Error("nil embedder accepted")
	}
	for _, o := range []BatcherOptions{{TokenBudget: -1}, {MaxBatch: -1}, {MaxWait: -1}, {MaxBatch: 8, QueueSize: 4}} {
		if _, err := NewBatcher(f, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	b, err := NewBatcher(f, BatcherOptions{TokenBudget: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ok := func(error) {}
	for name, r := range map[string]Request{
		"nil Done":      {Tokens: []int32{1}, Out: make([]float32, 2)},
		"empty window":  {Out: make([]float32, 2), Done: ok},
		"over budget":   {Tokens: make([]int32, 101), Out: make([]float32, 2), Done: ok},
		"wrong Out len": {Tokens: []int32{1}, Out: make([]float32, 3), Done: ok},
	} {
		if err := b.Submit(context.Background(), r); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// Submits racing Close: every accepted request is run exactly once, every refused one never.
func TestBatcherSubmitRacingClose(t *testing.T) {
	f := &fakeEmbedder{dim: 2}
	b, err := NewBatcher(f, BatcherOptions{MaxBatch: 4, MaxWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var accepted, done atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r := Request{Tokens: make([]int32, 4), Out: make([]float32, 2), Done: func(error) { done.Add(1) }}
				if err := b.Submit(context.Background(), r); err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Error(err)
					}
					return
				}
				accepted.Add(1)
			}
		}()
	}
	time.Sleep(5 * time.Millisecond)
	b.Close()
	wg.Wait()
	if accepted.Load() != done.Load() || accepted.Load() == 0 {
		t.Fatalf("%d accepted, %d done", accepted.Load(), done.Load())
	}
}

// Abort fails what is queued without running it; Close afterwards returns at once.
func TestBatcherAbortFailsQueued(t *testing.T) {
	gate := make(chan struct{})
	f := &gatedEmbedder{dim: 2, gate: gate}
	b, err := NewBatcher(f, BatcherOptions{TokenBudget: 8, MaxBatch: 1, MaxWait: time.Millisecond, QueueSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var errs []error
	for i := 0; i < 5; i++ {
		r := Request{Tokens: []int32{1, 2}, Out: make([]float32, 2), Done: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }}
		if err := b.Submit(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	stop := errors.New("hard stop")
	aborted := make(chan struct{})
	go func() { b.Abort(stop); close(aborted) }()
	time.Sleep(20 * time.Millisecond)
	close(gate) // let the one running pass finish
	<-aborted
	b.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 5 {
		t.Fatalf("%d Done calls, want 5", len(errs))
	}
	failed := 0
	for _, e := range errs {
		if errors.Is(e, stop) {
			failed++
		}
	}
	if failed < 3 || f.calls.Load() > 2 {
		t.Fatalf("%d failed by Abort, %d passes ran", failed, f.calls.Load())
	}
	if err := b.Submit(context.Background(), Request{Tokens: []int32{1}, Out: make([]float32, 2), Done: func(error) {}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Abort: %v", err)
	}
}

type gatedEmbedder struct {
	dim   int
	gate  chan struct{}
	calls atomic.Int64
}

func (g *gatedEmbedder) Dim() int { return g.dim }
func (g *gatedEmbedder) Embed(w [][]int32, out [][]float32) error {
	g.calls.Add(1)
	<-g.gate
	return nil
}

// providerEmbedder is a fakeEmbedder that says which provider it runs on, as *Model does.
type providerEmbedder struct {
	fakeEmbedder
	provider string
}

func (p *providerEmbedder) Provider() string { return p.provider }

// TestBatcherDefaultsByProvider: zero options take gnbatch.For of the embedder's provider, the
// table the pipeline config fills left-out keys from, so the two cannot disagree.
func TestBatcherDefaultsByProvider(t *testing.T) {
	tests := []struct {
		name string
		m    Embedder
		want gnbatch.Defaults
	}{
		{"no provider method", &fakeEmbedder{dim: 2}, gnbatch.For("cpu")},
		{"cpu", &providerEmbedder{fakeEmbedder{dim: 2}, "cpu"}, gnbatch.For("cpu")},
		{"cuda", &providerEmbedder{fakeEmbedder{dim: 2}, "cuda:0"}, gnbatch.For("cuda:0")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewBatcher(tc.m, BatcherOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if o := b.Options(); o.TokenBudget != tc.want.TokenBudget || o.MaxBatch != tc.want.MaxBatch {
				t.Errorf("options = %+v, want %+v", o, tc.want)
			}
		})
	}
}

// When a batch forms, a request whose Cancelled says so is dropped (Done with its error) and one
// whose Lookup fills it is answered without a pass; only the rest reach the model.
func TestBatcherSettlesAtBatchTime(t *testing.T) {
	f := &fakeEmbedder{dim: 2, gate: make(chan struct{})}
	b, err := NewBatcher(f, BatcherOptions{TokenBudget: 64, MaxBatch: 8, MaxWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var mu sync.Mutex
	got := map[string]error{}
	done := func(name string) func(error) {
		return func(err error) { mu.Lock(); got[name] = err; mu.Unlock() }
	}
	// The first request holds the model, so the others queue and form one batch after it.
	if err := b.Submit(context.Background(), Request{Tokens: []int32{1, 2, 3}, Out: make([]float32, 2), Done: done("first")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	revoked := errors.New("partition revoked")
	var gone atomic.Bool
	found := make([]float32, 2)
	for _, r := range []Request{
		{Tokens: []int32{4, 5}, Out: make([]float32, 2), Done: done("dropped"), Cancelled: func() error {
			if gone.Load() {
				return revoked
			}
			return nil
		}},
		{Tokens: []int32{6, 7}, Out: found, Done: done("found"), Lookup: func(out []float32) bool { out[0], out[1] = 9, 9; return true }},
		{Tokens: []int32{8, 9}, Out: make([]float32, 2), Done: done("embedded"), Lookup: func([]float32) bool { return false }},
	} {
		if err := b.Submit(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	gone.Store(true)
	close(f.gate)
	b.Close()
	if !errors.Is(got["dropped"], revoked) || got["found"] != nil || got["embedded"] != nil || got["first"] != nil || len(got) != 4 {
		t.Fatalf("done: %v", got)
	}
	if found[0] != 9 {
		t.Fatalf("the looked-up request's output %v", found)
	}
	st := b.Stats()
	if st.Dropped != 1 || st.LookedUp != 1 || st.Windows != 2 {
		t.Fatalf("stats %+v: want 1 dropped, 1 looked up, 2 windows through the model", st)
	}
}
