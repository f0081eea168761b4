package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
)

// cdcTable is a database whose table docs holds real patents (their titles and the start of
// their text: the GN's work stays small on a test machine), and the pipeline following it.
type cdcTable struct {
	dsn, dir, bin, cfg string
	model, tok         string // the GN's files
	db                 *pgx.Conn
	ids                []string // the patents' ids, in insertion order
	texts              map[string]string
}

func newCDCTable(t *testing.T, n int) *cdcTable {
	t.Helper()
	dsn := pgtest.Database(t)
	model, tok := testenv.GN(t, "all-minilm-l6-v2")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	c := &cdcTable{dsn: dsn, dir: t.TempDir(), model: model, tok: tok, texts: map[string]string{}}
	ctx := context.Background()
	var err error
	if c.db, err = pgx.Connect(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A slot keeps its database in use: gone before the database is dropped.
		c.db.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database()")
		c.db.Close(context.Background())
	})
	c.exec(t, "CREATE TABLE docs (id text PRIMARY KEY, title text, body text)")
	dir := testenv.SharedData(t, "patents/uspto")
	for _, f := range []string{"ipg120327.196.xml", "ipg100105.small.xml"} {
		src, err := uspto.Open(uspto.Options{Path: filepath.Join(dir, f)})
		if err != nil {
			t.Fatal(err)
		}
		for len(c.ids) < n {
			d, _, err := src.Read(ctx)
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
			id, text := strings.TrimPrefix(d.ID, "uspto:"), d.Text
			if len(text) > 600 {
				text = text[:strings.LastIndexByte(text[:600], ' ')]
			}
			c.exec(t, "INSERT INTO docs VALUES ($1, $2, $3)", id, d.Title, text)
			c.ids = append(c.ids, id)
			c.texts[id] = text
		}
		src.Close(ctx)
	}
	if len(c.ids) < n {
		t.Fatalf("only %d patents in the shared files", len(c.ids))
	}
	c.bin = filepath.Join(c.dir, "reignpipe")
	if out, err := exec.Command("go", "build", "-o", c.bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building reignpipe: %v\n%s", err, out)
	}
	y := fmt.Sprintf(`version: 1
name: cdc
source: {type: postgres, dsn: %q, table: public.docs, title_column: title, text_columns: [body]}
gn: {name: all-minilm-l6-v2, model: %q, tokenizer: %q}
chunking: {k: 128, s: 128}
batching: {max_wait: 5ms, token_budget: 4096}
cache: {dir: %q}
sinks:
  - {type: pgvector, dsn: %q, table: vec}
  - {type: parquet, dir: %q}
dead_letter: {path: %q}
run: {state_dir: %q, progress: log, commit_every: 16, commit_interval: 300ms, summary: %q}
`, dsn, model, tok, filepath.Join(c.dir, "cache"), dsn, filepath.Join(c.dir, "parquet"), filepath.Join(c.dir, "dl.jsonl"),
		filepath.Join(c.dir, "state"), filepath.Join(c.dir, "summary.json"))
	if _, err := pipelines.Parse([]byte(y)); err != nil {
		t.Fatalf("pipeline file: %v\n%s", err, y)
	}
	c.cfg = filepath.Join(c.dir, "cdc.yaml")
	if err := os.WriteFile(c.cfg, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cdcTable) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := c.db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// start runs `reignpipe run` on the pipeline; its output goes to a log shown when the test fails.
func (c *cdcTable) start(t *testing.T, label string) *exec.Cmd {
	t.Helper()
	return c.launch(t, label, "run", c.cfg)
}

// launch runs reignpipe with args, its output going to a log shown when the test fails.
func (c *cdcTable) launch(t *testing.T, label string, args ...string) *exec.Cmd {
	t.Helper()
	f, err := os.Create(filepath.Join(c.dir, label+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(f.Name())
			t.Logf("%s log:\n%s", label, b)
		}
	})
	return cmd
}

