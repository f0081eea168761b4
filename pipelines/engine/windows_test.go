package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// gatedModel is a GN model whose passes wait for the gate, counting the windows it embeds.
type gatedModel struct {
	gate     chan struct{}
	embedded atomic.Int64
}

func (m *gatedModel) Dim() int { return 2 }
func (m *gatedModel) Embed(windows [][]int32, out [][]float32) error {
	<-m.gate
	for i, w := range windows {
		out[i][0], out[i][1] = float32(w[1]), 1
	}
	m.embedded.Add(int64(len(windows)))
	return nil
}

// mapCache is an in-memory engine.Cache.
type mapCache struct {
	mu   sync.Mutex
	rows map[uint64]shardcache.Row
}

func newMapCache() *mapCache { return &mapCache{rows: map[uint64]shardcache.Row{}} }

func (c *mapCache) Get(key uint64, dst []float32) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.rows[key]
	if ok {
		copy(dst, r.Embedding)
	}
	return ok, nil
}
func (c *mapCache) Add(r shardcache.Row) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.rows[r.Key]; ok {
		return false, nil
	}
	r.Embedding = append([]float32(nil), r.Embedding...)
	c.rows[r.Key] = r
	return true, nil
}
func (c *mapCache) PutManifest(shardcache.Manifest) error   { return nil }
func (c *mapCache) DeleteManifest(schemas.Deletion) error   { return nil }
func (c *mapCache) Superseded(string, string) (bool, error) { return false, nil }
func (c *mapCache) Flush() error                            { return nil }

