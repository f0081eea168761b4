package offsets

import (
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkaclient/fragment"
)

// op is one step applied to a watermark: deliver [a, b], ack [a, b] or advance to a.
type op struct {
	kind string
	a, b int64
	ok   bool // what deliver/ack must report
}

func TestWatermark(t *testing.T) {
	cases := []struct {
		name  string
		start int64
		ops   []op
		want  int64
		out   int // outstanding deliveries at the end
	}{
		{name: "nothing read", start: 7, want: 7},
		{name: "handed out, not acked", start: 0, ops: []op{{kind: "deliver", a: 0, b: 0, ok: true}}, want: 0, out: 1},
		{name: "in order", start: 0, ops: []op{
			{kind: "deliver", a: 0, b: 0, ok: true}, {kind: "deliver", a: 1, b: 1, ok: true},
			{kind: "ack", a: 0, b: 0, ok: true}, {kind: "ack", a: 1, b: 1, ok: true},
		}, want: 2},
		{name: "out of order acks stop at the first unacked", start: 10, ops: []op{
			{kind: "deliver", a: 10, b: 10, ok: true}, {kind: "deliver", a: 11, b: 11, ok: true},
			{kind: "deliver", a: 12, b: 12, ok: true},
			{kind: "ack", a: 12, b: 12, ok: true}, {kind: "ack", a: 11, b: 11, ok: true},
		}, want: 10, out: 3},
		{name: "out of order acks complete", start: 10, ops: []op{
			{kind: "deliver", a: 10, b: 10, ok: true}, {kind: "deliver", a: 11, b: 11, ok: true},
			{kind: "deliver", a: 12, b: 12, ok: true},
			{kind: "ack", a: 12, b: 12, ok: true}, {kind: "ack", a: 11, b: 11, ok: true},
			{kind: "ack", a: 10, b: 10, ok: true},
		}, want: 13},
		{name: "multi-record deliveries", start: 0, ops: []op{
			{kind: "deliver", a: 0, b: 4, ok: true}, {kind: "deliver", a: 5, b: 9, ok: true},
			{kind: "ack", a: 5, b: 9, ok: true}, {kind: "ack", a: 0, b: 4, ok: true},
		}, want: 10},
		{name: "offset gaps count as done", start: 0, ops: []op{
			{kind: "deliver", a: 3, b: 3, ok: true}, {kind: "deliver", a: 8, b: 8, ok: true},
			{kind: "ack", a: 3, b: 3, ok: true},
		}, want: 8, out: 1},
		{name: "gap before the first delivery is committable", start: 0, ops: []op{
			{kind: "deliver", a: 5, b: 5, ok: true},
		}, want: 5, out: 1},
		{name: "abandoned range is done at once", start: 0, ops: []op{
			{kind: "deliver", a: 0, b: 0, ok: true}, {kind: "ack", a: 0, b: 0, ok: true},
			{kind: "advance", a: 4}, // records 1..3 were an abandoned fragment sequence
		}, want: 4},
		{name: "abandoned range behind an unacked delivery", start: 0, ops: []op{
			{kind: "deliver", a: 0, b: 0, ok: true}, {kind: "advance", a: 4},
			{kind: "deliver", a: 4, b: 6, ok: true}, {kind: "ack", a: 4, b: 6, ok: true},
		}, want: 0, out: 2},
		{name: "pending sequence holds the watermark back", start: 0, ops: []op{
			{kind: "deliver", a: 0, b: 0, ok: true}, {kind: "ack", a: 0, b: 0, ok: true},
			{kind: "advance", a: 1}, // fragments from 1 are still being assembled
		}, want: 1},
		{name: "double ack is ignored", start: 0, ops: []op{
			{kind: "deliver", a: 0, b: 0, ok: true}, {kind: "deliver", a: 1, b: 1, ok: true},
			{kind: "ack", a: 1, b: 1, ok: true}, {kind: "ack", a: 1, b: 1, ok: false},
		}, want: 0, out: 2},
		{name: "ack of a range never handed out", start: 0, ops: []op{
			{kind: "deliver", a: 0, b: 2, ok: true}, {kind: "ack", a: 0, b: 1, ok: false},
			{kind: "ack", a: 1, b: 2, ok: false}, {kind: "ack", a: 9, b: 9, ok: false},
		}, want: 0, out: 1},
		{name: "deliver below what is accounted is refused", start: 5, ops: []op{
			{kind: "deliver", a: 4, b: 4, ok: false}, {kind: "deliver", a: 5, b: 5, ok: true},
			{kind: "deliver", a: 5, b: 6, ok: false}, {kind: "deliver", a: 8, b: 7, ok: false},
		}, want: 5, out: 1},
		{name: "advance never goes back", start: 5, ops: []op{{kind: "advance", a: 9}, {kind: "advance", a: 2}}, want: 9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWatermark(tc.start)
			for i, o := range tc.ops {
				var got bool
				switch o.kind {
				case "deliver":
					got = w.Deliver(o.a, o.b)
				case "ack":
					got = w.Ack(o.a, o.b)
				case "advance":
					w.Advance(o.a)
					continue
				}
				if got != o.ok {
					t.Fatalf("op %d %s [%d,%d] reported %v, want %v", i, o.kind, o.a, o.b, got, o.ok)
				}
			}
			if got := w.Committable(); got != tc.want {
				t.Errorf("committable = %d, want %d", got, tc.want)
			}
			if got := w.Outstanding(); got != tc.out {
				t.Errorf("outstanding = %d, want %d", got, tc.out)
			}
		})
	}
}

