package pgcdc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/schemas"
)

// patent is a real document for the table: from the shared USPTO files.
type patent struct{ id, title, text string }

// patents reads n real patents (at least 200 are asked for by the tests that follow a table).
func patents(t *testing.T, n int) []patent {
	t.Helper()
	dir := testenv.SharedData(t, "patents/uspto")
	var out []patent
	for _, f := range []string{"ipg120327.196.xml", "ipg100105.small.xml", "ipg090106.small.xml"} {
		src, err := uspto.Open(uspto.Options{Path: filepath.Join(dir, f)})
		if err != nil {
			t.Fatal(err)
		}
		for len(out) < n {
			d, _, err := src.Read(context.Background())
			if err == io.EOF {
				break
			}
			var bad *connectors.BadInputError
			if errors.As(err, &bad) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, patent{id: strings.TrimPrefix(d.ID, "uspto:"), title: d.Title, text: d.Text})
		}
		src.Close(context.Background())
	}
	if len(out) < n {
		t.Fatalf("only %d patents in the shared files", len(out))
	}
	return out[:n]
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func mustExec(t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// fixture is a database with table docs holding rows of real patents, and the options of a
// source following it.
type fixture struct {
	dsn  string
	db   *pgx.Conn
	opts Options
}

func newFixture(t *testing.T, rows []patent) *fixture {
	t.Helper()
	dsn := pgtest.Database(t)
	f := &fixture{dsn: dsn, db: connect(t, dsn)}
	mustExec(t, f.db, "CREATE TABLE docs (id text PRIMARY KEY, title text, body text, notes text)")
	for i, p := range rows {
		var notes any
		if i%10 == 0 {
			notes = "note " + p.id // a second text column on some rows: joined after the body
		}
		mustExec(t, f.db, "INSERT INTO docs VALUES ($1, $2, $3, $4)", p.id, p.title, p.text, notes)
	}
	f.opts = Options{Config: Config{DSN: dsn, Table: "public.docs", IDColumn: "id", TitleColumn: "title", TextColumns: []string{"body", "notes"}},
		Pipeline: "cdc test", StateFile: filepath.Join(t.TempDir(), "state.json")}
	// Before the database is dropped (cleanups run last first): a slot keeps it in use.
	t.Cleanup(func() {
		admin := connect(t, dsn)
		admin.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database()")
	})
	return f
}

func (f *fixture) open(t *testing.T) *Source {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// want is what the table holds now, as documents: id -> text.
func (f *fixture) want(t *testing.T) map[string]string {
	t.Helper()
	rows, err := f.db.Query(context.Background(), "SELECT id, coalesce(body, ''), notes FROM docs")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var id, body string
		var notes *string
		if err := rows.Scan(&id, &body, &notes); err != nil {
			t.Fatal(err)
		}
		text := body
		if notes != nil {
			text += "\n\n" + *notes
		}
		out["docs:"+id] = text
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// got is an output applying documents as the sinks do: the newest version of each id wins,
// a deletion is remembered against older upserts.
type got struct {
	docs  map[string]schemas.Document
	acks  []connectors.AckFunc
	reads []schemas.Document
}

func newGot() *got { return &got{docs: map[string]schemas.Document{}} }

func (g *got) apply(d schemas.Document, ack connectors.AckFunc) {
	g.reads = append(g.reads, d)
	g.acks = append(g.acks, ack)
	if old, ok := g.docs[d.ID]; ok && schemas.CompareVersions(d.Version, old.Version) <= 0 {
		return
	}
	g.docs[d.ID] = d
}

func (g *got) live() map[string]string {
	out := map[string]string{}
	for id, d := range g.docs {
		if !d.Deleted {
			out[id] = d.Text
		}
	}
	return out
}

// read reads n documents, failing after a minute.
func read(t *testing.T, s *Source, g *got, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < n; i++ {
		d, ack, err := s.Read(ctx)
		if err != nil {
			t.Fatalf("after %d of %d documents: %v", i, n, err)
		}
		g.apply(d, ack)
	}
}

// quiet says no document arrives within d.
func quiet(t *testing.T, s *Source, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if doc, _, err := s.Read(ctx); err == nil {
		t.Fatalf("unexpected document %s version %s deleted %v", doc.ID, doc.Version, doc.Deleted)
	}
}

func sameSet(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for id, w := range want {
		if g, ok := got[id]; !ok {
			t.Errorf("%s: %s missing", what, id)
		} else if g != w {
			t.Errorf("%s: %s has text %.60q, the table %.60q", what, id, g, w)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("%s: %s is not in the table", what, id)
		}
	}
}

// The snapshot is the table as of the slot: changes committed after the slot was created,
// while the snapshot is read, come once, from the stream, after every snapshot row. Inserts,
// updates (text changed, title only, a key change), deletes and a row blanked all arrive.
func TestSnapshotThenChanges(t *testing.T) {
	rows := patents(t, 220)
	f := newFixture(t, rows)
	s := f.open(t)
	defer s.Close(context.Background())
	before := f.want(t)

	// Committed after the slot exists, before a single row was read.
	mustExec(t, f.db, "UPDATE docs SET body = body || ' amended' WHERE id = $1", rows[0].id)
	mustExec(t, f.db, "DELETE FROM docs WHERE id = $1", rows[1].id)
	mustExec(t, f.db, "INSERT INTO docs VALUES ('new-1', 'A new one', 'fresh text', NULL)")

	g := newGot()
	read(t, s, g, len(rows))
	snap := g.reads[0].Version
	for i, d := range g.reads {
		if d.Deleted || d.Version != snap || !strings.HasSuffix(snap, "0000000000") {
			t.Fatalf("snapshot row %d: version %s (the first's %s), deleted %v", i, d.Version, snap, d.Deleted)
		}
	}
	sameSet(t, "snapshot", g.live(), before)

	// While streaming: an update of the title only (same text), a key change, a blanked row,
	// two changes of one row in one transaction, an insert and a delete.
	mustExec(t, f.db, "UPDATE docs SET title = 'retitled' WHERE id = $1", rows[2].id)
	mustExec(t, f.db, "UPDATE docs SET id = 'moved-3' WHERE id = $1", rows[3].id)
	mustExec(t, f.db, "UPDATE docs SET body = '  ', notes = NULL WHERE id = $1", rows[4].id)
	tx, err := f.db.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tx.Exec(context.Background(), "UPDATE docs SET body = 'first' WHERE id = $1", rows[5].id)
	tx.Exec(context.Background(), "UPDATE docs SET body = 'second' WHERE id = $1", rows[5].id)
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustExec(t, f.db, "INSERT INTO docs VALUES ('new-2', NULL, 'more text', 'and a note')")
	mustExec(t, f.db, "DELETE FROM docs WHERE id = $1", rows[6].id)

	// 3 changes before the snapshot was read; then 1 + 2 (delete, insert) + 1 + 2 + 1 + 1.
	read(t, s, g, 3+8)
	quiet(t, s, 500*time.Millisecond)
	want := f.want(t)
	delete(want, "docs:"+rows[4].id) // blank text: no document
	sameSet(t, "after the changes", g.live(), want)
	if d := g.docs["docs:"+rows[2].id]; d.Title != "retitled" || d.Text != rows[2].text {
		t.Errorf("title-only update: %q %.40q", d.Title, d.Text)
	}
	for _, id := range []string{rows[1].id, rows[3].id, rows[4].id, rows[6].id} {
		if d := g.docs["docs:"+id]; !d.Deleted || d.Text != "" || d.Position == "" {
			t.Errorf("%s: want a deletion, got %+v", id, d)
		}
	}
	if g.docs["docs:new-2"].Title != "" {
		t.Errorf("a NULL title: %q", g.docs["docs:new-2"].Title)
	}
	for _, d := range g.reads[len(rows):] {
		if schemas.CompareVersions(d.Version, snap) <= 0 {
			t.Errorf("change %s at version %s does not follow the snapshot's %s", d.ID, d.Version, snap)
		}
	}
	if a, b := g.reads[len(rows)+7], g.reads[len(rows)+8]; a.ID != b.ID || schemas.CompareVersions(a.Version, b.Version) >= 0 || b.Text != "second" {
		t.Errorf("two changes of one row in a transaction: %s@%s then %s@%s %q", a.ID, a.Version, b.ID, b.Version, b.Text)
	}
	st := s.Stats()
	if st.Read != int64(len(g.reads)) {
		t.Errorf("stats read %d, handed out %d", st.Read, len(g.reads))
	}
}

// confirmed is the slot's confirmed position as the server has it once no process holds it
// (the server applies a reported position when it reads it).
func (f *fixture) confirmed(t *testing.T, slot string) pglogrepl.LSN {
	t.Helper()
	var s string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var active bool
		if err := f.db.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s, &active); err != nil {
			t.Fatal(err)
		}
		if !active || time.Now().After(deadline) {
			break
		}
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// Acks come out of order; the slot's position advances over the longest acked prefix only,
// and a source opened again resumes from the slot: it does not read the table again, hands
// out again exactly the changes from the first unacked one on, and loses none.
func TestOutOfOrderAcksAndResume(t *testing.T) {
	rows := patents(t, 200)
	f := newFixture(t, rows)
	s := f.open(t)
	g := newGot()
	read(t, s, g, len(rows))
	for _, i := range rand.Perm(len(g.acks)) { // the snapshot, acked in a random order
		g.acks[i](context.Background(), nil)
	}
	if err := s.FlushAcks(context.Background()); err != nil {
		t.Fatal(err)
	}
	start := s.flushedPos()

	// 20 transactions of one change each: updates with new text, updates with the same text,
	// deletes and inserts.
	for i := 0; i < 20; i++ {
		switch p := rows[10+i]; i % 4 {
		case 0:
			mustExec(t, f.db, "UPDATE docs SET body = $2 WHERE id = $1", p.id, p.text+fmt.Sprintf(" edit %d", i))
		case 1:
			mustExec(t, f.db, "UPDATE docs SET body = body WHERE id = $1", p.id)
		case 2:
			mustExec(t, f.db, "DELETE FROM docs WHERE id = $1", p.id)
		case 3:
			mustExec(t, f.db, "INSERT INTO docs VALUES ($1, 'inserted', $2, NULL)", fmt.Sprintf("ins-%d", i), p.text)
		}
	}
	changes := newGot()
	read(t, s, changes, 20)
	// Ack changes 0-11 shuffled, and 13-19: 12 is outstanding, so the position may pass the
	// first 12 transactions only.
	order := rand.Perm(20)
	for _, i := range order {
		if i != 12 {
			changes.acks[i](context.Background(), nil)
		}
	}
	if err := s.FlushAcks(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The position is the end of the 12th transaction: past the 12 acked in a row, short of the
	// outstanding 13th, whose commit came later.
	c := f.confirmed(t, s.Slot())
	if last, next := lsnOf(t, changes.reads[11].Version), lsnOf(t, changes.reads[12].Version); c <= start || c <= last || c > next {
		t.Fatalf("the slot's position is %s; want past the 12th transaction's commit %s, not past the 13th's %s (before the changes %s)", c, last, next, start)
	}

	s2 := f.open(t)
	defer s2.Close(context.Background())
	again := newGot()
	read(t, s2, again, 8)
	quiet(t, s2, 500*time.Millisecond)
	for i, d := range again.reads {
		w := changes.reads[12+i]
		if d.ID != w.ID || d.Version != w.Version || d.Deleted != w.Deleted || d.Text != w.Text {
			t.Errorf("resumed %d: %s@%s, want the unacked-onward change %s@%s", i, d.ID, d.Version, w.ID, w.Version)
		}
	}
	for _, d := range changes.reads {
		g.apply(d, nil)
	}
	for _, d := range again.reads {
		g.apply(d, nil)
	}
	sameSet(t, "after the restart", g.live(), f.want(t))
}

// A source closed during the snapshot, before its rows were acked, reads the table again
// when opened: the slot is kept, so a change made in between arrives too, after the rows.
func TestSnapshotRestarts(t *testing.T) {
	rows := patents(t, 200)
	f := newFixture(t, rows)
	s := f.open(t)
	g := newGot()
	read(t, s, g, 50)
	for _, a := range g.acks[:50] { // acked, but the snapshot is not done: nothing is recorded
		a(context.Background(), nil)
	}
	if err := s.FlushAcks(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustExec(t, f.db, "UPDATE docs SET body = 'changed while down' WHERE id = $1", rows[1].id)
	mustExec(t, f.db, "DELETE FROM docs WHERE id = $1", rows[199].id)

	s2 := f.open(t)
	defer s2.Close(context.Background())
	second := newGot()
	read(t, s2, second, 199+2) // the table as it is now, then the two changes again
	quiet(t, s2, 500*time.Millisecond)
	for _, d := range second.reads[:199] {
		if d.Deleted {
			t.Fatalf("a deletion among the snapshot rows: %s", d.ID)
		}
	}
	if d := second.reads[199]; d.ID != "docs:"+rows[1].id || d.Text != "changed while down" {
		t.Errorf("first change after the second snapshot: %s %.30q", d.ID, d.Text)
	}
	if d := second.reads[200]; d.ID != "docs:"+rows[199].id || !d.Deleted {
		t.Errorf("second change: %+v", d)
	}
	for _, d := range second.reads {
		g.apply(d, nil)
	}
	sameSet(t, "after the second snapshot", g.live(), f.want(t))
	for _, a := range second.acks {
		a(context.Background(), nil)
	}
	if err := s2.FlushAcks(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2.Close(context.Background())
	s3 := f.open(t) // the snapshot is done: nothing is read again
	defer s3.Close(context.Background())
	quiet(t, s3, time.Second)
}

func (s *Source) flushedPos() pglogrepl.LSN { return pglogrepl.LSN(s.pos.Load()) }

// lsnOf is the log position of a change's version (Version's digits but the ordinal's).
func lsnOf(t *testing.T, v string) pglogrepl.LSN {
	t.Helper()
	n, err := strconv.ParseUint(v[:len(v)-10], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pglogrepl.LSN(n)
}
