package pgvector

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	pgxvec "github.com/pgvector/pgvector-go/pgx"
)

// Backoff between retries: doubling from retryFirst, capped so a database that comes back is
// noticed within a few seconds.
const (
	retryFirst = 100 * time.Millisecond
	retryCap   = 4 * time.Second
)

// permanentError is a failure that waiting cannot cure: bad credentials, a missing database or
// extension, a space registered with another dimension. It is returned at once.
type permanentError struct {
	msg string
	err error
}

func (e *permanentError) Error() string { return e.msg }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(err error, format string, args ...any) error {
	return &permanentError{msg: fmt.Sprintf(format, args...), err: err}
}

// parseDSN parses dsn ("" = the PG* environment variables). Its error never repeats the
// string: a malformed one cannot be trusted to have its password found and hidden.
// who says whose it is ("pgvector sink"), name names the setting ("sinks[0].dsn").
func parseDSN(dsn, who, name string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		if dsn == "" {
			name = "the PG* environment variables (" + name + " is empty)"
		}
		return nil, fmt.Errorf("%s: %s is not a valid PostgreSQL connection string: use a URL postgres://USER@HOST:PORT/DATABASE or key=value pairs (host=... port=... dbname=... user=...)", who, name)
	}
	// Statements are sent once per batch of hundreds of rows: the extra round trip of an
	// unnamed prepare costs nothing, and nothing has to be invalidated after a reconnect.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	return cfg, nil
}

// target names the database for messages: host:port/database, never the password.
func target(c pgconn.Config) string {
	host := c.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(int(c.Port)) + "/" + c.Database
}

// connect opens the sink's connection, makes sure the vector extension is there, and registers
// its types.
func (s *Sink) connect(ctx context.Context) error {
	conn, err := connectChecked(ctx, s.cfg)
	if err != nil {
		return err
	}
	s.conn = conn
	return nil
}

// connectChecked connects and checks the extension; the vector type is registered for pgx's
// binary protocol.
func connectChecked(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := ensureExtension(ctx, conn, cfg.Config); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	if err := pgxvec.RegisterTypes(ctx, conn); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

func ensureExtension(ctx context.Context, conn *pgx.Conn, c pgconn.Config) error {
	var version string
	err := conn.QueryRow(ctx, "SELECT extversion FROM pg_extension WHERE extname = 'vector'").Scan(&version)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS vector"); err != nil {
		if !isPg(err) {
			return err
		}
		return permanent(err, "pgvector sink: the database at %s has no vector extension and user %s cannot create it (%s): run `CREATE EXTENSION vector;` in database %s as a superuser (pgvector must be installed on the server)",
			target(c), c.User, pgMessage(err), c.Database)
	}
	return nil
}

func (s *Sink) ensureConn(ctx context.Context) error {
	if s.conn != nil && !s.conn.IsClosed() {
		return nil
	}
	s.conn = nil
	return s.connect(ctx)
}

// reset forgets the connection and the open transaction after a failure: the next attempt
// starts over on a new connection and sends every uncommitted row again.
func (s *Sink) reset() {
	if s.tx != nil && s.conn != nil && !s.conn.IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.tx.Rollback(ctx)
		cancel()
	}
	s.drop()
	s.sent = 0
	clear(s.pending)
	clear(s.deletedIn)
}

// retry runs fn until it succeeds, fails for good, ctx ends or RetryTimeout has passed since
// the first failure. Between attempts the connection is dropped and backoff (exponential, with
// jitter) waited; each retry is logged with its reason.
func (s *Sink) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	var deadline time.Time
	wait := retryFirst
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			s.reset()
			return fmt.Errorf("pgvector sink: %s at %s stopped: %w", what, s.target, ctx.Err())
		}
		if !transient(err, s.conn) {
			s.reset()
			return s.explain(err)
		}
		s.reset()
		if deadline.IsZero() {
			deadline = time.Now().Add(s.o.RetryTimeout)
		}
		left := time.Until(deadline)
		if left <= 0 {
			if what == "connect" {
				return fmt.Errorf("pgvector sink: the database at %s could not be reached for %s: %s", s.target, s.o.RetryTimeout, s.scrub(err.Error()))
			}
			return fmt.Errorf("pgvector sink: the database at %s did not accept the batch for %s: %s", s.target, s.o.RetryTimeout, s.scrub(err.Error()))
		}
		// Full jitter on the upper half: writers that lost the same server do not come back in
		// step.
		d := min(wait/2+rand.N(wait/2+1), left)
		s.o.Logger.Warn("pgvector sink: transient failure, retrying", "target", s.target, "during", what,
			"attempt", attempt, "in", d.Round(time.Millisecond), "rows_waiting", len(s.rows), "err", s.scrub(err.Error()))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pgvector sink: %s at %s stopped: %w", what, s.target, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, retryCap)
	}
}

// transient says whether waiting may cure err: the server down or restarting, the connection
// lost, a deadlock or serialization failure between writers. A failure that is not the
// server's answer is taken as the network's when it left no usable connection behind.
func transient(err error, conn *pgx.Conn) bool {
	var perm *permanentError
	if errors.As(err, &perm) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return transientCode(pe.Code)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return false
	}
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verify) {
		return false
	}
	// A connection that could not be made (refused, reset, timed out), the schema DDL's own
	// included while the sink's connection has not noticed the server is gone.
	var connect *pgconn.ConnectError
	if errors.As(err, &connect) {
		return true
	}
	return conn == nil || conn.IsClosed()
}

func transientCode(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"): // connection exception
		return true
	case strings.HasPrefix(code, "53"): // insufficient resources: too many connections, disk full
		return true
	}
	switch code {
	case "40001", "40P01", // serialization failure, deadlock between writers
		"57P01", "57P02", "57P03", // shutting down, crashed, starting up
		"25006": // read-only: a standby during a failover
		return true
	}
	return false
}

func isPg(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}

func pgMessage(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Message + " (SQLSTATE " + pe.Code + ")"
	}
	return err.Error()
}

// explain turns a permanent failure into the message a user can act on.
func (s *Sink) explain(err error) error {
	return explain(err, s.cfg.Config, "pgvector sink", s.o.Key+".dsn")
}

// who says whose it is ("pgvector sink"), dsn names the setting ("sinks[0].dsn").
func explain(err error, c pgconn.Config, who, dsn string) error {
	var perm *permanentError
	if errors.As(err, &perm) {
		return err
	}
	msg := scrub(err.Error(), c.Password)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000":
			return permanent(err, "%s: the database at %s refused user %s: %s (check %s, PGUSER and PGPASSWORD)", who, target(c), c.User, pe.Message, dsn)
		case "3D000":
			return permanent(err, "%s: the server at %s has no database %s (%s)", who, target(c), c.Database, dsn)
		}
		msg = scrub(pgMessage(err), c.Password)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return permanent(err, "%s: host %s of %s is not known (%s)", who, c.Host, dsn, dns.Err)
	}
	return permanent(err, "%s: %s: %s", who, target(c), msg)
}

func (s *Sink) scrub(msg string) string { return scrub(msg, s.cfg.Password) }

// scrub hides the password should a driver message ever repeat it.
func scrub(msg, password string) string {
	if password == "" {
		return msg
	}
	return strings.ReplaceAll(msg, password, "xxxxx")
}