// TestWatermarkManyOutOfOrder acks a long run in a scrambled order and checks the committable
// offset against a direct computation after every ack.
func TestWatermarkManyOutOfOrder(t *testing.T) {
	const n = 1000
	w := NewWatermark(100)
	for i := int64(0); i < n; i++ {
		if !w.Deliver(100+i, 100+i) {
			t.Fatalf("deliver %d refused", i)
		}
	}
	done := make([]bool, n)
	for k := 0; k < n; k++ {
		i := (k * 7919) % n // 7919 is prime, so this visits every index once
		if !w.Ack(100+int64(i), 100+int64(i)) {
			t.Fatalf("ack %d refused", i)
		}
		done[i] = true
		want := int64(100)
		for want-100 < n && done[want-100] {
			want++
		}
		if got := w.Committable(); got != want {
			t.Fatalf("after %d acks: committable %d, want %d", k+1, got, want)
		}
	}
}

func TestTrackerGenerations(t *testing.T) {
	var tr Tracker
	var commits []map[string]map[int]int64
	commit := func(o map[string]map[int]int64) error { commits = append(commits, o); return nil }
	tp0, tp1 := TopicPartition{"t", 0}, TopicPartition{"t", 1}

	g1 := tr.Begin(1, map[TopicPartition]int64{tp0: 50, tp1: -2}, commit)
	p0, p1 := g1.Parts[tp0], g1.Parts[tp1]
	if g, _ := tr.Pending(); g != nil {
		t.Fatal("partitions not started yet must not be committed")
	}
	if !tr.Start(p0, 50) || !tr.Start(p1, 0) {
		t.Fatal("start refused on the live generation")
	}
	// p0 resumes at its committed offset: nothing to commit. p1 had no commit: its resolved
	// start is committed so that a restart does not move it.
	g, off := tr.Pending()
	if g != g1 || len(off["t"]) != 1 || off["t"][1] != 0 {
		t.Fatalf("pending = %v, want only t/1 at 0", off)
	}
	tr.Done(g, off, true)

	for o := int64(50); o < 53; o++ {
		if !tr.Record(p0, o, fragment.Message{First: o, Last: o}, true, -1) {
			t.Fatal("record refused on the live generation")
		}
	}
	// 53..55: a fragment sequence still being assembled.
	for o := int64(53); o < 56; o++ {
		tr.Record(p0, o, fragment.Message{}, false, 53)
	}
	tr.Ack(p0, 52, 52)
	tr.Ack(p0, 50, 50)
	if g, off = tr.Pending(); off["t"][0] != 51 {
		t.Fatalf("pending = %v, want t/0 at 51", off)
	}
	tr.Done(g, off, true)
	tr.Ack(p0, 51, 51)
	if g, off = tr.Pending(); off["t"][0] != 53 {
		t.Fatalf("pending = %v, want t/0 at 53 (the unfinished sequence holds it)", off)
	}
	tr.Done(g, off, false) // the broker refused: the next pending offers it again
	if g, off = tr.Pending(); off["t"][0] != 53 {
		t.Fatalf("after a failed commit pending = %v, want t/0 at 53 again", off)
	}
	tr.Done(g, off, true)

	// A rebalance: generation 2 takes over. Acks of generation 1 are stale.
	tr.Record(p0, 56, fragment.Message{First: 53, Last: 56}, true, -1)
	tr.End(g1)
	g2 := tr.Begin(2, map[TopicPartition]int64{tp0: 53}, commit)
	q0 := g2.Parts[tp0]
	tr.Start(q0, 53)
	if tr.Ack(p0, 53, 56) {
		t.Fatal("ack of an ended generation was accepted")
	}
	if tr.Current(p0) || !tr.Current(q0) {
		t.Fatal("Current() does not follow the generation change")
	}
	if tr.Record(p0, 57, fragment.Message{First: 57, Last: 57}, true, -1) {
		t.Fatal("a reader of an ended generation could still record")
	}
	if g, off = tr.Pending(); g != nil {
		t.Fatalf("stale acks leaked into the new generation: pending %v", off)
	}
	tr.Record(q0, 53, fragment.Message{}, false, 53)
	tr.Record(q0, 56, fragment.Message{First: 53, Last: 56}, true, -1)
	if !tr.Ack(q0, 53, 56) {
		t.Fatal("ack refused on the live generation")
	}
	if g, off = tr.Pending(); g != g2 || off["t"][0] != 57 {
		t.Fatalf("pending = %v, want t/0 at 57", off)
	}
	tr.Done(g, off, true)
	if len(commits) != 0 {
		t.Fatal("Tracker must not call commit itself")
	}
}

