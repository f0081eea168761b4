package pgtest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting to %s: %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// atLeast compares dotted versions numerically: "0.10.0" is after "0.8.0".
func atLeast(version, min string) bool {
	v, m := strings.Split(version, "."), strings.Split(min, ".")
	for i := range m {
		if i >= len(v) {
			return false
		}
		a, errA := strconv.Atoi(v[i])
		b, _ := strconv.Atoi(m[i])
		if errA != nil || a != b {
			return errA == nil && a > b
		}
	}
	return true
}

func TestAtLeast(t *testing.T) {
	for _, c := range []struct {
		v, min string
		want   bool
	}{{"0.8.0", "0.8.0", true}, {"0.8.1", "0.8.0", true}, {"0.10.0", "0.8.0", true}, {"1.0", "0.8.0", true},
		{"0.7.4", "0.8.0", false}, {"0.8", "0.8.0", false}, {"x", "0.8.0", false}} {
		if got := atLeast(c.v, c.min); got != c.want {
			t.Errorf("atLeast(%q, %q) = %v, want %v", c.v, c.min, got, c.want)
		}
	}
}

// ops/postgres builds pgvector 0.8 or later; an older one (a stray system package, say) lacks
// iterative index scans, which filtered nearest-neighbour queries need.
func TestExtensionVersion(t *testing.T) {
	t.Parallel()
	conn := connect(t, DSN(t))
	var v string
	if err := conn.QueryRow(context.Background(), "SELECT extversion FROM pg_extension WHERE extname = 'vector'").Scan(&v); err != nil {
		t.Fatalf("the vector extension is not in the shared database: %v", err)
	}
	if !atLeast(v, "0.8.0") {
		t.Fatalf("pgvector %s, want 0.8.0 or later", v)
	}
	t.Logf("pgvector %s", v)
}

func TestVectorColumnAndHNSW(t *testing.T) {
	t.Parallel()
	dsn := Database(t)
	conn := connect(t, dsn)
	ctx := context.Background()
	for _, sql := range []string{
		"CREATE TABLE items (id bigint PRIMARY KEY, embedding vector(3) NOT NULL)",
		"INSERT INTO items VALUES (1, '[1,0,0]'), (2, '[0,1,0]'), (3, '[0,0,1]')",
		"CREATE INDEX items_hnsw ON items USING hnsw (embedding vector_cosine_ops)",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The dimension is enforced, so a sink writing the wrong GN's vectors fails loudly.
	if _, err := conn.Exec(ctx, "INSERT INTO items VALUES (4, '[1,2]')"); err == nil {
		t.Fatal("a 2-dimensional vector was accepted into a vector(3) column")
	}
	var method string
	if err := conn.QueryRow(ctx, `SELECT am.amname FROM pg_class c JOIN pg_am am ON am.oid = c.relam
		WHERE c.relname = 'items_hnsw'`).Scan(&method); err != nil || method != "hnsw" {
		t.Fatalf("index items_hnsw: access method %q, %v", method, err)
	}
	// Through the index: sequential scans off, so a plan that ignores it cannot answer.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := tx.QueryRow(ctx, "SELECT id FROM items ORDER BY embedding <=> $1::vector LIMIT 1", "[0.1,0.9,0]").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if id != 2 {
		t.Fatalf("nearest to [0.1,0.9,0] is %d, want 2", id)
	}
}

func TestDatabaseIsolatedAndDropped(t *testing.T) {
	t.Parallel()
	var dsn string
	ok := t.Run("owner", func(t *testing.T) {
		dsn = Database(t)
		if _, err := connect(t, dsn).Exec(context.Background(), "CREATE TABLE mine (x int)"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := connect(t, DSN(t)).QueryRow(context.Background(),
			"SELECT count(*) FROM pg_tables WHERE tablename = 'mine'").Scan(&n); err != nil || n != 0 {
			t.Fatalf("the shared database sees a test database's table (%d, %v)", n, err)
		}
	})
	if !ok || dsn == "" {
		return
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := connect(t, DSN(t)).QueryRow(context.Background(),
		"SELECT count(*) FROM pg_database WHERE datname = $1", cfg.Database).Scan(&n); err != nil || n != 0 {
		t.Fatalf("database %s still exists after its test (%d, %v)", cfg.Database, n, err)
	}
}

// A committed row survives a SIGKILL of the server (fsync is on), and Start brings it back.
func TestKillAndStart(t *testing.T) {
	dsn := Database(t)
	ctx := context.Background()
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v vector(2)); INSERT INTO kept VALUES ('[1,2]')"); err != nil {
		t.Fatal(err)
	}
	Kill(t)
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("a connection still answers after Kill")
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if c, err := pgx.Connect(pctx, dsn); err == nil {
		c.Close(ctx)
		t.Fatal("a new connection succeeded after Kill")
	}
	Start(t)
	var v string
	if err := connect(t, dsn).QueryRow(ctx, "SELECT v::text FROM kept").Scan(&v); err != nil || v != "[1,2]" {
		t.Fatalf("after the crash: %q, %v", v, err)
	}
	Restart(t)
	if err := connect(t, dsn).QueryRow(ctx, "SELECT v::text FROM kept").Scan(&v); err != nil || v != "[1,2]" {
		t.Fatalf("after the restart: %q, %v", v, err)
	}
}
