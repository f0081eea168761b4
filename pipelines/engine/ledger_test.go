package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

func TestWatermark(t *testing.T) {
	w := newWatermark(5)
	for _, s := range []int64{7, 6, 3, 9} {
		w.mark(s)
	}
	if w.next != 5 {
		t.Fatalf("next %d", w.next)
	}
	w.mark(5)
	if w.next != 8 || len(w.done) != 1 {
		t.Fatalf("next %d done %v", w.next, w.done)
	}
}

// events records, in order, what the outputs and acks saw.
type events struct{ log []string }

func (e *events) add(s string) { e.log = append(e.log, s) }

type evCache struct {
	ev       *events
	failPut  bool
	manifest []string
	deleted  map[string]string // doc id → the version it was deleted at
}

func (c *evCache) Get(uint64, []float32) (bool, error) { return false, nil }
func (c *evCache) Add(shardcache.Row) (bool, error)    { return true, nil }
func (c *evCache) PutManifest(m shardcache.Manifest) error {
	c.manifest = append(c.manifest, m.DocID)
	return nil
}
func (c *evCache) DeleteManifest(d schemas.Deletion) error {
	c.ev.add("manifest delete " + d.DocID + "@" + d.Version)
	if c.deleted == nil {
		c.deleted = map[string]string{}
	}
	c.deleted[d.DocID] = d.Version
	return nil
}
func (c *evCache) Superseded(id, version string) (bool, error) {
	v, ok := c.deleted[id]
	return ok && schemas.Supersedes(v, version), nil
}
func (c *evCache) Flush() error { c.ev.add("cache flush"); return nil }

type evChunks struct{ ev *events }

func (s evChunks) WriteChunks(_ context.Context, c schemas.ChunkDoc) error {
	if c.Deleted {
		s.ev.add("chunk deletion " + c.DocID)
		return nil
	}
	s.ev.add("chunk " + c.DocID)
	return nil
}
func (s evChunks) Flush(context.Context) error { s.ev.add("chunks flush"); return nil }
func (s evChunks) Close(context.Context) error { s.ev.add("chunks close"); return nil }

type evSink struct {
	ev       *events
	name     string
	refuse   string
	closeErr error
	aborted  bool
}

func (s *evSink) Write(_ context.Context, v schemas.DocVector) error {
	if v.DocID == s.refuse {
		return &connectors.BadInputError{DocID: v.DocID, Reason: errors.New("too large")}
	}
	s.ev.add(s.name + " " + v.DocID)
	return nil
}
func (s *evSink) Delete(_ context.Context, d schemas.Deletion) error {
	s.ev.add(s.name + " delete " + d.DocID)
	return nil
}
func (s *evSink) Flush(context.Context) error { s.ev.add(s.name + " flush"); return nil }
func (s *evSink) Close(context.Context) error { s.ev.add(s.name + " close"); return s.closeErr }
func (s *evSink) Abort()                      { s.aborted = true }

type evDL struct{ ev *events }

func (d evDL) WriteDeadLetter(_ context.Context, l schemas.DeadLetter) error {
	d.ev.add("dead letter " + l.DocID + " " + l.Stage)
	return nil
}
func (d evDL) Close(context.Context) error { return nil }

func ackOf(ev *events, id string) connectors.AckFunc {
	return func(_ context.Context, err error) error {
		if err != nil {
			ev.add("ack " + id + " (" + err.Error() + ")")
		} else {
			ev.add("ack " + id)
		}
		return nil
	}
}

func testLedger(t *testing.T, ev *events, o Options, sinks ...*evSink) (*Ledger, *Counters) {
	t.Helper()
	mp, err := aggregate.NewMeanPool(2, "fp")
	if err != nil {
		t.Fatal(err)
	}
	var vs []connectors.Sink
	var names []string
	for _, s := range sinks {
		vs, names = append(vs, s), append(names, s.name)
	}
	o.DeadLetter = evDL{ev}
	o.SourceCommit = func(context.Context) error { ev.add("source commit"); return nil }
	o.OnCommit = func(w int64) error { ev.add(fmt.Sprintf("watermark %d", w)); return nil }
	var c Counters
	l, err := New(Outputs{
		Cache: &evCache{ev: ev}, Space: schemas.Space{Fingerprint: "fp", Dim: 2, K: 8, S: 8}, Chunks: []connectors.ChunkSink{evChunks{ev}},
		Vectors: vs, Names: names, Aggregation: Aggregation{Aggregator: mp},
	}, o, &c)
	if err != nil {
		t.Fatal(err)
	}
	return l, &c
}

var twoChunks = [][]float32{{1, 0}, {0, 1}}

