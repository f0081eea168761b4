package pgcdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// table is the followed table as the server describes it.
type table struct {
	oid       uint32
	ns, name  string
	quoted    string            // schema-qualified and quoted, for statements
	types     map[string]string // column name -> its type, as format_type writes it
	columns   []string          // in table order, for messages
	replident byte              // pg_class.relreplident: d(efault), n(othing), f(ull), i(ndex)
}

// checkServer says, naming the setting to change, why this server or role cannot follow a
// table by logical replication.
func checkServer(ctx context.Context, conn *pgx.Conn) error {
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return fmt.Errorf("source.dsn: reading the server's wal_level: %w", err)
	}
	if err := walLevelError(level); err != nil {
		return err
	}
	var role string
	var may bool
	if err := conn.QueryRow(ctx, "SELECT current_user, rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&role, &may); err != nil {
		return fmt.Errorf("source.dsn: reading the role's attributes: %w", err)
	}
	return roleError(role, may)
}

// walLevelError is the message for a server whose wal_level is not logical.
func walLevelError(level string) error {
	if level == "logical" {
		return nil
	}
	return fmt.Errorf("source.dsn: the server runs with wal_level = %s; the postgres source follows the table by logical replication, which needs wal_level = logical (ALTER SYSTEM SET wal_level = logical, or set it in postgresql.conf, then restart the server)", level)
}

// roleError is the message for a role that may not replicate.
func roleError(role string, may bool) error {
	if may {
		return nil
	}
	return fmt.Errorf("source.dsn: role %q may not use replication; the postgres source needs a role with the REPLICATION attribute (ALTER ROLE %s REPLICATION, as a superuser) or a superuser", role, pgx.Identifier{role}.Sanitize())
}

