package cluster

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
)

// fakeSource yields docs, with a bad input at the positions in bad and a deletion record at
// those in deleted, and records acks.
type fakeSource struct {
	n       int
	bad     map[int]bool
	deleted map[int]bool
	i       int
	acked   []int
}

func (s *fakeSource) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	if s.i >= s.n {
		return schemas.Document{}, nil, io.EOF
	}
	i := s.i
	s.i++
	ack := func(context.Context, error) error { s.acked = append(s.acked, i); return nil }
	if s.bad[i] {
		return schemas.Document{}, ack, &connectors.BadInputError{DocID: "bad", Position: "line", Reason: errors.New("broken")}
	}
	if s.deleted[i] {
		return schemas.Document{ID: string(rune('a' + i)), Source: "t", Version: "7", Position: "line", Deleted: true}, ack, nil
	}
	return schemas.Document{ID: string(rune('a' + i)), Text: "x"}, ack, nil
}
func (s *fakeSource) Stats() connectors.SourceStats   { return connectors.SourceStats{} }
func (s *fakeSource) Close(ctx context.Context) error { return nil }

// fakeOut records writes and, at each flush, how many inputs had been acked before it.
type fakeOut struct {
	src          *fakeSource
	written      []string
	deletions    []schemas.Document
	flushed      int
	ackedAtFlush []int
	ackedEarly   []string // documents acked before the flush that made them durable
	failFlush    bool
}

func (o *fakeOut) WriteDocument(ctx context.Context, d schemas.Document) error {
	o.written = append(o.written, d.ID)
	if d.Deleted {
		o.deletions = append(o.deletions, d)
	}
	return nil
}
func (o *fakeOut) Close(ctx context.Context) error { return nil }
func (o *fakeOut) Flush(ctx context.Context) error {
	if o.failFlush {
		return errors.New("broker gone")
	}
	o.ackedAtFlush = append(o.ackedAtFlush, len(o.src.acked))
	for _, id := range o.written[o.flushed:] {
		for _, i := range o.src.acked {
			if string(rune('a'+i)) == id {
				o.ackedEarly = append(o.ackedEarly, id)
			}
		}
	}
	o.flushed = len(o.written)
	return nil
}

type fakeDL struct{ got []schemas.DeadLetter }

func (d *fakeDL) WriteDeadLetter(ctx context.Context, l schemas.DeadLetter) error {
	d.got = append(d.got, l)
	return nil
}
func (d *fakeDL) Close(ctx context.Context) error { return nil }

func TestIngestAcksOnlyFlushedInputs(t *testing.T) {
	src := &fakeSource{n: 7, bad: map[int]bool{3: true}}
	out := &fakeOut{src: src}
	dl := &fakeDL{}
	var c engine.Counters
	var marks []int64
	err := Ingest(context.Background(), src, out, dl, IngestOptions{
		LoopOptions: LoopOptions{CommitEvery: 3},
		OnCommit:    func(w int64) error { marks = append(marks, w); return nil },
	}, &c)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(out.written, ""); got != "abcefg" {
		t.Errorf("written %q", got)
	}
	if len(dl.got) != 1 || dl.got[0].Stage != "source" || dl.got[0].Err != "broken" {
		t.Errorf("dead letters %+v", dl.got)
	}
	if len(src.acked) != 7 {
		t.Errorf("acked %v, want all 7 inputs", src.acked)
	}
	// Every flush happened before the acks of what it made durable; the dead letter (durable
	// when written) was acked at once, so the second flush found it acked.
	if len(out.ackedEarly) != 0 || len(out.ackedAtFlush) != 2 || out.ackedAtFlush[0] != 0 || out.ackedAtFlush[1] != 4 {
		t.Errorf("acked before their flush: %v; inputs acked at each flush: %v, want [0 4]", out.ackedEarly, out.ackedAtFlush)
	}
	if marks[len(marks)-1] != 7 || c.InputsRead.Load() != 7 || c.DocsWritten.Load() != 6 || c.DeadLetters.Load() != 1 {
		t.Errorf("watermarks %v, counters in=%d written=%d dl=%d", marks, c.InputsRead.Load(), c.DocsWritten.Load(), c.DeadLetters.Load())
	}
}

