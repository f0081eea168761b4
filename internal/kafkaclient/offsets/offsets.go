// Package offsets is the consumer-group offset accounting of the Kafka consumer: per-partition
// done-watermarks and consumer-group generations. It decides which offset a consumer may commit
// for each partition (the first record that is not done), and ignores acks, records and commits
// that belong to a generation that was revoked by a rebalance.
//
// It does no I/O: the consumer (internal/kafkaclient) reads the partitions, calls the broker to
// commit, and reports to a Tracker what it read, handed out, got acked and committed.
package offsets

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/reignpipe/reignpipe/internal/kafkaclient/fragment"
)

// Watermark tracks which records of one partition are done, to find the offset a consumer
// may commit: the first record that is not done. A record is done when the delivery it belongs
// to is acked, or at once when it belongs to no delivery (an abandoned fragment sequence, an
// offset the log does not hold because of compaction or transaction markers).
//
// Records are accounted in offset order: Deliver hands out [first, last] as outstanding,
// Advance marks everything before an offset done unless outstanding. The records of a fragment
// sequence still being assembled are simply not accounted yet, so they hold the watermark back.
//
// A Watermark has no lock of its own: inside a Partition it is guarded by the Tracker's lock.
type Watermark struct {
	next  int64  // every offset below next is done or in spans
	spans []span // outstanding deliveries in offset order; the head is never acked
}

type span struct {
	first, last int64
	acked       bool
}

// NewWatermark returns a watermark with nothing outstanding whose records below start are done.
func NewWatermark(start int64) Watermark { return Watermark{next: start} }

// Advance marks the offsets below to, other than outstanding deliveries, done.
func (w *Watermark) Advance(to int64) {
	if to > w.next {
		w.next = to
	}
}

// Deliver records that [first, last] was handed out. It reports false, changing nothing, if
// the range overlaps what is already accounted (offsets must only grow).
func (w *Watermark) Deliver(first, last int64) bool {
	if first < w.next || last < first {
		return false
	}
	w.spans = append(w.spans, span{first: first, last: last})
	w.next = last + 1
	return true
}

// Ack marks the delivery [first, last] done. It reports false for a range that was never
// handed out or was acked already, which leaves the watermark as it was.
func (w *Watermark) Ack(first, last int64) bool {
	i := sort.Search(len(w.spans), func(i int) bool { return w.spans[i].first >= first })
	if i == len(w.spans) || w.spans[i].first != first || w.spans[i].last != last || w.spans[i].acked {
		return false
	}
	w.spans[i].acked = true
	for len(w.spans) > 0 && w.spans[0].acked {
		w.spans = w.spans[1:]
	}
	if len(w.spans) == 0 {
		w.spans = nil
	}
	return true
}

// Committable is the offset after the longest prefix of done records.
func (w *Watermark) Committable() int64 {
	if len(w.spans) > 0 {
		return w.spans[0].first
	}
	return w.next
}

// Outstanding is the number of deliveries handed out that hold the watermark back: the
// unacked ones and those acked after them.
func (w *Watermark) Outstanding() int { return len(w.spans) }

