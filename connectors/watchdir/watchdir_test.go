package watchdir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	w, err := Open(Options{Dir: dir, Pattern: "*.jsonl", StateFile: stateFile, Once: once, Poll: 20 * time.Millisecond, SaveEvery: time.Nanosecond,
		Open: func(p string) (connectors.Source, error) { return jsonl.Open(jsonl.Options{Path: p, Source: "t"}) }})
	if err != nil {
		t.Fatal(err)
	}
	return w
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

func TestWatchesForNewFiles(t *testing.T) {
	dir, state := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	w := open(t, dir, state, false)
	defer w.Close(context.Background())
	go func() {
		time.Sleep(60 * time.Millisecond)
		writeFile(t, dir, "x.jsonl", 7)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	doc, ack, err := w.Read(ctx)
	if err != nil || doc.ID != "t:7" {
		t.Fatalf("got %q, %v", doc.ID, err)
	}
	ack(ctx, nil)
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, _, err := w.Read(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle watcher returned %v", err)
	}
}

func TestOptionsValidated(t *testing.T) {
	ok := func(string) (connectors.Source, error) { return nil, nil }
	dir := t.TempDir()
	for name, o := range map[string]Options{
		"no dir":      {Open: ok, StateFile: "s"},
		"no open":     {Dir: dir, StateFile: "s"},
		"no state":    {Dir: dir, Open: ok},
		"bad pattern": {Dir: dir, Open: ok, StateFile: "s", Pattern: "["},
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