// Ingest passes a deletion record on to the document sink as a deletion, acked after the flush
// like any document, and counted as deleted, not written.
func TestIngestPassesDeletions(t *testing.T) {
	src := &fakeSource{n: 4, deleted: map[int]bool{1: true, 2: true}}
	out := &fakeOut{src: src}
	var c engine.Counters
	if err := Ingest(context.Background(), src, out, &fakeDL{}, IngestOptions{LoopOptions: LoopOptions{CommitEvery: 10}}, &c); err != nil {
		t.Fatal(err)
	}
	want := []schemas.Document{
		{ID: "b", Source: "t", Version: "7", Position: "line", Deleted: true},
		{ID: "c", Source: "t", Version: "7", Position: "line", Deleted: true},
	}
	if got := strings.Join(out.written, ""); got != "abcd" || !reflect.DeepEqual(out.deletions, want) {
		t.Fatalf("written %q, deletions %+v", got, out.deletions)
	}
	if len(out.ackedEarly) != 0 || len(src.acked) != 4 || c.DocsWritten.Load() != 2 || c.DocsDeleted.Load() != 2 {
		t.Fatalf("acked early %v, acked %v; written %d deleted %d", out.ackedEarly, src.acked, c.DocsWritten.Load(), c.DocsDeleted.Load())
	}
}

func TestIngestResumeAndFailedFlush(t *testing.T) {
	src := &fakeSource{n: 5}
	out := &fakeOut{src: src}
	var c engine.Counters
	if err := Ingest(context.Background(), src, out, &fakeDL{}, IngestOptions{Resume: 2}, &c); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(out.written, ""); got != "cde" {
		t.Errorf("resumed run wrote %q, want cde", got)
	}
	src2 := &fakeSource{n: 4}
	out2 := &fakeOut{src: src2, failFlush: true}
	err := Ingest(context.Background(), src2, out2, &fakeDL{}, IngestOptions{LoopOptions: LoopOptions{CommitEvery: 2}}, &c)
	if err == nil || len(src2.acked) != 0 {
		t.Errorf("a failed flush must end the stage without acking: err %v, acked %v", err, src2.acked)
	}
}

// fakeChunks yields chunk docs, then blocks until ctx ends (a stream has no end).
type fakeChunks struct {
	docs    []schemas.ChunkDoc
	i       int
	acked   int
	ackErrs int // acks that carried a dead-letter reason
	commits []int
}

func (f *fakeChunks) Read(ctx context.Context) (schemas.ChunkDoc, connectors.AckFunc, error) {
	if f.i >= len(f.docs) {
		<-ctx.Done()
		return schemas.ChunkDoc{}, nil, ctx.Err()
	}
	d := f.docs[f.i]
	f.i++
	return d, func(_ context.Context, err error) error {
		f.acked++
		if err != nil {
			f.ackErrs++
		}
		return nil
	}, nil
}
func (f *fakeChunks) FlushAcks(ctx context.Context) error {
	f.commits = append(f.commits, f.acked)
	return nil
}
func (f *fakeChunks) Close(ctx context.Context) error { return nil }

type fakeSink struct {
	got     []schemas.DocVector
	deleted []schemas.Deletion
}

func (s *fakeSink) Delete(ctx context.Context, d schemas.Deletion) error {
	s.deleted = append(s.deleted, d)
	return nil
}

func (s *fakeSink) Write(ctx context.Context, v schemas.DocVector) error {
	s.got = append(s.got, v)
	return nil
}
func (s *fakeSink) Flush(ctx context.Context) error { return nil }
func (s *fakeSink) Close(ctx context.Context) error { return nil }

