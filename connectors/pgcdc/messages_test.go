package pgcdc

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/pgtest"
)

// What the server, the role or the table do not allow is said with the setting to change,
// before anything is created.
func TestOpenMessages(t *testing.T) {
	admin := pgtest.DSN(t)
	role := fmt.Sprintf("cdc_norepl_%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { // after the database's drop (registered below, so run first)
		c := connect(t, admin)
		c.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	dsn := pgtest.Database(t)
	db := connect(t, dsn)
	mustExec(t, db, "CREATE TABLE docs (id bigint PRIMARY KEY, body text)")
	mustExec(t, db, "CREATE TABLE nokey (id bigint, body text)")
	mustExec(t, db, "CREATE TABLE composite (id bigint, part int, body text, PRIMARY KEY (id, part))")
	mustExec(t, db, "CREATE TABLE nothing (id bigint PRIMARY KEY, body text)")
	mustExec(t, db, "ALTER TABLE nothing REPLICA IDENTITY NOTHING")
	mustExec(t, db, "CREATE TABLE full_unique (id bigint UNIQUE, body text)")
	mustExec(t, db, "ALTER TABLE full_unique REPLICA IDENTITY FULL")
	mustExec(t, db, "CREATE TABLE by_index (k serial PRIMARY KEY, id text NOT NULL UNIQUE, body text)")
	mustExec(t, db, "ALTER TABLE by_index REPLICA IDENTITY USING INDEX by_index_id_key")
	mustExec(t, db, "CREATE VIEW v AS SELECT * FROM docs")
	mustExec(t, db, "CREATE ROLE "+role+" LOGIN NOREPLICATION")
	mustExec(t, db, "GRANT SELECT ON docs TO "+role)
	u, _ := url.Parse(dsn)
	u.User = url.User(role)
	noRepl := u.String()
	t.Cleanup(func() {
		db.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database()")
	})

	base := Config{DSN: dsn, Table: "docs", IDColumn: "id", TextColumns: []string{"body"}}
	with := func(f func(*Config)) Config { c := base; f(&c); return c }
	cases := []struct {
		name string
		c    Config
		want string // "" = opens
	}{
		{"a role without REPLICATION", with(func(c *Config) { c.DSN = noRepl }), `source.dsn: role "` + role + `" may not use replication; the postgres source needs a role with the REPLICATION attribute (ALTER ROLE`},
		{"no such table", with(func(c *Config) { c.Table = "public.nosuch" }), `source.table: there is no table "public.nosuch" in database`},
		{"not a name", with(func(c *Config) { c.Table = "a.b.c.d" }), `source.table: "a.b.c.d" is not a table name`},
		{"a view", with(func(c *Config) { c.Table = "v" }), `source.table: "public"."v" is not a table`},
		{"no such text column", with(func(c *Config) { c.TextColumns = []string{"body", "abstract"} }), `source.text_columns: table "public"."docs" has no column "abstract" (it has id, body)`},
		{"no such id column", with(func(c *Config) { c.IDColumn = "doc_id" }), `source.id_column: table "public"."docs" has no column "doc_id"`},
		{"no primary key", with(func(c *Config) { c.Table = "nokey" }), `source.id_column: a delete from "public"."nokey" must name column "id", but the log names a deleted row by its replica identity, which is its primary key, and it has none; make "id" the primary key`},
		{"a composite key", with(func(c *Config) { c.Table = "composite" }), `which is its primary key (id, part)`},
		{"replica identity nothing", with(func(c *Config) { c.Table = "nothing" }), `which is NOTHING`},
		{"the id column not the key", with(func(c *Config) { c.Table = "by_index"; c.IDColumn = "k" }), `a delete from "public"."by_index" must name column "k", but the log names a deleted row by its replica identity, which is the index it names (id)`},
		{"replica identity full, id unique", with(func(c *Config) { c.Table = "full_unique"; c.Slot, c.Publication = "ok_full", "ok_full" }), ""},
		{"replica identity by the id's index", with(func(c *Config) { c.Table = "by_index"; c.Slot, c.Publication = "ok_index", "ok_index" }), ""},
		{"a publication without the table", with(func(c *Config) { c.Publication = "pub_other" }), `source.publication: publication pub_other exists but does not publish "public"."docs"; ALTER PUBLICATION pub_other ADD TABLE "public"."docs"`},
	}
	mustExec(t, db, "CREATE PUBLICATION pub_other FOR TABLE composite")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := Open(ctx, Options{Config: c.c, Pipeline: "msg"})
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				s.Close(context.Background())
				return
			}
			if err == nil {
				s.Close(context.Background())
				t.Fatalf("opened; want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v\nwant %q", err, c.want)
			}
			if strings.Contains(err.Error(), "pgcdc") || strings.Contains(err.Error(), "Config") {
				t.Fatalf("%v speaks Go", err)
			}
		})
	}

	// Nothing was created for the refused ones: no slot named after the pipeline.
	var n int
	if err := db.QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", DerivedName("msg")).Scan(&n); err != nil || n != 0 {
		t.Errorf("slots named after the pipeline: %d (%v)", n, err)
	}
}

// A signal while connecting stops Open at once: it connects under the caller's context.
func TestOpenTakesTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	_, err := Open(ctx, Options{Config: Config{DSN: "postgres://nobody@10.255.255.1:5432/x?connect_timeout=60", Table: "docs", IDColumn: "id", TextColumns: []string{"body"}}})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("Open with a cancelled context: %v after %s", err, time.Since(start))
	}
}

// A server whose wal_level is not logical is refused with what to set. It is a second server
// of ops/postgres's (the shared one runs with logical, and others use it), set to replica.
func TestWalLevelReplica(t *testing.T) {
	ctl := os.Getenv("REIGNPIPE_PG_CTL")
	if ctl == "" {
		pgtest.DSN(t) // skips, or fails under REIGNPIPE_STRICT=1, saying how to get a server
		t.Skip("REIGNPIPE_PG_CTL not set")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	// Not t.TempDir: as root the server runs as another user, who must be able to enter it.
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("reignpipe-walreplica-%d", time.Now().UnixNano()))
	ctlRun := func(verb string) string {
		cmd := exec.Command(ctl, verb)
		cmd.Env = append(os.Environ(), "REIGNPIPE_PG_PORT="+port, "REIGNPIPE_PG_DIR="+dir)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", ctl, verb, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return lines[len(lines)-1]
	}
	t.Cleanup(func() { ctlRun("wipe") })
	dsn := ctlRun("start")
	db := connect(t, dsn)
	mustExec(t, db, "ALTER SYSTEM SET wal_level = replica")
	db.Close(context.Background())
	ctlRun("restart")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = Open(ctx, Options{Config: Config{DSN: dsn, Table: "docs", IDColumn: "id", TextColumns: []string{"body"}}})
	want := "source.dsn: the server runs with wal_level = replica; the postgres source follows the table by logical replication, which needs wal_level = logical (ALTER SYSTEM SET wal_level = logical"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("%v\nwant %q", err, want)
	}
}
