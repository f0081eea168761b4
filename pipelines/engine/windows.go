package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// GN runs forward passes: stages/gn.Batcher, or a fake in tests. Submit queues one window,
// blocking while the queue is full or until ctx ends; the request's Done is called exactly once
// after Out holds the window's L2-normalised embedding or with the error (see gn.Request for
// Cancelled and Lookup, which the batcher honours when it forms the window's batch). Abort is
// the hard stop: the queued requests fail with err, and Submit fails afterwards.
type GN interface {
	Submit(ctx context.Context, r gn.Request) error
	Abort(err error)
}

// Windows is the one "embed these windows" step, for the runner (and so every distributed
// worker) and the query side alike. For each window of a job it
//
//  1. looks the window's key up in the cache: a hit costs nothing more;
//  2. on a miss, joins the identical window already in flight in this process, if any (its
//     vector is shared when it lands), or leads a new flight and submits the window to the GN;
//  3. in a cache other processes fill too (Shared: a distributed worker's replica), asks the
//     cache again when the window's GN batch forms (gn.Request.Lookup): another worker's copy
//     of the window may have arrived while it queued, and then it is not embedded;
//  4. adds what the GN embedded to the cache as soon as the pass lands (unless NoStore), so
//     the row is there for every later lookup, durable at the next commit, whatever becomes of
//     the document that asked for it.
//
// A job whose Lease ends (its partition was revoked, its request was cancelled) submits no
// more windows, and those it has queued for the GN are dropped when their batch forms unless
// another job waits for the same window. Counts go to the Counters given, the same way in every
// mode.
type Windows struct {
	cache   WindowCache // nil: no cache, every window goes to the GN
	gn      GN
	dim     int
	shared  bool
	c       *Counters
	log     *slog.Logger
	noStore bool
	flights flights
}

// WindowCache is what the embed step asks of a cache: a Cache, or the query side's store (the
// corpus cache read beside its writer, and a bounded cache of the query windows of its own).
type WindowCache interface {
	Get(key uint64, dst []float32) (bool, error)
	Add(r shardcache.Row) (added bool, err error)
}

// WindowsOptions configure the embed step.
type WindowsOptions struct {
	Cache WindowCache
	GN    GN
	Dim   int // the GN's dimension
	// NoStore keeps what the GN embeds out of the cache (a service's queries: client data is
	// not corpus data).
	NoStore bool
	// Shared says other processes fill the cache too (a distributed worker's replica of the
	// cluster's store): only then is a window looked up again when its GN batch forms. In a
	// cache this process alone writes, every window it embeds is on a flight or in the cache
	// from its first miss on, so that second lookup could never find anything.
	Shared   bool
	Counters *Counters
	Logger   *slog.Logger
}

