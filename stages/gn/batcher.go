package gn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/reignpipe/reignpipe/stages/gn/gnbatch"
)

// Embedder is what the Batcher drives: *Model, or a fake in tests.
type Embedder interface {
	Embed(windows [][]int32, out [][]float32) error
	Dim() int
}

// BatcherOptions bound the forward passes the Batcher forms. Zero fields take the defaults.
type BatcherOptions struct {
	TokenBudget int           // max padded tokens per forward pass (B*Lmax), default gnbatch.For(provider)
	MaxBatch    int           // max windows per pass, default gnbatch.For(provider)
	MaxWait     time.Duration // a partial batch is run this long after its oldest request (default 20ms)
	QueueSize   int           // windows queued or in a running pass before Submit blocks, default 4*MaxBatch
}

// withDefaults fills zero fields with the defaults of provider, the same ones the pipeline
// config gives keys left out.
func (o BatcherOptions) withDefaults(provider string) (BatcherOptions, error) {
	d := gnbatch.For(provider)
	if o.TokenBudget == 0 {
		o.TokenBudget = d.TokenBudget
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = d.MaxBatch
	}
	if o.MaxWait == 0 {
		o.MaxWait = 20 * time.Millisecond
	}
	if o.QueueSize == 0 {
		o.QueueSize = 4 * o.MaxBatch
	}
	switch {
	case o.TokenBudget < 0 || o.MaxBatch < 0 || o.MaxWait < 0 || o.QueueSize < 0:
		return o, fmt.Errorf("gn: batcher options must not be negative: %+v", o)
	case o.QueueSize < o.MaxBatch:
		// Fewer pending windows than a batch means batches could never fill by count.
		return o, fmt.Errorf("gn: batcher QueueSize %d < MaxBatch %d", o.QueueSize, o.MaxBatch)
	}
	return o, nil
}

// Request is one window to embed. Done is called exactly once, from the batcher goroutine,
// after Out has been filled (err == nil) or the pass failed.
type Request struct {
	Tokens []int32
	Out    []float32 // len Dim, filled
	Done   func(err error)
	// Cancelled, when set, is asked when the request's batch forms, on the batcher goroutine:
	// a non-nil error drops the request, Done is called with it and no pass runs for it
	// (nobody wants the window any more: a revoked partition, a cancelled query).
	Cancelled func() error
	// Lookup, when set, is asked when the request's batch forms, on the batcher goroutine,
	// before Done: true means it filled out itself (another process's copy of the window has
	// reached the cache meanwhile), and Done(nil) is called without a pass.
	Lookup func(out []float32) bool
}

// BatcherStats describe the batches run so far.
type BatcherStats struct {
	Batches      int64
	Windows      int64
	RealTokens   int64
	PaddedTokens int64   // B*Lmax summed over batches
	Failed       int64   // batches whose Embed returned an error
	Dropped      int64   // requests dropped when their batch formed (Request.Cancelled)
	LookedUp     int64   // requests their Lookup filled when their batch formed
	FillRatio    float64 // mean over batches of max(B/MaxBatch, B*Lmax/TokenBudget): 1 = every pass full
	PaddingRatio float64 // PaddedTokens/RealTokens: 1 = no padding
	FullBatches  int64   // cut because the next window would not fit
	TimedBatches int64   // partial, run after MaxWait
	CloseBatches int64   // partial, run while draining on Close
}

type pending struct {
	Request
	seq int64
	at  time.Time
}

// Batcher forms forward passes across documents: pending windows are kept sorted by length
// and cut, longest first, into batches within MaxBatch and TokenBudget, so windows of similar
// length share a pass and padding stays small. A batch that is full runs at once; the one
// partial batch left (the shortest windows, typically documents' tails) runs when its oldest
// window has waited MaxWait, or on Close. One goroutine, owned by the Batcher, runs the passes.
type Batcher struct {
	m    Embedder
	opts BatcherOptions

	slots   chan struct{} // one token per pending window: Submit blocks when full
	wake    chan struct{} // cap 1: new work or Close
	closing chan struct{} // closed by Close: unblocks Submits waiting for a slot
	done    chan struct{} // closed when the loop has drained and exited
	once    sync.Once

	mu      sync.Mutex
	closed  bool
	queue   []*pending // sorted by length descending, then seq
	seq     int64
	stats   BatcherStats
	fillSum float64
}

