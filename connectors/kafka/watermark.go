package kafka

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/reignpipe/reignpipe/connectors/kafka/fragment"
)

// watermark tracks which records of one partition are done, to find the offset a consumer
// may commit: the first record that is not done. A record is done when the delivery it belongs
// to is acked, or at once when it belongs to no delivery (an abandoned fragment sequence, an
// offset the log does not hold because of compaction or transaction markers).
//
// Records are accounted in offset order: deliver hands out [first, last] as outstanding,
// advance marks everything before an offset done unless outstanding. The records of a fragment
// sequence still being assembled are simply not accounted yet, so they hold the watermark back.
type watermark struct {
	next  int64  // every offset below next is done or in spans
	spans []span // outstanding deliveries in offset order; the head is never acked
}

type span struct {
	first, last int64
	acked       bool
}

func newWatermark(start int64) watermark { return watermark{next: start} }

// advance marks the offsets below to, other than outstanding deliveries, done.
func (w *watermark) advance(to int64) {
	if to > w.next {
		w.next = to
	}
}

// deliver records that [first, last] was handed out. It reports false, changing nothing, if
// the range overlaps what is already accounted (offsets must only grow).
func (w *watermark) deliver(first, last int64) bool {
	if first < w.next || last < first {
		return false
	}
	w.spans = append(w.spans, span{first: first, last: last})
	w.next = last + 1
	return true
}

// ack marks the delivery [first, last] done. It reports false for a range that was never
// handed out or was acked already, which leaves the watermark as it was.
func (w *watermark) ack(first, last int64) bool {
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

// committable is the offset after the longest prefix of done records.
func (w *watermark) committable() int64 {
	if len(w.spans) > 0 {
		return w.spans[0].first
	}
	return w.next
}

func (w *watermark) outstanding() int { return len(w.spans) }

type topicPartition struct {
	topic     string
	partition int
}

// generation is one consumer-group generation as this member saw it: the partitions assigned
// and their watermarks. When it ends, everything in it is stale: acks are ignored and its
// buffered deliveries dropped, since the next owner of each partition re-reads from the last
// commit.
type generation struct {
	id      int32
	commit  func(map[string]map[int]int64) error // commits offsets in this generation
	parts   map[topicPartition]*partitionState
	ended   bool
	commits sync.WaitGroup // commits in flight on this generation's coordinator connection
}

// partitionState is one assigned partition. wm, started and committed are guarded by the
// tracker's lock; fetched and high are written by the partition's reader and read by Lag.
type partitionState struct {
	gen       *generation
	tp        topicPartition
	started   bool
	wm        watermark
	committed int64 // last offset committed for the group, -1 when unknown
	fetched   atomic.Int64
	high      atomic.Int64
}

// tracker owns the current generation. Its lock is the one lock over all watermarks: acks
// come from any goroutine, records from one reader per partition, commits from the owner.
type tracker struct {
	mu  sync.Mutex
	cur *generation
}

// begin makes a new current generation from its assignments (partition to committed offset,
// negative when the group has none); the previous one, if any, becomes stale.
func (t *tracker) begin(id int32, assigned map[topicPartition]int64, commit func(map[string]map[int]int64) error) *generation {
	g := &generation{id: id, commit: commit, parts: make(map[topicPartition]*partitionState, len(assigned))}
	for tp, off := range assigned {
		p := &partitionState{gen: g, tp: tp, committed: max(off, -1)}
		p.fetched.Store(-1)
		p.high.Store(-1)
		g.parts[tp] = p
	}
	t.mu.Lock()
	if t.cur != nil {
		t.cur.ended = true
	}
	t.cur = g
	t.mu.Unlock()
	return g
}

// end marks g stale and waits for commits already in flight on it, so that the generation's
// connection outlives them.
func (t *tracker) end(g *generation) {
	t.mu.Lock()
	g.ended = true
	t.mu.Unlock()
	g.commits.Wait()
}

func (t *tracker) live(g *generation) bool { return g != nil && t.cur == g && !g.ended }

// start sets the offset a partition is read from once it is known.
func (t *tracker) start(p *partitionState, offset int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.live(p.gen) {
		return false
	}
	p.wm, p.started = newWatermark(offset), true
	return true
}

// record accounts one record read at offset: d is the delivery it completed (if ok), and
// pending the first offset still held by an unfinished fragment sequence (-1 for none). It
// reports false when the generation has ended, so the delivery must not be handed out.
func (t *tracker) record(p *partitionState, offset int64, d fragment.Message, ok bool, pending int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.live(p.gen) || !p.started {
		return false
	}
	if ok {
		p.wm.deliver(d.First, d.Last)
	}
	if pending >= 0 {
		p.wm.advance(pending)
	} else {
		p.wm.advance(offset + 1)
	}
	return true
}

// current reports whether p's generation is still the live one.
func (t *tracker) current(p *partitionState) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return p != nil && t.live(p.gen)
}

// ack marks [first, last] of p done; it reports false for a stale or unknown delivery.
func (t *tracker) ack(p *partitionState, first, last int64) bool {
	if p == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.live(p.gen) || !p.started {
		return false
	}
	return p.wm.ack(first, last)
}

// pending returns the live generation and the offsets of its partitions whose committable
// offset moved past the last commit. A non-nil generation has a commit registered on it: the
// caller must call done.
func (t *tracker) pending() (*generation, map[string]map[int]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.cur
	if !t.live(g) {
		return nil, nil
	}
	var out map[string]map[int]int64
	for tp, p := range g.parts {
		if !p.started {
			continue
		}
		if off := p.wm.committable(); off > p.committed {
			if out == nil {
				out = make(map[string]map[int]int64)
			}
			if out[tp.topic] == nil {
				out[tp.topic] = make(map[int]int64)
			}
			out[tp.topic][tp.partition] = off
		}
	}
	if out == nil {
		return nil, nil
	}
	g.commits.Add(1)
	return g, out
}

// done ends a commit registered by pending; committed says whether the broker took offsets.
func (t *tracker) done(g *generation, offsets map[string]map[int]int64, committed bool) {
	if committed {
		t.mu.Lock()
		for topic, parts := range offsets {
			for part, off := range parts {
				if p := g.parts[topicPartition{topic, part}]; p != nil && off > p.committed {
					p.committed = off
				}
			}
		}
		t.mu.Unlock()
	}
	g.commits.Done()
}

// assignment lists the live generation's partitions by topic, sorted.
func (t *tracker) assignment() map[string][]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.live(t.cur) {
		return nil
	}
	out := make(map[string][]int)
	for tp := range t.cur.parts {
		out[tp.topic] = append(out[tp.topic], tp.partition)
	}
	for _, ps := range out {
		sort.Ints(ps)
	}
	return out
}

// lag sums high watermark minus next fetch offset over the live generation's partitions.
func (t *tracker) lag() int64 {
	t.mu.Lock()
	g := t.cur
	t.mu.Unlock()
	if g == nil {
		return 0
	}
	var sum int64
	for _, p := range g.parts {
		if h, f := p.high.Load(), p.fetched.Load(); h >= 0 && f >= 0 && h > f {
			sum += h - f
		}
	}
	return sum
}