// NewWindows makes the embed step.
func NewWindows(o WindowsOptions) (*Windows, error) {
	if o.GN == nil || o.Dim <= 0 {
		return nil, errors.New("engine: the embed step needs the GN and its dimension")
	}
	if o.Counters == nil {
		o.Counters = &Counters{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Windows{cache: o.Cache, gn: o.GN, dim: o.Dim, c: o.Counters, log: o.Logger, noStore: o.NoStore, shared: o.Shared, flights: flights{m: map[uint64]*flight{}}}, nil
}

// Job is one document's windows on their way through the embed step.
type Job struct {
	DocID   string    // names the document in messages and on its cache rows
	Windows [][]int32 // the windows' token ids ([CLS] … [SEP])
	Keys    []uint64  // their cache keys (chunk.Key)
	// Lease, when set, ends when the job stops being worth finishing: its windows still queued
	// for the GN are dropped and the job ends Revoked.
	Lease context.Context

	// Emb holds the windows' embeddings once the job is done without an error.
	Emb [][]float32
	// What this job's windows cost: found in the cache (at lookup or when their batch formed),
	// embedded by the GN; the rest shared an identical window in flight.
	Hits, GNWindows atomic.Int64

	pending atomic.Int32
	mu      sync.Mutex
	err     error
	stage   string
	fatal   bool
	revoked bool
}

// Err is why the job failed: nil when every window has its embedding. Stage names the step
// ("cache", "gn", "stop"), Fatal says the failure is not the document's (the cache could not
// store a row: the run must end), Revoked that the job's lease ended.
func (j *Job) Err() (err error, stage string, fatal, revoked bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err, j.stage, j.fatal, j.revoked
}

func (j *Job) fail(stage string, err error, fatal bool) {
	j.mu.Lock()
	if j.err == nil {
		j.err, j.stage, j.fatal = err, stage, fatal
		j.revoked = j.Lease != nil && j.Lease.Err() != nil && !fatal
	}
	j.mu.Unlock()
}

func (j *Job) leaseEnded() bool { return j.Lease != nil && j.Lease.Err() != nil }

// ErrStopped is what a job's windows fail with at the hard stop (Abort): not the document's
// fault, so it is abandoned and read again, never dead-lettered.
var ErrStopped = errors.New("hard stop: drain deadline passed")

// Embed fills j.Emb, calling done exactly once, from any goroutine, when every window has its
// embedding or the job failed (j.Err). ctx is the hard stop: once it ends, whatever the GN
// still holds fails with its cause and the job ends stage "stop". Submit waits for queue space
// under ctx alone: a window of a job whose lease ended meanwhile is queued and then dropped
// when its batch forms, unless another job still waits for the same window.
func (w *Windows) Embed(ctx context.Context, j *Job, done func(*Job)) {
	n, dim := len(j.Windows), w.dim
	j.Emb = make([][]float32, n)
	buf := make([]float32, n*dim)
	w.c.Windows.Add(int64(n))
	j.pending.Store(1) // held until every miss is submitted
	finish := func() {
		if j.pending.Add(-1) == 0 {
			done(j)
		}
	}
	for i := range j.Windows {
		j.Emb[i] = buf[i*dim : (i+1)*dim : (i+1)*dim]
		if j.leaseEnded() {
			j.fail("lease", context.Cause(j.Lease), false)
			break
		}
		if hit, err := w.lookup(j, i); err != nil {
			j.fail("cache", fmt.Errorf("cache lookup of window %d: %w", i, err), false)
			break
		} else if hit {
			j.Hits.Add(1)
			w.c.CacheHits.Add(1)
			w.c.WindowsDone.Add(1)
			continue
		}
		j.pending.Add(1)
		if err := w.miss(ctx, j, i, finish); err != nil {
			j.pending.Add(-1)
			break
		}
	}
	finish()
}

// EmbedWait is Embed for a caller that waits (the query side): it returns once the job is
// done. When ctx ends first, the job's windows still queued for the GN are dropped (unless
// another query waits for the same window) and ctx's error is returned.
func (w *Windows) EmbedWait(ctx context.Context, j *Job) error {
	if j.Lease == nil {
		j.Lease = ctx
	}
	ch := make(chan struct{})
	w.Embed(context.WithoutCancel(ctx), j, func(*Job) { close(ch) })
	<-ch // every window is done or dropped: nothing writes into j.Emb any more
	err, _, _, revoked := j.Err()
	if revoked {
		return ctx.Err()
	}
	return err
}

// lookup asks the cache for window i of j. A damaged stored row is not the document's fault:
// it is embedded again, and the landing Add replaces the row, so the cache heals as it is used.
func (w *Windows) lookup(j *Job, i int) (bool, error) {
	if w.cache == nil {
		return false, nil
	}
	hit, err := w.cache.Get(j.Keys[i], j.Emb[i])
	if errors.Is(err, shardcache.ErrCorrupt) {
		w.c.CacheCorrupt.Add(1)
		w.log.Warn("cached window is damaged; embedding it again", "doc", j.DocID, "window", i, "err", err)
		return false, nil
	}
	return hit, err
}

// miss puts window i of j on an identical window's flight or leads a new one. finish is
// called once the window is done (or failed); an error means it was not submitted and finish
// will not be called for it.
func (w *Windows) miss(ctx context.Context, j *Job, i int, finish func()) error {
	key := j.Keys[i]
	fl, lead := w.flights.join(key, j, i, func(err error) {
		if err == nil {
			w.c.GNShared.Add(1)
			w.c.WindowsDone.Add(1)
		} else if j.leaseEnded() {
			j.fail("lease", context.Cause(j.Lease), false)
		} else {
			w.failGN(ctx, j, fmt.Errorf("GN on window %d (an identical window in flight): %w", i, err))
		}
		finish()
	})
	if !lead {
		return nil
	}
	var late bool
	req := gn.Request{Tokens: j.Windows[i], Out: j.Emb[i],
		// Dropped only when nobody wants the window any more: the job that leads the flight
		// and every job waiting on it have lost their lease.
		Cancelled: func() error { return w.flights.unwanted(key, fl) },
		Done:      func(err error) { w.land(ctx, j, i, fl, late, err, finish) },
	}
	if w.shared && w.cache != nil {
		req.Lookup = func(out []float32) bool {
			hit, err := w.cache.Get(key, out)
			late = hit && err == nil
			return late
		}
	}
	if err := w.gn.Submit(ctx, req); err != nil {
		err = fmt.Errorf("submitting window %d: %w", i, err)
		w.flights.land(key, fl, err)
		w.failGN(ctx, j, err)
		return err
	}
	return nil
}

// land ends window i's GN pass (or its late cache hit, or its drop). The row goes into the
// cache and the flight's waiters get the vector even when the leading job itself is no
// longer wanted: the window is.
func (w *Windows) land(ctx context.Context, j *Job, i int, fl *flight, late bool, err error, finish func()) {
	key := j.Keys[i]
	switch {
	case err == nil && late:
		j.Hits.Add(1)
		w.c.CacheHits.Add(1)
		w.c.CacheLate.Add(1)
		w.c.WindowsDone.Add(1)
	case err == nil:
		j.GNWindows.Add(1)
		w.c.GNWindows.Add(1)
		w.c.WindowsDone.Add(1)
		if w.cache != nil && !w.noStore {
			// Before the flight closes, so a window looked up from now on finds the row.
			added, aerr := w.cache.Add(shardcache.Row{Key: key, DocID: j.DocID, ChunkIndex: int32(i), NTokens: int32(len(j.Windows[i])), Embedding: j.Emb[i]})
			if aerr != nil {
				err = fmt.Errorf("chunk cache add (%s window %d): %w", j.DocID, i, aerr)
				j.fail("cache", err, true)
			} else if added {
				w.c.ChunkRowsNew.Add(1)
			}
		}
	case j.leaseEnded():
		w.c.GNDropped.Add(1)
	default:
		w.failGN(ctx, j, fmt.Errorf("GN on window %d: %w", i, err))
	}
	if j.leaseEnded() {
		j.fail("lease", context.Cause(j.Lease), false)
	}
	w.flights.land(key, fl, err)
	finish()
}

// failGN records a GN failure. After the hard stop (ctx done) the GN fails whatever it still
// holds, in whatever words its implementation uses ("batcher closed"); that is the stop, not
// the document, so the document is abandoned (read again next run), never dead-lettered.
func (w *Windows) failGN(ctx context.Context, j *Job, err error) {
	if ctx.Err() != nil {
		j.fail("stop", fmt.Errorf("%w (%v)", context.Cause(ctx), err), false)
		return
	}
	j.fail("gn", err, false)
}

// flights coalesces identical windows in flight: the first window to miss the cache on a key
// leads the flight (it is submitted to the GN); any other window with the same key that misses
// while the flight is open waits for that vector instead of being embedded again. Patent
// continuations repeat whole descriptions, so two documents in flight often share many
// windows. A flight closes when its pass lands, after the row went into the cache, so a window
// is either in flight or in the cache from its first miss on; the map holds only keys in
// flight, never the corpus. A flight is dropped before its pass only when no job on it is
// wanted any more.
//
// The key is the cache key (chunk.Key: GN fingerprint, K, S and the window's ids), so equal keys
// mean equal GN input, the same premise the cache's one-key-one-vector rule rests on.
type flights struct {
	mu sync.Mutex
	m  map[uint64]*flight
}

type flight struct {
	leader  *Job
	out     []float32 // the leader's embedding
	waiters []flightWaiter
}

type flightWaiter struct {
	job  *Job
	out  []float32
	done func(error)
}

// join is called for window i of j, which missed the cache. lead true: no identical window is
// in flight, this one leads a new flight and must be submitted, and land called once. lead
// false: done is called exactly once, after the window's embedding is filled in or with the
// leader's error.
func (f *flights) join(key uint64, j *Job, i int, done func(error)) (fl *flight, lead bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl, ok := f.m[key]
	if !ok {
		fl = &flight{leader: j, out: j.Emb[i]}
		f.m[key] = fl
		return fl, true
	}
	fl.waiters = append(fl.waiters, flightWaiter{job: j, out: j.Emb[i], done: done})
	return fl, false
}

// unwanted is nil while some job on flight fl still wants the window, else why not; an
// unwanted flight is closed to new waiters at once (a job that misses the key from now on
// leads a flight of its own), so none joins a flight that is being dropped.
func (f *flights) unwanted(key uint64, fl *flight) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !fl.leader.leaseEnded() {
		return nil
	}
	for _, w := range fl.waiters {
		if !w.job.leaseEnded() {
			return nil
		}
	}
	if f.m[key] == fl {
		delete(f.m, key)
	}
	return context.Cause(fl.leader.Lease)
}

// land closes flight fl of key: its waiters get the vector (err nil) or err.
func (f *flights) land(key uint64, fl *flight, err error) {
	f.mu.Lock()
	if f.m[key] == fl {
		delete(f.m, key)
	}
	waiters := fl.waiters
	fl.waiters = nil
	f.mu.Unlock()
	for _, w := range waiters {
		if err == nil {
			copy(w.out, fl.out)
		}
		w.done(err)
	}
}

// Open is the number of flights: bounded by the windows of documents in flight, 0 when the
// runner is idle.
func (w *Windows) Open() int {
	w.flights.mu.Lock()
	defer w.flights.mu.Unlock()
	return len(w.flights.m)
}