// NewBatcher starts the batcher goroutine; Close stops it.
func NewBatcher(m Embedder, opts BatcherOptions) (*Batcher, error) {
	if m == nil {
		return nil, errors.New("gn: NewBatcher: nil Embedder")
	}
	if m.Dim() <= 0 {
		return nil, fmt.Errorf("gn: NewBatcher: embedder dimension %d", m.Dim())
	}
	provider := "cpu"
	if p, ok := m.(interface{ Provider() string }); ok {
		provider = p.Provider()
	}
	o, err := opts.withDefaults(provider)
	if err != nil {
		return nil, err
	}
	b := &Batcher{
		m:       m,
		opts:    o,
		slots:   make(chan struct{}, o.QueueSize),
		wake:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	go b.loop()
	return b, nil
}

// Options are the effective options, defaults filled in.
func (b *Batcher) Options() BatcherOptions { return b.opts }

// Submit queues r, blocking while QueueSize windows are pending; ctx bounds only that wait.
// If Submit returns an error, r.Done is never called.
func (b *Batcher) Submit(ctx context.Context, r Request) error {
	switch {
	case r.Done == nil:
		return errors.New("gn: Submit: nil Done")
	case len(r.Tokens) == 0:
		return errors.New("gn: Submit: empty window")
	case len(r.Tokens) > b.opts.TokenBudget:
		return fmt.Errorf("gn: Submit: window of %d tokens exceeds TokenBudget %d", len(r.Tokens), b.opts.TokenBudget)
	case len(r.Out) != b.m.Dim():
		return fmt.Errorf("gn: Submit: Out has length %d, want %d", len(r.Out), b.m.Dim())
	}
	select {
	case <-b.closing:
		return fmt.Errorf("gn: Submit: batcher %w", ErrClosed)
	default:
	}
	select {
	case b.slots <- struct{}{}:
	case <-b.closing:
		return fmt.Errorf("gn: Submit: batcher %w", ErrClosed)
	case <-ctx.Done():
		return ctx.Err()
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		<-b.slots
		return fmt.Errorf("gn: Submit: batcher %w", ErrClosed)
	}
	b.seq++
	p := &pending{Request: r, seq: b.seq, at: time.Now()}
	i, _ := slices.BinarySearchFunc(b.queue, p, byLengthDesc)
	b.queue = slices.Insert(b.queue, i, p)
	b.mu.Unlock()
	b.signal()
	return nil
}

func byLengthDesc(a, b *pending) int {
	if len(a.Tokens) != len(b.Tokens) {
		return len(b.Tokens) - len(a.Tokens)
	}
	return int(a.seq - b.seq)
}

func (b *Batcher) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Close stops accepting requests, runs every queued one, and returns when the batcher
// goroutine has exited. Safe to call more than once and concurrently.
func (b *Batcher) Close() error {
	b.shut()
	<-b.done
	return nil
}

func (b *Batcher) shut() {
	b.once.Do(func() {
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		close(b.closing)
		b.signal()
	})
}

// Abort is the hard stop: it stops accepting requests, fails every queued request with err
// (their Done is called) without running it, and returns once the pass already running, if
// any, has finished and the batcher goroutine has exited.
func (b *Batcher) Abort(err error) {
	b.shut()
	b.mu.Lock()
	dropped := b.queue
	b.queue = nil
	b.mu.Unlock()
	for _, p := range dropped {
		<-b.slots
		p.Done(err)
	}
	<-b.done
}

// Stats returns counters so far.
func (b *Batcher) Stats() BatcherStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	if s.Batches > 0 {
		s.FillRatio = b.fillSum / float64(s.Batches)
	}
	if s.RealTokens > 0 {
		s.PaddingRatio = float64(s.PaddedTokens) / float64(s.RealTokens)
	}
	return s
}

type cutReason int

const (
	cutFull cutReason = iota
	cutTimed
	cutClose
)

func (b *Batcher) loop() {
	defer close(b.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		b.mu.Lock()
		batch, reason, wait := b.next(time.Now())
		closed := b.closed
		empty := len(b.queue) == 0
		b.mu.Unlock()
		if batch != nil {
			b.run(batch, reason)
			continue
		}
		if closed && empty {
			return
		}
		var tc <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-b.wake:
		case <-tc:
		}
		timer.Stop()
	}
}