// want is the table now: doc id -> the content hash of its text, as the sinks store it.
func (c *cdcTable) want(t *testing.T) map[string]int64 {
	t.Helper()
	rows, err := c.db.Query(context.Background(), "SELECT id, body FROM docs")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for rows.Next() {
		var id, body string
		if err := rows.Scan(&id, &body); err != nil {
			t.Fatal(err)
		}
		out["docs:"+id] = int64(xxhash.Sum64String(body))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// stored is what the pgvector table holds: doc id -> content hash.
func (c *cdcTable) stored(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	var table string
	err := c.db.QueryRow(context.Background(), `SELECT table_name FROM information_schema.columns
		WHERE column_name = 'embedding' AND table_name LIKE 'vec\_%' LIMIT 1`).Scan(&table)
	if errors.Is(err, pgx.ErrNoRows) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	rows, err := c.db.Query(context.Background(), "SELECT doc_id, content_hash FROM "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var h int64
		if err := rows.Scan(&id, &h); err != nil {
			t.Fatal(err)
		}
		out[id] = h
	}
	return out
}

func diff(got, want map[string]int64) string {
	var d []string
	for id, h := range want {
		if g, ok := got[id]; !ok {
			d = append(d, "missing "+id)
		} else if g != h {
			d = append(d, "stale "+id)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			d = append(d, "resurrected or never deleted "+id)
		}
	}
	if len(d) > 8 {
		d = append(d[:8], fmt.Sprintf("... %d in all", len(d)))
	}
	return strings.Join(d, ", ")
}

// caughtUp waits until the pgvector table holds exactly the table's rows and texts.
func (c *cdcTable) caughtUp(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		d := diff(c.stored(t), c.want(t))
		if d == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgvector after %s: %s", within, d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// change applies one random change: an update of the text, an update that leaves the text
// as it is, a delete, or an insert (a deleted id coming back among them).
func (c *cdcTable) change(t *testing.T, r *rand.Rand, n int) {
	t.Helper()
	id := c.ids[r.IntN(len(c.ids))]
	switch r.IntN(4) {
	case 0:
		c.exec(t, "UPDATE docs SET body = body || $2 WHERE id = $1", id, fmt.Sprintf(" amended %d", n))
	case 1:
		c.exec(t, "UPDATE docs SET title = $2 WHERE id = $1", id, fmt.Sprintf("retitled %d", n))
	case 2:
		c.exec(t, "DELETE FROM docs WHERE id = $1", id)
	case 3:
		c.exec(t, "INSERT INTO docs VALUES ($1, 'back', $2) ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body", id, c.texts[id])
	}
}

// The done-means test of the postgres source: the pipeline follows a table of 220 patents
// while inserts, updates that change the text and that do not, and deletes are applied, and
// is killed with SIGKILL twice at random points. After catch-up pgvector and the Parquet
// readers hold exactly the table's ids with the content hash of each row's current text;
// nothing is lost or resurrected; and a run whose changes leave the texts as they are embeds
// no window.
func TestPostgresSourceFollowsTheTable(t *testing.T) {
	c := newCDCTable(t, 220)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 28))
	n := 0
	for round := 0; round < 2; round++ {
		run := c.start(t, fmt.Sprintf("run%d", round+1))
		stop := time.Now().Add(time.Duration(3000+r.IntN(6000)) * time.Millisecond)
		for time.Now().Before(stop) {
			c.change(t, r, n)
			n++
			time.Sleep(50 * time.Millisecond)
		}
		if err := run.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = run.Wait()
	}
	run := c.start(t, "run3")
	for i := 0; i < 40; i++ {
		c.change(t, r, n)
		n++
	}
	c.caughtUp(t, 4*time.Minute)
	stopRun(t, run)
	latest, err := vectorfile.Latest(filepath.Join(c.dir, "parquet"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]int64{} // the newest version of each id, deleted ones left out
	for id, v := range latest {
		files[id] = int64(v.ContentHash)
	}
	if d := diff(files, c.want(t)); d != "" {
		t.Fatalf("Parquet after %d changes: %s", n, d)
	}

	// Changes that leave every text as it was: the cache has their windows.
	run = c.start(t, "run4")
	updated := int64(0) // rows deleted by the random changes are not there to update
	for i, id := range c.ids[:30] {
		tag, err := c.db.Exec(context.Background(), "UPDATE docs SET title = $2 WHERE id = $1", id, fmt.Sprintf("quiet %d", i))
		if err != nil {
			t.Fatal(err)
		}
		updated += tag.RowsAffected()
	}
	var upTo string
	if err := c.db.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&upTo); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var done bool
		if err := c.db.QueryRow(context.Background(), "SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = 'reignpipe_cdc'", upTo).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot did not pass the title-only updates")
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopRun(t, run)
	var sum struct {
		Inputs    int64 `json:"inputs_read"`
		GNWindows int64 `json:"gn_windows"`
	}
	b, err := os.ReadFile(filepath.Join(c.dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if updated == 0 || sum.Inputs < updated || sum.GNWindows != 0 {
		t.Fatalf("%d title-only updates: %d inputs, %d GN windows (want >= %d, 0)", updated, sum.Inputs, sum.GNWindows, updated)
	}
	if d := diff(c.stored(t), c.want(t)); d != "" {
		t.Fatalf("pgvector after the title-only updates: %s", d)
	}
}

// stopRun stops a run as Ctrl-C would and waits for it.
func stopRun(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the run did not stop within a minute of SIGTERM")
	}
}
