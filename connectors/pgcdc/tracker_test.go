package pgcdc

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

// The flushed position passes a mark only once every document before it is acked, whatever
// order the acks come in.
func TestTracker(t *testing.T) {
	type step struct {
		take     int           // documents numbered
		mark     pglogrepl.LSN // then a mark at this position (0: none)
		snapshot bool          // the mark ends the snapshot
		ack      []uint64      // then these acks
		want     pglogrepl.LSN // then advance gives this position
		wantSnap bool          // and this snapshot state
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"in order", []step{
			{take: 2, mark: 100, ack: []uint64{0}, want: 0},
			{ack: []uint64{1}, want: 100},
		}},
		{"out of order, a gap holds the position", []step{
			{take: 1, mark: 100},
			{take: 1, mark: 200},
			{take: 1, mark: 300, ack: []uint64{2, 1}, want: 0},
			{ack: []uint64{0}, want: 300},
		}},
		{"the prefix passes the marks it covers only", []step{
			{take: 1, mark: 100},
			{take: 1, mark: 200},
			{take: 1, mark: 300, ack: []uint64{0, 2}, want: 100},
			{ack: []uint64{1}, want: 300},
		}},
		{"marks with nothing between coalesce to the furthest", []step{
			{take: 1, mark: 100},
			{mark: 150},
			{mark: 120, ack: []uint64{0}, want: 150},
		}},
		{"a mark before any document passes at once", []step{
			{mark: 50, want: 50},
		}},
		{"the snapshot is done when its rows are", []step{
			{take: 3, mark: 10, snapshot: true, ack: []uint64{0, 2}, want: 0},
			{take: 1, mark: 90, ack: []uint64{1}, want: 10, wantSnap: true},
			{ack: []uint64{3}, want: 90, wantSnap: true},
		}},
		{"an empty snapshot is done at once", []step{
			{mark: 10, snapshot: true, want: 10, wantSnap: true},
		}},
		{"a repeated ack is harmless", []step{
			{take: 2, mark: 70, ack: []uint64{0, 0, 1, 1}, want: 70},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracker()
			for i, s := range c.steps {
				for j := 0; j < s.take; j++ {
					tr.take()
				}
				if s.mark != 0 {
					tr.mark(s.mark, s.snapshot)
				}
				for _, a := range s.ack {
					tr.ack(a)
				}
				pos, snap := tr.advance()
				if pos != s.want || snap != s.wantSnap {
					t.Fatalf("step %d: position %s snapshot done %v, want %s %v", i, pos, snap, s.want, s.wantSnap)
				}
			}
		})
	}
}
