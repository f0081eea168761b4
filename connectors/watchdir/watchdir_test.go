package watchdir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/jsonl"
)

func writeFile(t *testing.T, dir, name string, ids ...int) {
	t.Helper()
	var body string
	for _, id := range ids {
		if id < 0 {
			body += "{not json\n" // a bad input: acked like the others once dead-lettered
			continue
		}
		body += fmt.Sprintf("{\"id\": %d, \"text\": \"doc %d\"}\n", id, id)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, dir, stateFile string, once bool) *Watcher {
	t.Helper()
	// The files these tests read are whole before the watcher lists them: no settling.
	return openWith(t, Options{Dir: dir, StateFile: stateFile, Once: once, Settle: time.Nanosecond})
}

func openWith(t *testing.T, o Options) *Watcher {
	t.Helper()
	o.Pattern, o.Poll, o.SaveEvery = "*.jsonl", 20*time.Millisecond, time.Nanosecond
	o.Open = func(_ context.Context, p string) (connectors.Source, error) {
		return jsonl.Open(jsonl.Options{Path: p, Source: "t"})
	}
	w, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// clock is a settable time for the settle rule: file times are set with os.Chtimes, so no
// test depends on how fast the machine is.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func touch(t *testing.T, path string, mtime time.Time) {
	t.Helper()
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// read takes n inputs (all when n < 0), acking those whose index is in ackFirst or all when
// ackFirst < 0, and returns the ids read ("bad" for a bad input).
func read(t *testing.T, w *Watcher, n, ackFirst int) []string {
	t.Helper()
	var ids []string
	for i := 0; n < 0 || i < n; i++ {
		doc, ack, err := w.Read(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		var bad *connectors.BadInputError
		id := doc.ID
		if errors.As(err, &bad) {
			id = "bad"
		} else if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if ackFirst < 0 || i < ackFirst {
			if err := ack(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ids
}

func TestResumeMidFileAndPickUpNewFiles(t *testing.T) {
	dir, state := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	writeFile(t, dir, "a.jsonl", 1, 2, -1, 3)
	writeFile(t, dir, "b.jsonl", 4, 5)
	writeFile(t, dir, "ignored.txt", 99)

	// First run: five inputs handed out, only the first three acked, then a crash-like stop.
	w := open(t, dir, state, true)
	got := read(t, w, 5, 3)
	if fmt.Sprint(got) != "[t:1 t:2 bad t:3 t:4]" {
		t.Fatalf("first run read %v", got)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Restart: the three acked inputs are not handed out again, the unacked ones are.
	w = open(t, dir, state, true)
	got = read(t, w, -1, -1)
	if fmt.Sprint(got) != "[t:3 t:4 t:5]" {
		t.Fatalf("restart read %v", got)
	}
	w.Close(context.Background())

	// A new file appears: only it is read; finished files are not reopened.
	writeFile(t, dir, "c.jsonl", 6)
	w = open(t, dir, state, true)
	if got = read(t, w, -1, -1); fmt.Sprint(got) != "[t:6]" {
		t.Fatalf("after a new file read %v", got)
	}
	w.Close(context.Background())
}

// A continuous watcher waits for files and picks them up as they appear.
// Acks out of order: an input acked past a gap is not handed out again after a restart.
func TestOutOfOrderAcksSurviveRestart(t *testing.T) {
	dir, state := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	writeFile(t, dir, "a.jsonl", 1, 2, 3, 4)
	w := open(t, dir, state, true)
	var acks []connectors.AckFunc
	for i := 0; i < 4; i++ {
		_, ack, err := w.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, ack)
	}
	acks[1](context.Background(), nil) // t:2 and t:4 finish first; t:1 and t:3 never do
	acks[3](context.Background(), nil)
	if err := w.FlushAcks(context.Background()); err != nil {
		t.Fatal(err)
	}
	// No Close: the process dies here.
	w2 := open(t, dir, state, true)
	if got := read(t, w2, -1, -1); fmt.Sprint(got) != "[t:1 t:3]" {
		t.Fatalf("after restart read %v", got)
	}
	w2.Close(context.Background())
	w3 := open(t, dir, state, true)
	if got := read(t, w3, -1, -1); len(got) != 0 {
		t.Fatalf("finished file read again: %v", got)
	}
}

// A continuous watcher picks a file up once it has settled: a file still being written (its
// modification time within Settle of now) is left alone, however long the watcher waits.
func TestWatchesForNewFilesOnceSettled(t *testing.T) {
	dir, state := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	w := openWith(t, Options{Dir: dir, StateFile: state, Settle: 2 * time.Second, now: clk.now})
	defer w.Close(context.Background())

	idle := func(what string) {
		t.Helper()
		short, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		if doc, _, err := w.Read(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: got %q, %v", what, doc.ID, err)
		}
	}
	idle("empty directory")

	// Half a file, as a copy in place leaves it: the first line only, written just now.
	path := filepath.Join(dir, "x.jsonl")
	writeFile(t, dir, "x.jsonl", 7)
	touch(t, path, t0)
	clk.set(t0.Add(time.Second))
	idle("unsettled file")
	// The copy goes on; still within Settle of its last write.
	writeFile(t, dir, "x.jsonl", 7, 8)
	touch(t, path, t0.Add(1500*time.Millisecond))
	clk.set(t0.Add(3 * time.Second))
	idle("file written 1.5s ago")

	clk.set(t0.Add(3600 * time.Millisecond)) // 2.1s after the last write: settled
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, want := range []string{"t:7", "t:8"} {
		doc, ack, err := w.Read(ctx)
		if err != nil || doc.ID != want {
			t.Fatalf("want %s, got %q, %v", want, doc.ID, err)
		}
		ack(ctx, nil)
	}
	idle("after the file")
}

// A file that changes while it is read is not marked finished: the run stops with an error
// naming it, and a restart resumes it past the acked inputs.
func TestFileChangedWhileReadIsAnError(t *testing.T) {
	dir, state := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{t: t0.Add(time.Minute)}
	path := filepath.Join(dir, "x.jsonl")
	writeFile(t, dir, "x.jsonl", 1, 2)
	touch(t, path, t0)
	w := openWith(t, Options{Dir: dir, StateFile: state, Once: true, Settle: 2 * time.Second, now: clk.now})
	got := read(t, w, 2, -1)
	if fmt.Sprint(got) != "[t:1 t:2]" {
		t.Fatalf("read %v", got)
	}
	writeFile(t, dir, "x.jsonl", 1, 2, 3) // appended to after it was opened
	touch(t, path, t0.Add(time.Second))
	// The file's source may read on into what was appended; at its end the change is caught.
	doc, _, err := w.Read(context.Background())
	if err == nil && doc.ID == "t:3" { // read, never acked
		_, _, err = w.Read(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), "x.jsonl changed while it was read") {
		t.Fatalf("want a changed-file error, got %v", err)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	w = openWith(t, Options{Dir: dir, StateFile: state, Once: true, Settle: 2 * time.Second, now: clk.now})
	if got := read(t, w, -1, -1); fmt.Sprint(got) != "[t:3]" {
		t.Fatalf("after restart read %v", got)
	}
	w.Close(context.Background())
}

// A backfill (Once) does not stop while a file is still settling: it waits for it.
func TestOnceWaitsForUnsettledFile(t *testing.T) {
	dir, state := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	writeFile(t, dir, "x.jsonl", 1)
	touch(t, filepath.Join(dir, "x.jsonl"), t0)
	w := openWith(t, Options{Dir: dir, StateFile: state, Once: true, Settle: 2 * time.Second, now: clk.now})
	defer w.Close(context.Background())
	short, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if _, _, err := w.Read(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unsettled backfill returned %v", err)
	}
	clk.set(t0.Add(2 * time.Second))
	if got := read(t, w, -1, -1); fmt.Sprint(got) != "[t:1]" {
		t.Fatalf("read %v", got)
	}
}

func TestOptionsValidated(t *testing.T) {
	ok := func(context.Context, string) (connectors.Source, error) { return nil, nil }
	dir := t.TempDir()
	for name, o := range map[string]Options{
		"no dir":      {Open: ok, StateFile: "s"},
		"no open":     {Dir: dir, StateFile: "s"},
		"no state":    {Dir: dir, Open: ok},
		"bad pattern": {Dir: dir, Open: ok, StateFile: "s", Pattern: "["},
		"bad settle":  {Dir: dir, Open: ok, StateFile: "s", Settle: -time.Second},
		"not a dir":   {Dir: filepath.Join(dir, "none"), Open: ok, StateFile: "s"},
	} {
		if _, err := Open(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	bad := filepath.Join(dir, "state.json")
	os.WriteFile(bad, []byte("{"), 0o644)
	if _, err := Open(Options{Dir: dir, Open: ok, StateFile: bad}); err == nil {
		t.Error("corrupt state accepted")
	}
}
