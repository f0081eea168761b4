package pgcdc

import (
	"sync"

	"github.com/jackc/pglogrepl"
)

// tracker turns out-of-order acks into the position the server may forget the log before
// (invariant 4). Every document handed out has a sequence number, in read order; a mark says
// "once every document before seq is acked, pos is durable downstream": the end of a
// transaction after its last change, a keepalive's position between transactions, the end of
// the snapshot. The flushed position is the last mark the contiguous acked prefix has passed.
type tracker struct {
	mu      sync.Mutex
	next    uint64          // the next sequence number handed out
	done    uint64          // every document with seq < done is acked
	acked   map[uint64]bool // acked documents at or past done
	marks   []mark          // in seq order, not yet passed
	flushed pglogrepl.LSN   // the last passed mark's pos
	// snapshotDone: the snapshot's mark was passed (every snapshot row is durable).
	snapshotDone bool
}

type mark struct {
	seq      uint64
	pos      pglogrepl.LSN
	snapshot bool // the end of the snapshot
}

func newTracker() *tracker { return &tracker{acked: map[uint64]bool{}} }

// take numbers the next document.
func (t *tracker) take() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	return t.next - 1
}

// mark records that pos is durable once every document numbered so far is acked. Marks of
// the same seq coalesce: only the furthest position counts.
func (t *tracker) mark(pos pglogrepl.LSN, snapshot bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.marks); n > 0 && t.marks[n-1].seq == t.next && !t.marks[n-1].snapshot && !snapshot {
		t.marks[n-1].pos = max(t.marks[n-1].pos, pos)
		return
	}
	t.marks = append(t.marks, mark{seq: t.next, pos: pos, snapshot: snapshot})
}

// ack marks document seq acked.
func (t *tracker) ack(seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if seq < t.done {
		return
	}
	t.acked[seq] = true
	for t.acked[t.done] {
		delete(t.acked, t.done)
		t.done++
	}
}

// advance passes the marks the acked prefix covers and returns the flushed position and
// whether the snapshot is durable.
func (t *tracker) advance() (pglogrepl.LSN, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := 0
	for ; i < len(t.marks) && t.marks[i].seq <= t.done; i++ {
		m := t.marks[i]
		if m.snapshot {
			t.snapshotDone = true
		}
		t.flushed = max(t.flushed, m.pos)
	}
	t.marks = t.marks[i:]
	return t.flushed, t.snapshotDone
}