// A commit makes the outputs durable in the one order -- the cache (rows, then manifests),
// the chunk records, the vector sinks -- and only then acks the inputs, commits the source and
// moves the watermark; a sink's refusal is dead-lettered at once and acked with its reason at
// the commit, after the other sinks' flush.
func TestCommitOrder(t *testing.T) {
	ev := &events{}
	l, c := testLedger(t, ev, Options{CommitEvery: 100}, &evSink{ev: ev, name: "parquet"}, &evSink{ev: ev, name: "kafka", refuse: "b"})
	ctx := context.Background()
	for i, id := range []string{"a", "b"} {
		in := Input{Seq: int64(i), Ack: ackOf(ev, id), DocID: id}
		if err := l.Deliver(ctx, in, Doc{ID: id, Version: "1"}, []uint64{1, 2}, twoChunks); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"chunk a", "parquet a", "kafka a",
		"chunk b", "parquet b", "dead letter b sink",
		"cache flush", "chunks flush", "parquet flush", "kafka flush",
		"ack a", "ack b (too large)", "source commit", "watermark 2",
	}
	if strings.Join(ev.log, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(ev.log, "\n"), strings.Join(want, "\n"))
	}
	if c.DocsWritten.Load() != 1 || c.DocsFailed.Load() != 1 || c.Commits.Load() != 1 || c.ManifestsPut.Load() != 2 {
		t.Fatalf("written %d failed %d commits %d manifests %d", c.DocsWritten.Load(), c.DocsFailed.Load(), c.Commits.Load(), c.ManifestsPut.Load())
	}
}

// A deletion goes through the same commit as a document: applied to the manifest, the chunk
// records and every vector sink, acked only after the flush, counted as deleted.
func TestDeliverDelete(t *testing.T) {
	ev := &events{}
	l, c := testLedger(t, ev, Options{CommitEvery: 100}, &evSink{ev: ev, name: "parquet"}, &evSink{ev: ev, name: "pgvector"})
	ctx := context.Background()
	if err := l.Deliver(ctx, Input{Seq: 0, Ack: ackOf(ev, "a"), DocID: "a"}, Doc{ID: "a", Version: "1"}, []uint64{1, 2}, twoChunks); err != nil {
		t.Fatal(err)
	}
	if err := l.DeliverDelete(ctx, Input{Seq: 1, Ack: ackOf(ev, "b"), DocID: "b"}, schemas.Deletion{DocID: "b", Version: "7"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"chunk a", "parquet a", "pgvector a",
		"manifest delete b@7", "chunk deletion b", "parquet delete b", "pgvector delete b",
		"cache flush", "chunks flush", "parquet flush", "pgvector flush",
		"ack a", "ack b", "source commit", "watermark 2",
	}
	if strings.Join(ev.log, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(ev.log, "\n"), strings.Join(want, "\n"))
	}
	if c.DocsWritten.Load() != 1 || c.DocsDeleted.Load() != 1 {
		t.Fatalf("written %d deleted %d", c.DocsWritten.Load(), c.DocsDeleted.Load())
	}
}

// An upsert that a deletion delivered before it supersedes is written nowhere, acked at the
// commit in its turn and counted as superseded; a newer one is written.
func TestDeliverSupersededByDelete(t *testing.T) {
	ev := &events{}
	l, c := testLedger(t, ev, Options{CommitEvery: 100}, &evSink{ev: ev, name: "parquet"})
	ctx := context.Background()
	steps := []struct {
		id, version string
		del         bool
	}{{"a", "3", true}, {"a", "3", false}, {"a", "2", false}, {"a", "4", false}}
	for i, s := range steps {
		in := Input{Seq: int64(i), Ack: ackOf(ev, fmt.Sprintf("%s@%s", s.id, s.version)), DocID: s.id}
		var err error
		if s.del {
			err = l.DeliverDelete(ctx, in, schemas.Deletion{DocID: s.id, Version: s.version})
		} else {
			err = l.Deliver(ctx, in, Doc{ID: s.id, Version: s.version}, []uint64{1, 2}, twoChunks)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"manifest delete a@3", "chunk deletion a", "parquet delete a",
		"chunk a", "parquet a", // version 4 only
		"cache flush", "chunks flush", "parquet flush",
		"ack a@3", "ack a@3", "ack a@2", "ack a@4", "source commit", "watermark 4",
	}
	if strings.Join(ev.log, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(ev.log, "\n"), strings.Join(want, "\n"))
	}
	if c.DocsWritten.Load() != 1 || c.DocsDeleted.Load() != 1 || c.Superseded.Load() != 2 {
		t.Fatalf("written %d deleted %d superseded %d", c.DocsWritten.Load(), c.DocsDeleted.Load(), c.Superseded.Load())
	}
}

// A failed input is dead-lettered and acked at once; the watermark moves over it only once
// every earlier input is committed.
func TestFailedInputAckedAtOnce(t *testing.T) {
	ev := &events{}
	l, _ := testLedger(t, ev, Options{CommitEvery: 100}, &evSink{ev: ev, name: "parquet"})
	ctx := context.Background()
	if err := l.Deliver(ctx, Input{Seq: 0, Ack: ackOf(ev, "a"), DocID: "a"}, Doc{ID: "a"}, []uint64{1, 2}, twoChunks); err != nil {
		t.Fatal(err)
	}
	if err := l.Fail(ctx, Input{Seq: 1, Ack: ackOf(ev, "b"), DocID: "b"}, "gn", errors.New("forward pass failed")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ev.log, ", "); got != "chunk a, parquet a, dead letter b gn, ack b (forward pass failed)" {
		t.Fatalf("before the commit: %s", got)
	}
	if err := l.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ev.log[len(ev.log)-1]; got != "watermark 2" {
		t.Fatalf("last event %q, want the watermark past both", got)
	}
}