// resolveTable finds source.table (the server parses the name: schema-qualified, quoted or
// on the search_path) and checks that the role may read it and that the named columns exist.
func resolveTable(ctx context.Context, conn *pgx.Conn, c Config) (*table, error) {
	t := &table{types: map[string]string{}}
	var oid *uint32
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1)::oid", c.Table).Scan(&oid); err != nil {
		return nil, fmt.Errorf("source.table: %q is not a table name: %w", c.Table, err)
	}
	if oid == nil {
		var path string
		_ = conn.QueryRow(ctx, "SHOW search_path").Scan(&path)
		return nil, fmt.Errorf("source.table: there is no table %q in database %s (search_path %s)", c.Table, conn.Config().Database, path)
	}
	t.oid = *oid
	var kind, ident string
	var readable bool
	err := conn.QueryRow(ctx, `SELECT n.nspname, c.relname, c.relkind::text, c.relreplident::text, has_table_privilege(c.oid, 'SELECT')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`, t.oid).Scan(&t.ns, &t.name, &kind, &ident, &readable)
	if err != nil {
		return nil, fmt.Errorf("source.table: describing %q: %w", c.Table, err)
	}
	t.quoted = pgx.Identifier{t.ns, t.name}.Sanitize()
	t.replident = ident[0]
	switch {
	case kind != "r" && kind != "p":
		return nil, fmt.Errorf("source.table: %s is not a table (a view or another relation cannot be replicated)", t.quoted)
	case !readable:
		return nil, fmt.Errorf("source.table: the role may not read %s (GRANT SELECT ON %s TO the role)", t.quoted, t.quoted)
	}
	rows, err := conn.Query(ctx, `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, t.oid)
	if err != nil {
		return nil, fmt.Errorf("source.table: listing the columns of %s: %w", t.quoted, err)
	}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, err
		}
		t.types[name] = typ
		t.columns = append(t.columns, name)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("source.table: listing the columns of %s: %w", t.quoted, err)
	}
	check := func(key, col string) error {
		if _, ok := t.types[col]; !ok {
			return fmt.Errorf("source.%s: table %s has no column %q (it has %s)", key, t.quoted, col, strings.Join(t.columns, ", "))
		}
		return nil
	}
	if err := check("id_column", c.IDColumn); err != nil {
		return nil, err
	}
	if c.TitleColumn != "" {
		if err := check("title_column", c.TitleColumn); err != nil {
			return nil, err
		}
	}
	for _, col := range c.TextColumns {
		if err := check("text_columns", col); err != nil {
			return nil, err
		}
	}
	return t, checkIdentity(ctx, conn, t, c.IDColumn)
}

// checkIdentity makes sure a delete from t names its id: the log carries a deleted row's
// replica identity only (its primary key by default), so the id column must be that key on
// its own, or the identity must be the whole row (FULL) with the id unique.
func checkIdentity(ctx context.Context, conn *pgx.Conn, t *table, id string) error {
	keyOf := func(where string) ([]string, string, error) {
		var cols []string
		var index string
		err := conn.QueryRow(ctx, `SELECT i.indexrelid::regclass::text, array_agg(a.attname::text ORDER BY a.attnum)
			FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
			WHERE i.indrelid = $1 AND `+where+` GROUP BY i.indexrelid LIMIT 1`, t.oid).Scan(&index, &cols)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, "", nil
		}
		return cols, index, err
	}
	var cols []string
	var what string
	var err error
	switch t.replident {
	case 'd':
		cols, _, err = keyOf("i.indisprimary")
		what = "its primary key"
		if cols == nil && err == nil {
			what = "its primary key, and it has none"
		}
	case 'i':
		cols, _, err = keyOf("i.indisreplident")
		what = "the index it names"
	case 'f':
		cols, _, err = keyOf(fmt.Sprintf("i.indisunique AND i.indnatts = 1 AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = %d AND attname = %s)", t.oid, quoteLiteral(id)))
		if err == nil && cols != nil {
			return nil // the whole old row is logged, and the id is unique
		}
		what = "FULL, but the id column has no unique index"
	case 'n':
		what = "NOTHING"
	}
	if err != nil {
		return fmt.Errorf("source.id_column: reading the replica identity of %s: %w", t.quoted, err)
	}
	if slices.Equal(cols, []string{id}) {
		return nil
	}
	if len(cols) > 0 {
		what += " (" + strings.Join(cols, ", ") + ")"
	}
	return fmt.Errorf("source.id_column: a delete from %s must name column %q, but the log names a deleted row by its replica identity, which is %s; make %q the primary key, or give it a unique index and ALTER TABLE %s REPLICA IDENTITY USING INDEX that_index",
		t.quoted, id, what, id, t.quoted)
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// ensurePublication creates the publication of t's inserts, updates and deletes when it is
// missing, and checks that an existing one publishes t.
func ensurePublication(ctx context.Context, conn *pgx.Conn, t *table, name string) error {
	var exists, has bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1),
		EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`,
		name, t.ns, t.name).Scan(&exists, &has)
	if err != nil {
		return fmt.Errorf("source.publication: looking up publication %s: %w", name, err)
	}
	switch {
	case has:
		return nil
	case exists:
		return fmt.Errorf("source.publication: publication %s exists but does not publish %s; ALTER PUBLICATION %s ADD TABLE %s, or name another source.publication", name, t.quoted, name, t.quoted)
	}
	// TRUNCATE is left out: it names no rows, so the source could not say which documents went.
	stmt := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert, update, delete')", name, t.quoted)
	if _, err := conn.Exec(ctx, stmt); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" {
			return fmt.Errorf("source.publication: the role may not create publication %s (%s); run %s as the table's owner", name, pe.Message, stmt)
		}
		return fmt.Errorf("source.publication: creating publication %s: %w", name, err)
	}
	return nil
}

// slotInfo is an existing replication slot.
type slotInfo struct {
	plugin, database string
	confirmed        *string // confirmed_flush_lsn, as the server writes it
	activePID        *int32
}

// slotWait is how long a slot still held by a previous run's server process is waited for: a
// run that just stopped, or was killed (its connection closed by the kernel), lets go of its
// slot once the server has read what it sent last (its final position).
const slotWait = 15 * time.Second

func lookupSlot(ctx context.Context, conn *pgx.Conn, name string) (*slotInfo, error) {
	var s slotInfo
	deadline := time.Now().Add(slotWait)
	for {
		err := conn.QueryRow(ctx, `SELECT coalesce(plugin, ''), coalesce(database, ''), confirmed_flush_lsn::text, active_pid
			FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&s.plugin, &s.database, &s.confirmed, &s.activePID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("source.slot: looking up slot %s: %w", name, err)
		}
		if s.activePID == nil || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	db := conn.Config().Database
	switch {
	case s.plugin != "pgoutput" || s.database != db:
		return nil, fmt.Errorf("source.slot: slot %s exists for plugin %q in database %q, not pgoutput in %q; name another source.slot", name, s.plugin, s.database, db)
	case s.activePID != nil:
		return nil, fmt.Errorf("source.slot: slot %s is in use by server process %d (another run following it?); one slot serves one run", name, *s.activePID)
	case s.confirmed == nil:
		return nil, fmt.Errorf("source.slot: slot %s has no confirmed position (it is still being created?)", name)
	}
	return &s, nil
}
