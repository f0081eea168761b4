package runner

import (
	"sync"
)

// flights coalesces identical windows in flight: the first document to miss the cache on a key
// submits the window to the GN (it leads the flight); any other window with the same key that
// misses while the flight is open waits for that vector instead of being embedded again.
// Patent continuations repeat whole descriptions, so two documents in flight often share many
// windows, and without this both miss the cache (the rows reach it only when the writer adds
// them) and both are embedded.
//
// A flight that succeeds stays open until the writer has handled its leading document (its
// rows are in the cache then, or that document failed and a waiter's own Add stores them), so
// the gap between the GN pass and the writer's Add is covered too. A flight that fails closes at
// once: its waiters get the error (a hard stop abandons them with the leader), and a later
// window starts afresh. So the map holds only keys of documents in flight, never the corpus.
//
// The key is the cache key (chunk.Key: GN fingerprint, K, S and the window's ids), so equal keys
// mean equal GN input, the same premise the cache's one-key-one-vector rule rests on.
type flights struct {
	mu sync.Mutex
	m  map[uint64]*flight
}

type flight struct {
	leader  *item
	out     []float32 // the leader's embedding; immutable once landed
	landed  bool      // out is filled (flights that failed are removed instead)
	waiters []waiter
}

type waiter struct {
	out  []float32
	done func(error)
}

func newFlights() *flights { return &flights{m: map[uint64]*flight{}} }

// join is called for a window of it that missed the cache. lead true: no identical window is in
// flight, it leads a new one and must submit the window, then call land exactly once. lead
// false: the window shares a flight; done is called exactly once, after out is filled or with
// the leader's error -- at once (from this goroutine) if the flight has already landed.
func (f *flights) join(key uint64, it *item, out []float32, done func(error)) (lead bool) {
	f.mu.Lock()
	fl, ok := f.m[key]
	if !ok {
		f.m[key] = &flight{leader: it, out: out}
		f.mu.Unlock()
		return true
	}
	if fl.landed {
		src := fl.out
		f.mu.Unlock()
		copy(out, src)
		done(nil)
		return false
	}
	fl.waiters = append(fl.waiters, waiter{out: out, done: done})
	f.mu.Unlock()
	return false
}

// land ends the GN pass of key's flight: waiters get the vector (err nil) or err. A failed
// flight is removed so the next window with the key is embedded afresh.
func (f *flights) land(key uint64, err error) {
	f.mu.Lock()
	fl := f.m[key]
	if fl == nil { // cannot happen: only the leader lands, once
		f.mu.Unlock()
		return
	}
	ws := fl.waiters
	fl.waiters = nil
	if err != nil {
		delete(f.m, key)
	} else {
		fl.landed = true
	}
	f.mu.Unlock()
	for _, w := range ws {
		if err == nil {
			copy(w.out, fl.out)
		}
		w.done(err)
	}
}

// release closes the landed flights it leads; the writer calls it once it is done with it.
func (f *flights) release(it *item) {
	if len(it.leads) == 0 {
		return
	}
	f.mu.Lock()
	for _, k := range it.leads {
		// A flight that failed may since have been started again by another document.
		if fl := f.m[k]; fl != nil && fl.leader == it && fl.landed {
			delete(f.m, k)
		}
	}
	f.mu.Unlock()
	it.leads = nil
}

// open is the number of flights, for tests: bounded by the windows of documents in flight.
func (f *flights) open() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}