// next removes and returns the batch to run now, if any; otherwise it returns how long until
// the partial batch is due (0: nothing pending). Called with b.mu held.
func (b *Batcher) next(now time.Time) ([]*pending, cutReason, time.Duration) {
	q := b.queue
	if len(q) == 0 {
		return nil, 0, 0
	}
	// Greedy cuts from the longest window: every cut but the last is full (no further window
	// fits by count or budget); among full cuts the one holding the oldest window goes first.
	pick, pickSeq := -1, int64(0)
	var cuts [][2]int
	for start := 0; start < len(q); {
		end := start + 1
		for end < len(q) && end-start < b.opts.MaxBatch && (end-start+1)*len(q[start].Tokens) <= b.opts.TokenBudget {
			end++
		}
		cuts = append(cuts, [2]int{start, end})
		if n := end - start; n == b.opts.MaxBatch || (n+1)*len(q[start].Tokens) > b.opts.TokenBudget {
			oldest := q[start].seq
			for _, p := range q[start:end] {
				oldest = min(oldest, p.seq)
			}
			if pick < 0 || oldest < pickSeq {
				pick, pickSeq = len(cuts)-1, oldest
			}
		}
		start = end
	}
	reason := cutFull
	if pick < 0 {
		last := cuts[len(cuts)-1]
		oldest := q[last[0]].at
		for _, p := range q[last[0]:last[1]] {
			if p.at.Before(oldest) {
				oldest = p.at
			}
		}
		switch due := oldest.Add(b.opts.MaxWait).Sub(now); {
		case b.closed:
			reason = cutClose
		case due <= 0:
			reason = cutTimed
		default:
			return nil, 0, due
		}
		pick = len(cuts) - 1
	}
	c := cuts[pick]
	batch := slices.Clone(q[c[0]:c[1]])
	b.queue = slices.Delete(q, c[0], c[1])
	return batch, reason, 0
}

// settle answers, without a pass, the requests of a batch that no longer need one: dropped
// (Cancelled) or filled by their Lookup. It returns the rest.
func (b *Batcher) settle(batch []*pending) []*pending {
	keep := batch[:0]
	var settled []*pending
	var errs []error
	var dropped, looked int64
	for _, p := range batch {
		var cancelled error
		if p.Cancelled != nil {
			cancelled = p.Cancelled()
		}
		switch {
		case cancelled != nil:
			settled, errs = append(settled, p), append(errs, fmt.Errorf("gn: window dropped before its pass: %w", cancelled))
			dropped++
		case p.Lookup != nil && p.Lookup(p.Out):
			settled, errs = append(settled, p), append(errs, nil)
			looked++
		default:
			keep = append(keep, p)
		}
	}
	if len(settled) == 0 {
		return keep
	}
	for range settled {
		<-b.slots
	}
	b.mu.Lock()
	b.stats.Dropped += dropped
	b.stats.LookedUp += looked
	b.mu.Unlock()
	for i, p := range settled {
		p.Done(errs[i])
	}
	return keep
}

// run embeds one batch and reports to every request. Slots are freed before Done so a
// Done callback that submits again cannot deadlock on a full queue.
func (b *Batcher) run(batch []*pending, reason cutReason) {
	if batch = b.settle(batch); len(batch) == 0 {
		return
	}
	windows := make([][]int32, len(batch))
	outs := make([][]float32, len(batch))
	real := 0
	for i, p := range batch {
		windows[i], outs[i] = p.Tokens, p.Out
		real += len(p.Tokens)
	}
	lmax := len(batch[0].Tokens) // the queue is sorted longest first
	err := b.m.Embed(windows, outs)
	for range batch {
		<-b.slots
	}

	b.mu.Lock()
	s := &b.stats
	s.Batches++
	s.Windows += int64(len(batch))
	s.RealTokens += int64(real)
	s.PaddedTokens += int64(len(batch) * lmax)
	if err != nil {
		s.Failed++
	}
	switch reason {
	case cutFull:
		s.FullBatches++
	case cutTimed:
		s.TimedBatches++
	case cutClose:
		s.CloseBatches++
	}
	b.fillSum += max(float64(len(batch))/float64(b.opts.MaxBatch), float64(len(batch)*lmax)/float64(b.opts.TokenBudget))
	b.mu.Unlock()

	if err != nil {
		err = fmt.Errorf("gn: batch of %d windows (longest %d): %w", len(batch), lmax, err)
	}
	for _, p := range batch {
		p.Done(err)
	}
}