// Every mode commits at the run's cadence: after CommitEvery deliveries, or once the oldest
// has waited CommitInterval while the input is quiet (Drive cuts the wait short).
func TestDriveCadence(t *testing.T) {
	ev := &events{}
	l, c := testLedger(t, ev, Options{CommitEvery: 3, CommitInterval: 30 * time.Millisecond}, &evSink{ev: ev, name: "parquet"})
	ctx := context.Background()
	inputs := make(chan string, 10)
	for _, id := range []string{"a", "b", "c", "d"} {
		inputs <- id
	}
	var seq int64
	done := make(chan error, 1)
	go func() {
		done <- l.Drive(ctx, func(wait context.Context) error {
			select {
			case id, ok := <-inputs:
				if !ok {
					return io.EOF
				}
				seq++
				return l.Deliver(ctx, Input{Seq: seq - 1, DocID: id}, Doc{ID: id}, []uint64{1, 2}, twoChunks)
			case <-wait.Done():
				return wait.Err()
			}
		})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for c.Commits.Load() < 2 { // a, b, c by count; d by the interval, with no further input
		if time.Now().After(deadline) {
			t.Fatalf("%d commits; events %v", c.Commits.Load(), ev.log)
		}
		time.Sleep(time.Millisecond)
	}
	close(inputs)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.DocsWritten.Load() != 4 || c.Commits.Load() != 2 {
		t.Fatalf("written %d in %d commits, want 4 in 2", c.DocsWritten.Load(), c.Commits.Load())
	}
}

// Close closes every output and fails with a sink's close error, named by its place in the
// pipeline file; after a failed run, a sink that can withdraw its uncommitted writes does, and
// what was pending counts as abandoned.
func TestCloseErrors(t *testing.T) {
	ev := &events{}
	bad := &evSink{ev: ev, name: "pgvector", closeErr: errors.New("index build failed")}
	l, _ := testLedger(t, ev, Options{}, &evSink{ev: ev, name: "parquet"}, bad)
	err := l.Close(context.Background(), false)
	if err == nil || !strings.Contains(err.Error(), "closing sinks[1] (pgvector): index build failed") {
		t.Fatalf("close error %v", err)
	}
	if !strings.Contains(strings.Join(ev.log, ","), "chunks close") || l.Close(context.Background(), false) != nil {
		t.Fatalf("events %v; a second Close must do nothing", ev.log)
	}

	ev2 := &events{}
	withdraw := &evSink{ev: ev2, name: "parquet"}
	l2, c2 := testLedger(t, ev2, Options{CommitEvery: 100}, withdraw)
	if err := l2.Deliver(context.Background(), Input{DocID: "a"}, Doc{ID: "a"}, []uint64{1, 2}, twoChunks); err != nil {
		t.Fatal(err)
	}
	if err := l2.Close(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if !withdraw.aborted || c2.Abandoned.Load() != 1 || strings.Contains(strings.Join(ev2.log, ","), "ack") {
		t.Fatalf("aborted %v abandoned %d events %v", withdraw.aborted, c2.Abandoned.Load(), ev2.log)
	}
}

// The same doc id delivered twice in a run is counted (each time after the first) and logged
// once per id.
func TestDuplicateIDsCounted(t *testing.T) {
	ev := &events{}
	var logs bytes.Buffer
	l, c := testLedger(t, ev, Options{CommitEvery: 100, TrackIDs: 100, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, &evSink{ev: ev, name: "parquet"})
	for i, id := range []string{"a", "b", "a", "a", "c", "b"} {
		if err := l.Deliver(context.Background(), Input{Seq: int64(i), DocID: id}, Doc{ID: id}, []uint64{1, 2}, twoChunks); err != nil {
			t.Fatal(err)
		}
	}
	if c.Duplicates.Load() != 3 || strings.Count(logs.String(), "delivered twice") != 2 {
		t.Fatalf("duplicates %d, logs:\n%s", c.Duplicates.Load(), logs.String())
	}
}

func TestIDSetBounded(t *testing.T) {
	s := newIDSet(1000)
	for i := range 1000 {
		if s.add(fmt.Sprint("doc:", i)) != idNew {
			t.Fatalf("id %d not new", i)
		}
	}
	if s.add("doc:5") != idFirstRepeat || s.add("doc:5") != idRepeat {
		t.Fatal("a repeated id is not found")
	}
	if s.add("doc:new") != idFull || s.add("doc:other") != idUnknown {
		t.Fatal("past its bound the set must stop remembering")
	}
	if len(s.slots) > 4096 {
		t.Fatalf("%d slots for 1000 ids", len(s.slots))
	}
}