// TestTrackerEndWaitsForCommits checks that ending a generation waits for a commit in flight,
// since the commit uses the generation's connection, which kafka-go closes after the end.
func TestTrackerEndWaitsForCommits(t *testing.T) {
	var tr Tracker
	tp := TopicPartition{"t", 0}
	g := tr.Begin(3, map[TopicPartition]int64{tp: -1}, nil)
	tr.Start(g.Parts[tp], 10)
	pg, off := tr.Pending()
	if pg == nil {
		t.Fatal("nothing pending")
	}
	ended := make(chan struct{})
	go func() {
		tr.End(g)
		close(ended)
	}()
	select {
	case <-ended:
		t.Fatal("End returned while a commit was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	tr.Done(pg, off, true)
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("End did not return after the commit finished")
	}
	if g2, _ := tr.Pending(); g2 != nil {
		t.Fatal("an ended generation still offers commits")
	}
}

func TestTrackerLag(t *testing.T) {
	var tr Tracker
	g := tr.Begin(1, map[TopicPartition]int64{{"t", 0}: 0, {"t", 1}: 0, {"t", 2}: 0}, nil)
	g.Parts[TopicPartition{"t", 0}].Fetched.Store(10)
	g.Parts[TopicPartition{"t", 0}].High.Store(25)
	g.Parts[TopicPartition{"t", 1}].Fetched.Store(7)
	g.Parts[TopicPartition{"t", 1}].High.Store(7)
	// t/2 has fetched nothing yet and is left out.
	if got := tr.Lag(); got != 15 {
		t.Fatalf("lag = %d, want 15", got)
	}
}
