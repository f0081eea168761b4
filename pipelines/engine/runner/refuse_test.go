package runner

import (
	"context"
	"errors"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/schemas"
)

// refusingSink refuses one document's vector as a kafka sink with format json refuses one too
// large for a record: a *connectors.BadInputError, nothing queued.
type refusingSink struct {
	memSink
	refuse string
}

func (s *refusingSink) Write(ctx context.Context, v schemas.DocVector) error {
	if v.DocID == s.refuse {
		return &connectors.BadInputError{DocID: v.DocID, Reason: errors.New("vector record of 2000000 bytes exceeds the limit")}
	}
	return s.memSink.Write(ctx, v)
}

// A vector a sink refuses dead-letters its document under stage "sink", acked like any dead
// letter, and the run goes on; the other sinks keep the vector they were given.
func TestSinkRefusalIsDeadLettered(t *testing.T) {
	rg := newRig(t, t.TempDir(), corpus(12), Options{})
	refusing := &refusingSink{refuse: "t:5"}
	rg.r.parts.Sinks = []connectors.Sink{refusing, rg.sink}
	if err := rg.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(rg.dl.d) != 1 || rg.dl.d[0].DocID != "t:5" || rg.dl.d[0].Stage != "sink" || rg.dl.d[0].Err != "vector record of 2000000 bytes exceeds the limit" {
		t.Fatalf("dead letters %+v", rg.dl.d)
	}
	c := &rg.r.C
	if c.DocsWritten.Load() != 11 || c.DocsFailed.Load() != 1 || rg.src.acked.Load() != 12 || c.Watermark.Load() != 12 {
		t.Fatalf("written %d failed %d acked %d watermark %d", c.DocsWritten.Load(), c.DocsFailed.Load(), rg.src.acked.Load(), c.Watermark.Load())
	}
	if len(refusing.durable) != 11 || len(rg.sink.durable) != 12 {
		t.Fatalf("refusing sink holds %d vectors, the other %d", len(refusing.durable), len(rg.sink.durable))
	}
}

// ackWatch records how many inputs were acked when its first Flush began.
type ackWatch struct {
	memSink
	acked      func() int64
	atFirst    int64
	flushCalls int
}

func (s *ackWatch) Flush(ctx context.Context) error {
	if s.flushCalls == 0 {
		s.atFirst = s.acked()
	}
	s.flushCalls++
	return s.memSink.Flush(ctx)
}

// A refused document is acked only at the commit that makes the other sinks' copies of its
// vector durable: acking it at its dead letter would let a crash lose those copies.
func TestSinkRefusalAckWaitsForTheCommit(t *testing.T) {
	rg := newRig(t, t.TempDir(), corpus(6), Options{CommitEvery: 100})
	watch := &ackWatch{acked: rg.src.acked.Load}
	rg.r.parts.Sinks = []connectors.Sink{&refusingSink{refuse: "t:2"}, watch}
	if err := rg.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if watch.atFirst != 0 || rg.src.acked.Load() != 6 || len(rg.dl.d) != 1 {
		t.Fatalf("%d inputs acked before the first sink flush (want 0); %d acked in all, %d dead letters", watch.atFirst, rg.src.acked.Load(), len(rg.dl.d))
	}
}