func TestAggregateDeadLettersForeignSpace(t *testing.T) {
	mp, err := aggregate.NewMeanPool(2, "fp")
	if err != nil {
		t.Fatal(err)
	}
	doc := func(id, fp string) schemas.ChunkDoc {
		return schemas.ChunkDoc{DocID: id, Fingerprint: fp, Dim: 2, K: 8, S: 8, Keys: []uint64{1, 2}, Embeddings: []float32{1, 0, 0, 1}}
	}
	in := &fakeChunks{docs: []schemas.ChunkDoc{doc("a", "fp"), doc("b", "other-gn"), doc("c", "fp")}}
	sink, dl := &fakeSink{}, &fakeDL{}
	ctx, cancel := context.WithCancel(context.Background())
	var c engine.Counters
	done := make(chan error)
	go func() {
		done <- Aggregate(ctx, AggregateParts{Input: in, Space: schemas.Space{Fingerprint: "fp", Dim: 2, K: 8, S: 8}, Aggregation: engine.Aggregation{Aggregator: mp}, Sinks: []connectors.Sink{sink}, DeadLetter: dl},
			LoopOptions{CommitEvery: 1}, &c)
	}()
	for c.InputsRead.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(sink.got) != 2 || sink.got[0].DocID != "a" || sink.got[1].DocID != "c" || sink.got[0].NChunks != 2 {
		t.Fatalf("vectors %+v", sink.got)
	}
	want := float32(1 / 1.4142135)
	if v := sink.got[0].Vector; v[0] < want-1e-6 || v[0] > want+1e-6 {
		t.Errorf("mean-pool of (1,0),(0,1) = %v", v)
	}
	if len(dl.got) != 1 || dl.got[0].DocID != "b" || !strings.Contains(dl.got[0].Err, "other-gn") {
		t.Errorf("dead letters %+v", dl.got)
	}
	if in.acked != 3 || in.ackErrs != 1 || in.commits[len(in.commits)-1] != 3 {
		t.Errorf("acked %d (%d with a dead-letter reason, want 1), commits %v", in.acked, in.ackErrs, in.commits)
	}
}

// A deletion's chunk record goes to every sink as a deletion, whatever space it names (a
// deletion is of every space), and counts as deleted.
func TestAggregateRoutesDeletions(t *testing.T) {
	mp, _ := aggregate.NewMeanPool(2, "fp")
	up := func(id string) schemas.ChunkDoc {
		return schemas.ChunkDoc{DocID: id, Fingerprint: "fp", Dim: 2, K: 8, S: 8, Keys: []uint64{1}, Embeddings: []float32{1, 0}}
	}
	in := &fakeChunks{docs: []schemas.ChunkDoc{up("a"), {DocID: "b", Source: "t", Version: "3", Fingerprint: "other-gn", Deleted: true}, up("c"),
		{DocID: "a", Deleted: true}}}
	sinks := []*fakeSink{{}, {}}
	ctx, cancel := context.WithCancel(context.Background())
	var c engine.Counters
	done := make(chan error)
	go func() {
		done <- Aggregate(ctx, AggregateParts{Input: in, Space: schemas.Space{Fingerprint: "fp", Dim: 2, K: 8, S: 8}, Aggregation: engine.Aggregation{Aggregator: mp},
			Sinks: []connectors.Sink{sinks[0], sinks[1]}, DeadLetter: &fakeDL{}}, LoopOptions{CommitEvery: 1}, &c)
	}()
	for c.InputsRead.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := []schemas.Deletion{{DocID: "b", Source: "t", Version: "3"}, {DocID: "a"}}
	for i, s := range sinks {
		if !reflect.DeepEqual(s.deleted, want) || len(s.got) != 2 || s.got[0].DocID != "a" || s.got[1].DocID != "c" {
			t.Fatalf("sink %d: deleted %+v, vectors %d", i, s.deleted, len(s.got))
		}
	}
	if c.DocsWritten.Load() != 2 || c.DocsDeleted.Load() != 2 || c.DocsFailed.Load() != 0 || in.acked != 4 {
		t.Fatalf("written %d deleted %d failed %d acked %d", c.DocsWritten.Load(), c.DocsDeleted.Load(), c.DocsFailed.Load(), in.acked)
	}
}

// TestAggregateCommitsWhileInputIsQuiet: documents read before the input goes quiet are
// flushed and committed within CommitInterval, without waiting for more input.
func TestAggregateCommitsWhileInputIsQuiet(t *testing.T) {
	mp, _ := aggregate.NewMeanPool(2, "fp")
	in := &fakeChunks{docs: []schemas.ChunkDoc{{DocID: "a", Fingerprint: "fp", Dim: 2, K: 8, S: 8, Keys: []uint64{1}, Embeddings: []float32{1, 0}}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var c engine.Counters
	go Aggregate(ctx, AggregateParts{Input: in, Space: schemas.Space{Fingerprint: "fp", Dim: 2, K: 8, S: 8}, Aggregation: engine.Aggregation{Aggregator: mp}, Sinks: []connectors.Sink{&fakeSink{}}, DeadLetter: &fakeDL{}},
		LoopOptions{CommitEvery: 100, CommitInterval: 20 * time.Millisecond}, &c)
	deadline := time.Now().Add(5 * time.Second)
	for c.Commits.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the document read before the input went quiet was never committed")
		}
		time.Sleep(time.Millisecond)
	}
}
