package pgvector

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/schemas"
)

func writeDocs(t *testing.T, s *Sink, r *rand.Rand, space string, from, to int, want map[string][]float32) {
	t.Helper()
	for i := from; i < to; i++ {
		v := schemas.DocVector{DocID: fmt.Sprint(i), Version: "1", ContentHash: uint64(i), Space: space, Vector: unit(r, 8)}
		want[v.DocID] = v.Vector
		if err := s.Write(ctxT(t), v); err != nil {
			t.Fatal(err)
		}
	}
}

func checkRows(t *testing.T, dsn, space string, want map[string][]float32) {
	t.Helper()
	got := readTable(t, connect(t, dsn), TableName("reignpipe", space)) // fails on a doc id twice
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for id, v := range want {
		if !equal(got[id].vec, v) {
			t.Fatalf("%s: read back %v, wrote %v", id, got[id].vec, v)
		}
	}
}

// The server is killed while a transaction is open: Flush retries until it is back, sends the
// whole uncommitted batch again, and every row lands exactly once. Rows of a space first seen
// after the kill wait too (its table is created on a connection of its own).
func TestOutageFlushWaitsForTheServer(t *testing.T) {
	dsn := pgtest.Database(t)
	s := openSink(t, Options{Config: Config{DSN: dsn, BatchRows: 100, RetryTimeout: 2 * time.Minute}})
	r := rand.New(rand.NewPCG(21, 22))
	want := map[string][]float32{}
	writeDocs(t, s, r, reignSpace, 0, 300, want)
	if err := s.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// 250 more: two statements of 100 sent into the open transaction, 50 buffered.
	writeDocs(t, s, r, reignSpace, 300, 550, want)
	pgtest.Kill(t)
	writeDocs(t, s, r, reignSpace, 550, 590, want) // below BatchRows: buffered, nothing sent
	wantGN := map[string][]float32{}
	writeDocs(t, s, r, gnSpace, 0, 5, wantGN)

	done := make(chan error, 1)
	go func() { done <- s.Flush(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("Flush returned with the server down: %v", err)
	case <-time.After(3 * time.Second):
	}
	pgtest.Start(t)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("Flush did not return 90s after the server came back")
	}
	checkRows(t, dsn, reignSpace, want)
	checkRows(t, dsn, gnSpace, wantGN)
	if c := s.Counts(); c[Inserted] != 595 {
		t.Fatalf("counts %v, want 595 inserted", c)
	}
}

// With the server down past RetryTimeout, Flush fails with a message naming the database and
// the time waited, and keeps the rows: a Flush after the server is back commits them.
func TestOutagePastRetryTimeoutKeepsTheBuffer(t *testing.T) {
	dsn := pgtest.Database(t)
	s := openSink(t, Options{Config: Config{DSN: dsn, BatchRows: 100, RetryTimeout: 3 * time.Second}})
	r := rand.New(rand.NewPCG(23, 24))
	want := map[string][]float32{}
	writeDocs(t, s, r, reignSpace, 0, 150, want)
	pgtest.Kill(t)
	start := time.Now()
	err := s.Flush(ctxT(t))
	if err == nil {
		t.Fatal("Flush succeeded with the server down")
	}
	if d := time.Since(start); d < 3*time.Second || d > 30*time.Second {
		t.Fatalf("Flush failed after %v, RetryTimeout is 3s", d)
	}
	host := strings.SplitN(strings.SplitN(dsn, "@", 2)[1], "?", 2)[0]
	for _, w := range []string{"pgvector sink: the database at " + host, "did not accept the batch for 3s"} {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not say %q", err, w)
		}
	}
	pgtest.Start(t)
	if err := s.Flush(ctxT(t)); err != nil {
		t.Fatalf("Flush after the server came back: %v", err)
	}
	checkRows(t, dsn, reignSpace, want)
}
