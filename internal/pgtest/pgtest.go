// Package pgtest gives tests the real PostgreSQL server with pgvector that ops/postgres runs
// (`make test` starts it through ops/with-postgres and sets REIGNPIPE_PG_DSN). Without a server
// a test skips, or fails under REIGNPIPE_STRICT=1, so nothing database-related passes by not
// running.
//
// Every test package shares the one server, and `go test ./...` runs packages at the same time.
// Database gives each test a database of its own, so no test sees another's tables. The lock is
// kafkatest's: DSN holds it shared for the test's lifetime, while Restart, Kill and Start hold it
// exclusively, so a test that takes the server down waits for the tests using it to finish, and
// tests that need it wait until it is back.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// DSN returns the DSN of the shared database reignpipe on the test server (REIGNPIPE_PG_DSN).
// Tests that create tables should use Database instead.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("REIGNPIPE_PG_DSN")
	if dsn == "" {
		testenv.Missing(t, "REIGNPIPE_PG_DSN not set: integration tests against a real PostgreSQL with pgvector run under make test, which starts the server (ops/with-postgres; by hand: ops/with-postgres go test ./...)")
	}
	lock.Acquire(t, serverKey(dsn), syscall.LOCK_SH)
	return dsn
}

// Database creates a database no other test uses, with the vector extension, and returns its
// DSN. It is dropped when the test ends, connections still open to it included.
func Database(t testing.TB) string {
	t.Helper()
	admin := DSN(t)
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("pgtest: REIGNPIPE_PG_DSN %q is not a URL: %v", admin, err)
	}
	name := databaseName(t)
	ident := pgx.Identifier{name}.Sanitize()
	exec1(t, admin, "CREATE DATABASE "+ident)
	t.Cleanup(func() {
		if err := execSQL(admin, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	dsn := u.String()
	exec1(t, dsn, "CREATE EXTENSION vector")
	return dsn
}

var unsafeNameChars = regexp.MustCompile(`[^a-z0-9]+`)

// databaseName: the test's name, so that a database left behind by a crashed run says whose it
// was, and a random suffix. PostgreSQL truncates identifiers at 63 bytes.
func databaseName(t testing.TB) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	base := strings.Trim(unsafeNameChars.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	return "t_" + base + "_" + hex.EncodeToString(b)
}

func exec1(t testing.TB, dsn, sql string) {
	t.Helper()
	if err := execSQL(dsn, sql); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

func execSQL(dsn, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// Restart stops the server (pg_ctl stop -m fast) and starts it again on the same data.
func Restart(t testing.TB) { disrupt(t, "restart") }

// Kill ends the server and its backends with SIGKILL, as a crash would; the data stays, and the
// next start runs crash recovery. The server is started again when the test ends, so a test
// cannot leave it down for the others.
func Kill(t testing.TB) { disrupt(t, "kill") }

// Start starts the server if it is not running (after Kill) and waits until it serves.
func Start(t testing.TB) { disrupt(t, "start") }

func disrupt(t testing.TB, verb string) {
	t.Helper()
	dsn := DSN(t)
	lock.Acquire(t, serverKey(dsn), syscall.LOCK_EX)
	if verb != "start" {
		// Registered after the cleanup that releases the lock, so it runs first: the server is
		// up again before another test may use it. A start on a running server costs nothing.
		t.Cleanup(func() {
			if out, err := run(dsn, "start"); err != nil {
				t.Errorf("%s start after the test: %v\n%s", Ctl(), err, out)
			}
		})
	}
	if out, err := run(dsn, verb); err != nil {
		t.Fatalf("%s %s: %v\n%s", Ctl(), verb, err, out)
	}
}

// Ctl is the ops/postgres script that runs the server (REIGNPIPE_PG_CTL, else the repository's).
func Ctl() string {
	if p := os.Getenv("REIGNPIPE_PG_CTL"); p != "" {
		return p
	}
	return filepath.Join(testenv.Root(), "ops", "postgres")
}

func run(dsn string, args ...string) ([]byte, error) {
	// Crash recovery of a test-sized cluster takes seconds; the limit is for a server that hangs.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, Ctl(), args...)
	cmd.Env = os.Environ()
	// ops/postgres must act on the server the tests were given, whatever its default port.
	if u, err := url.Parse(dsn); err == nil && u.Port() != "" {
		cmd.Env = append(cmd.Env, "REIGNPIPE_PG_PORT="+u.Port())
	}
	return cmd.CombinedOutput()
}

// lock is held shared by every test using the server and exclusively by one taking it down.
var lock = testenv.NewServerLock("pg")

// serverKey names the server a DSN points at (host and port), not the database: the lock is the
// server's.
func serverKey(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		return u.Host
	}
	return dsn
}