// TopicPartition names one partition of a topic (kafkaclient.TP outside).
type TopicPartition struct {
	Topic     string
	Partition int
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// Generation is one consumer-group generation as this member saw it: the partitions assigned
// and their watermarks. When it ends, everything in it is stale: acks are ignored and its
// buffered deliveries dropped, since the next owner of each partition re-reads from the last
// commit.
//
// Tracker.Begin makes it; ID, Commit and Parts are set there and never change, so they are
// read without a lock.
type Generation struct {
	// ID is the group generation id the broker assigned.
	ID int32
	// Commit commits offsets in this generation (on its coordinator connection). The Tracker
	// never calls it: the consumer does, between Tracker.Pending and Tracker.Done.
	Commit func(map[string]map[int]int64) error
	// Parts are the partitions assigned in this generation.
	Parts   map[TopicPartition]*Partition
	ended   bool           // guarded by the Tracker's lock
	commits sync.WaitGroup // commits in flight on this generation's coordinator connection
}

// Partition is one assigned partition (of one Generation). Gen and TP are set by
// Tracker.Begin and never change. The watermark, whether the partition started and its last
// committed offset are unexported and guarded by the Tracker's lock; Fetched and High are
// written by the partition's reader goroutine and read by Tracker.Lag, without the lock.
type Partition struct {
	// Gen is the generation the partition was assigned in.
	Gen *Generation
	// TP names the partition.
	TP        TopicPartition
	started   bool
	wm        Watermark
	committed int64 // last offset committed for the group, -1 when unknown
	// Fetched is the next offset the reader will fetch, -1 until its first record.
	Fetched atomic.Int64
	// High is the partition's high watermark as of the reader's last fetch, -1 until then.
	High atomic.Int64
}

// Tracker owns the current generation. Its lock is the one lock over all watermarks: acks
// come from any goroutine, records from one reader per partition, commits from the owner.
// The zero Tracker has no generation and is ready to use; it must not be copied after use.
type Tracker struct {
	mu  sync.Mutex
	cur *Generation
}

// Begin makes a new current generation from its assignments (partition to committed offset,
// negative when the group has none); the previous one, if any, becomes stale. The group loop
// calls it when it joins a generation; commit becomes the generation's Commit.
func (t *Tracker) Begin(id int32, assigned map[TopicPartition]int64, commit func(map[string]map[int]int64) error) *Generation {
	g := &Generation{ID: id, Commit: commit, Parts: make(map[TopicPartition]*Partition, len(assigned))}
	for tp, off := range assigned {
		p := &Partition{Gen: g, TP: tp, committed: max(off, -1)}
		p.Fetched.Store(-1)
		p.High.Store(-1)
		g.Parts[tp] = p
	}
	t.mu.Lock()
	if t.cur != nil {
		t.cur.ended = true
	}
	t.cur = g
	t.mu.Unlock()
	return g
}

// End marks g stale and waits for commits already in flight on it, so that the generation's
// connection outlives them. It is called when the generation's context ends.
func (t *Tracker) End(g *Generation) {
	t.mu.Lock()
	g.ended = true
	t.mu.Unlock()
	g.commits.Wait()
}

// live reports whether g is the current, unended generation; t.mu must be held.
func (t *Tracker) live(g *Generation) bool { return g != nil && t.cur == g && !g.ended }

// Start sets the offset a partition is read from once it is known. The partition's reader
// calls it before its first Record; it reports false when the generation has ended.
func (t *Tracker) Start(p *Partition, offset int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.live(p.Gen) {
		return false
	}
	p.wm, p.started = NewWatermark(offset), true
	return true
}

// Record accounts one record read at offset: d is the delivery it completed (if ok), and
// pending the first offset still held by an unfinished fragment sequence (-1 for none). It
// reports false when the generation has ended, so the delivery must not be handed out. Only
// the partition's reader calls it, in offset order.
func (t *Tracker) Record(p *Partition, offset int64, d fragment.Message, ok bool, pending int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.live(p.Gen) || !p.started {
		return false
	}
	if ok {
		p.wm.Deliver(d.First, d.Last)
	}
	if pending >= 0 {
		p.wm.Advance(pending)
	} else {
		p.wm.Advance(offset + 1)
	}
	return true
}

// Current reports whether p's generation is still the live one.
func (t *Tracker) Current(p *Partition) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return p != nil && t.live(p.Gen)
}

// Ack marks [first, last] of p done; it reports false for a stale or unknown delivery. It may
// be called from any goroutine.
func (t *Tracker) Ack(p *Partition, first, last int64) bool {
	if p == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.live(p.Gen) || !p.started {
		return false
	}
	return p.wm.Ack(first, last)
}

// Pending returns the live generation and the offsets of its partitions whose committable
// offset moved past the last commit. A non-nil generation has a commit registered on it: the
// caller must call Done.
func (t *Tracker) Pending() (*Generation, map[string]map[int]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.cur
	if !t.live(g) {
		return nil, nil
	}
	var out map[string]map[int]int64
	for tp, p := range g.Parts {
		if !p.started {
			continue
		}
		if off := p.wm.Committable(); off > p.committed {
			if out == nil {
				out = make(map[string]map[int]int64)
			}
			if out[tp.Topic] == nil {
				out[tp.Topic] = make(map[int]int64)
			}
			out[tp.Topic][tp.Partition] = off
		}
	}
	if out == nil {
		return nil, nil
	}
	g.commits.Add(1)
	return g, out
}

// Done ends a commit registered by Pending; committed says whether the broker took offsets.
func (t *Tracker) Done(g *Generation, offsets map[string]map[int]int64, committed bool) {
	if committed {
		t.mu.Lock()
		for topic, parts := range offsets {
			for part, off := range parts {
				if p := g.Parts[TopicPartition{topic, part}]; p != nil && off > p.committed {
					p.committed = off
				}
			}
		}
		t.mu.Unlock()
	}
	g.commits.Done()
}

// Assignment lists the live generation's partitions by topic, sorted; nil when no generation
// is live.
func (t *Tracker) Assignment() map[string][]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.live(t.cur) {
		return nil
	}
	out := make(map[string][]int)
	for tp := range t.cur.Parts {
		out[tp.Topic] = append(out[tp.Topic], tp.Partition)
	}
	for _, ps := range out {
		sort.Ints(ps)
	}
	return out
}

// Lag sums high watermark minus next fetch offset over the current generation's partitions,
// from their Fetched and High (read without the lock, so it is for metrics only).
func (t *Tracker) Lag() int64 {
	t.mu.Lock()
	g := t.cur
	t.mu.Unlock()
	if g == nil {
		return 0
	}
	var sum int64
	for _, p := range g.Parts {
		if h, f := p.High.Load(), p.Fetched.Load(); h >= 0 && f >= 0 && h > f {
			sum += h - f
		}
	}
	return sum
}