func newBatcher(t *testing.T, m gn.Embedder) *gn.Batcher {
	t.Helper()
	b, err := gn.NewBatcher(m, gn.BatcherOptions{TokenBudget: 64, MaxBatch: 4, MaxWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func job(id string, keys ...uint64) *Job {
	j := &Job{DocID: id}
	for _, k := range keys {
		j.Windows = append(j.Windows, []int32{101, int32(k), 102})
		j.Keys = append(j.Keys, k)
	}
	return j
}

func embedAll(t *testing.T, w *Windows, ctx context.Context, js ...*Job) <-chan *Job {
	t.Helper()
	out := make(chan *Job, len(js))
	for _, j := range js {
		w.Embed(ctx, j, func(j *Job) { out <- j })
	}
	return out
}

// A window the GN embeds goes into the cache as its pass lands, with the corpus's row shape
// (n_tokens = the window's length, its doc id and place), once however many copies asked.
func TestWindowsStoreOnLanding(t *testing.T) {
	m := &gatedModel{gate: make(chan struct{})}
	close(m.gate)
	cache := newMapCache()
	var c Counters
	w, err := NewWindows(WindowsOptions{Cache: cache, GN: newBatcher(t, m), Dim: 2, Counters: &c})
	if err != nil {
		t.Fatal(err)
	}
	done := embedAll(t, w, context.Background(), job("a", 1, 2, 1))
	j := <-done
	if err, _, _, _ := j.Err(); err != nil {
		t.Fatal(err)
	}
	if m.embedded.Load() != 2 || c.GNWindows.Load() != 2 || c.GNShared.Load() != 1 || c.ChunkRowsNew.Load() != 2 {
		t.Fatalf("embedded %d, gn %d shared %d rows %d", m.embedded.Load(), c.GNWindows.Load(), c.GNShared.Load(), c.ChunkRowsNew.Load())
	}
	if r := cache.rows[2]; r.DocID != "a" || r.ChunkIndex != 1 || r.NTokens != 3 || r.Embedding[0] != 2 {
		t.Fatalf("row %+v", r)
	}
	if j.Emb[2][0] != 1 || w.Open() != 0 {
		t.Fatalf("the shared window's vector %v; %d flights open", j.Emb[2], w.Open())
	}
}

// A window that reaches the cache while it waits for the GN (another worker's copy, applied
// by its replica) is not embedded: the batch it was queued in asks the cache again.
func TestWindowsLateHitAtBatch(t *testing.T) {
	m := &gatedModel{gate: make(chan struct{})}
	cache := newMapCache()
	var c Counters
	w, _ := NewWindows(WindowsOptions{Cache: cache, GN: newBatcher(t, m), Dim: 2, Counters: &c, Shared: true})
	first := embedAll(t, w, context.Background(), job("a", 1))
	waitFor(t, func() bool { return c.Windows.Load() == 1 })
	// The pass of window 1 is running (held by the gate); window 2 queues behind it.
	second := embedAll(t, w, context.Background(), job("b", 2))
	waitFor(t, func() bool { return c.Windows.Load() == 2 })
	cache.Add(shardcache.Row{Key: 2, Embedding: []float32{7, 7}}) // another worker's copy arrives
	close(m.gate)
	<-first
	j := <-second
	if err, _, _, _ := j.Err(); err != nil {
		t.Fatal(err)
	}
	if m.embedded.Load() != 1 || c.CacheLate.Load() != 1 || c.CacheHits.Load() != 1 || j.Emb[0][0] != 7 || j.Hits.Load() != 1 {
		t.Fatalf("embedded %d, late hits %d, hits %d, vector %v", m.embedded.Load(), c.CacheLate.Load(), c.CacheHits.Load(), j.Emb[0])
	}
}

// A job whose lease ends (its partition was revoked) ends revoked, and its windows still queued
// for the GN are dropped when their batch forms -- but not one that a job of another document
// waits for: that window is still wanted, so its pass runs and the waiter gets the vector.
func TestWindowsLeaseDropsAndWaitersGoOn(t *testing.T) {
	m := &gatedModel{gate: make(chan struct{})}
	var c Counters
	w, _ := NewWindows(WindowsOptions{Cache: newMapCache(), GN: newBatcher(t, m), Dim: 2, Counters: &c})
	hold := embedAll(t, w, context.Background(), job("x", 9)) // occupies the GN
	waitFor(t, func() bool { return c.Windows.Load() == 1 })
	lease, revoke := context.WithCancel(context.Background())
	revoked := job("a", 1, 2)
	revoked.Lease = lease
	done := embedAll(t, w, context.Background(), revoked)
	waiter := embedAll(t, w, context.Background(), job("b", 2))
	waitFor(t, func() bool { return c.Windows.Load() == 4 })
	revoke()
	close(m.gate)
	<-hold
	j := <-done
	if _, _, _, r := j.Err(); !r {
		t.Fatalf("job of a revoked lease: %v", j)
	}
	b := <-waiter
	if err, _, _, _ := b.Err(); err != nil || b.Emb[0][0] != 2 {
		t.Fatalf("the waiter: err %v vector %v", err, b.Emb)
	}
	if c.GNDropped.Load() != 1 || m.embedded.Load() != 2 || c.GNShared.Load() != 1 { // window 1 dropped; x and window 2 embedded, once
		t.Fatalf("dropped %d, embedded %d, shared %d", c.GNDropped.Load(), m.embedded.Load(), c.GNShared.Load())
	}
}

// A GN failure fails the job with stage gn; at the hard stop (ctx ended) it is the stop's.
func TestWindowsFailures(t *testing.T) {
	var c Counters
	failing := &failModel{}
	w, _ := NewWindows(WindowsOptions{GN: newBatcher(t, failing), Dim: 2, Counters: &c})
	j := <-embedAll(t, w, context.Background(), job("a", 1))
	if err, stage, fatal, _ := j.Err(); err == nil || stage != "gn" || fatal {
		t.Fatalf("err %v stage %q fatal %v", err, stage, fatal)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	j = <-embedAll(t, w, ctx, job("b", 2))
	if err, stage, _, _ := j.Err(); err == nil || stage != "stop" {
		t.Fatalf("after the hard stop: err %v stage %q", err, stage)
	}
}

type failModel struct{}

func (failModel) Dim() int                           { return 2 }
func (failModel) Embed([][]int32, [][]float32) error { return errors.New("forward pass failed") }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// A flight found unwanted is closed to new waiters at once: a job that misses the same key
// afterwards leads a flight of its own instead of receiving the drop.
func TestFlightDroppedIsClosedToNewWaiters(t *testing.T) {
	var f flights
	f.m = map[uint64]*flight{}
	gone, revoke := context.WithCancel(context.Background())
	revoke()
	leader := job("a", 7)
	leader.Lease = gone
	leader.Emb = [][]float32{make([]float32, 2)}
	fl, lead := f.join(7, leader, 0, nil)
	if !lead || f.unwanted(7, fl) == nil {
		t.Fatal("a flight whose only job lost its lease must be unwanted")
	}
	late := job("b", 7)
	late.Emb = [][]float32{make([]float32, 2)}
	if _, lead := f.join(7, late, 0, func(error) { t.Error("the new flight's leader got a waiter's callback") }); !lead {
		t.Fatal("a job missing the key after the drop must lead its own flight")
	}
	f.land(7, fl, errors.New("dropped")) // the old flight lands: the new one stays open
	if len(f.m) != 1 {
		t.Fatalf("%d flights open, want the new one", len(f.m))
	}
}
