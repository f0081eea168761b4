package pgvector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// space is a vector space whose table exists and is registered.
type space struct {
	table   string
	dim     int
	written bool // rows were sent to it (index: deferred builds its index at Close)
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func spacesTable(prefix string) string { return prefix + "_spaces" }

func versionCmp(prefix string) string { return prefix + "_version_cmp" }

// TableName is the table of space under prefix: <prefix>_<kind>_<8 hex of xxhash64(space)>,
// kind naming what the space is (reign, gn, or the label's own scheme) so psql listings read.
func TableName(prefix, sp string) string {
	kind := "space"
	switch {
	case strings.HasPrefix(sp, "reign:"):
		kind = "reign"
	case strings.HasPrefix(sp, "gn-meanpool:"):
		kind = "gn"
	default:
		var b strings.Builder
		scheme, _, _ := strings.Cut(sp, ":")
		for _, c := range strings.ToLower(scheme) {
			if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
				b.WriteRune(c)
			}
			if b.Len() == 8 {
				break
			}
		}
		if b.Len() > 0 {
			kind = b.String()
		}
	}
	return fmt.Sprintf("%s_%s_%08x", prefix, kind, uint32(xxhash.Sum64String(sp)))
}

// lockKey is the advisory lock that serializes schema changes under one prefix, so two
// writers that create the same table at once do not race in the catalog.
func lockKey(prefix string) int64 {
	return int64(xxhash.Sum64String("reignpipe pgvector schema " + prefix))
}

// opsClass is the operator class of distance's HNSW index.
func opsClass(distance string) string {
	switch distance {
	case Cosine:
		return "vector_cosine_ops"
	case L2:
		return "vector_l2_ops"
	}
	return "vector_ip_ops"
}

// distanceOp is the operator an index of distance orders by (smaller is nearer).
func distanceOp(distance string) string {
	switch distance {
	case Cosine:
		return "<=>"
	case L2:
		return "<->"
	}
	return "<#>"
}

func createIndexSQL(table, distance string) string {
	return fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s USING hnsw (embedding %s)",
		ident(table+"_hnsw"), ident(table), opsClass(distance))
}

func createTableSQL(table string, dim int) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	doc_id       text PRIMARY KEY,
	version      text NOT NULL,
	content_hash bigint NOT NULL,
	title        text NOT NULL DEFAULT '',
	source       text NOT NULL DEFAULT '',
	n_chunks     integer NOT NULL,
	n_tokens     bigint NOT NULL,
	embedding    vector(%d) NOT NULL,
	written_at   timestamptz NOT NULL DEFAULT now())`, ident(table), dim)
}

// versionCmpSQL defines <prefix>_version_cmp(a, b): -1, 0 or 1 as schemas.CompareVersions
// orders a and b. Two all-digit versions compare as numbers (leading zeros ignored: shorter
// wins, then digit by digit); anything else byte by byte, which COLLATE "C" gives whatever the
// database's collation.
func versionCmpSQL(prefix string) string {
	return fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s(a text, b text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT CASE
	WHEN a ~ '^[0-9]+$' AND b ~ '^[0-9]+$' THEN
		CASE
			WHEN length(ltrim(a, '0')) < length(ltrim(b, '0')) THEN -1
			WHEN length(ltrim(a, '0')) > length(ltrim(b, '0')) THEN 1
			WHEN ltrim(a, '0') COLLATE "C" < ltrim(b, '0') COLLATE "C" THEN -1
			WHEN ltrim(a, '0') COLLATE "C" > ltrim(b, '0') COLLATE "C" THEN 1
			ELSE 0
		END
	WHEN a COLLATE "C" < b COLLATE "C" THEN -1
	WHEN a COLLATE "C" > b COLLATE "C" THEN 1
	ELSE 0
END
$$`, ident(versionCmp(prefix)))
}

func createSpacesSQL(prefix string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	space      text PRIMARY KEY,
	table_name text NOT NULL UNIQUE,
	dim        integer NOT NULL,
	distance   text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now())`, ident(spacesTable(prefix)))
}

// setup creates the prefix's registry table, version function and deletions table (once per
// prefix; cheap when they exist), and purges expired deletions.
func (s *Sink) setup(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(s.o.Table)); err != nil {
			return err
		}
		for _, q := range append([]string{createSpacesSQL(s.o.Table), versionCmpSQL(s.o.Table)}, createDeletionsSQL(s.o.Table)...) {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		s.purged = time.Now()
		return s.purge(ctx, tx)
	})
}

// space returns the table of sp, creating and registering it on first use. The DDL commits on
// a connection of its own, so it neither waits for nor rolls back with the open write
// transaction, and another writer sees the table at once.
func (s *Sink) space(ctx context.Context, name string, dim int) (*space, error) {
	if sp, ok := s.spaces[name]; ok {
		if sp.dim != dim {
			return nil, permanent(nil, "pgvector sink: space %s has %d-dimensional vectors in table %s; this vector has %d", name, sp.dim, sp.table, dim)
		}
		return sp, nil
	}
	if err := s.o.checkDim(dim); err != nil {
		return nil, permanent(nil, "%s", err.Error())
	}
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var sp *space
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var err error
		sp, err = s.registerSpace(ctx, tx, name, dim)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.spaces[name] = sp
	return sp, nil
}

func (s *Sink) registerSpace(ctx context.Context, tx pgx.Tx, name string, dim int) (*space, error) {
	prefix := s.o.Table
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(prefix)); err != nil {
		return nil, err
	}
	reg := ident(spacesTable(prefix))
	var table, distance string
	var haveDim int
	err := tx.QueryRow(ctx, "SELECT table_name, dim, distance FROM "+reg+" WHERE space = $1", name).Scan(&table, &haveDim, &distance)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		table = TableName(prefix, name)
		var other string
		err := tx.QueryRow(ctx, "SELECT space FROM "+reg+" WHERE table_name = $1", table).Scan(&other)
		if err == nil {
			return nil, permanent(nil, "pgvector sink: spaces %s and %s both hash to table %s: use another %s.table for one of them", other, name, table, s.o.Key)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
	case err != nil:
		return nil, err
	case haveDim != dim:
		return nil, permanent(nil, "pgvector sink: space %s is registered in %s with %d dimensions (table %s); these vectors have %d",
			name, spacesTable(prefix), haveDim, table, dim)
	case distance != s.o.Distance:
		return nil, permanent(nil, "pgvector sink: space %s is registered in %s with distance %s (table %s); %s.distance is %s",
			name, spacesTable(prefix), distance, table, s.o.Key, s.o.Distance)
	}
	// DDL only where something is missing: CREATE INDEX, even IF NOT EXISTS, waits for every
	// open write transaction on the table, and this one holds the schema lock meanwhile. A
	// registered table dropped by hand comes back rather than failing every batch.
	var haveTable, haveIndex bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
		ident(table), ident(table+"_hnsw")).Scan(&haveTable, &haveIndex); err != nil {
		return nil, err
	}
	if !haveTable {
		if _, err := tx.Exec(ctx, createTableSQL(table, dim)); err != nil {
			return nil, err
		}
	}
	switch {
	case s.o.Index != IndexHNSW || haveIndex:
	case !haveTable:
		if _, err := tx.Exec(ctx, createIndexSQL(table, s.o.Distance)); err != nil {
			return nil, err
		}
	case s.deletedIn[table]:
		// The open write transaction deleted from the table: CREATE INDEX would wait for it,
		// and it waits for this. A search works without the index meanwhile.
		s.o.Logger.Warn("pgvector sink: the table's HNSW index is left for a later run (this commit deletes from it)", "table", table, "space", name)
	default:
		if err := s.indexExisting(ctx, tx, table, name); err != nil {
			return nil, err
		}
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+reg+" (space, table_name, dim, distance) VALUES ($1, $2, $3, $4) ON CONFLICT (space) DO NOTHING",
		name, table, dim, s.o.Distance); err != nil {
		return nil, err
	}
	return &space{table: table, dim: dim}, nil
}

// indexExisting builds the HNSW index of a table another sink made with index: deferred or
// none. That sink's open transaction may hold the table until its next Flush: after a while
// the build is left to a later open, since a search works without the index meanwhile.
func (s *Sink) indexExisting(ctx context.Context, tx pgx.Tx, table, name string) error {
	sp, err := tx.Begin(ctx) // a savepoint: a lock timeout must not abort the registration
	if err != nil {
		return err
	}
	start := time.Now()
	_, err = sp.Exec(ctx, "SET LOCAL lock_timeout = '10s'")
	if err == nil {
		_, err = sp.Exec(ctx, createIndexSQL(table, s.o.Distance))
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55P03" {
		s.o.Logger.Warn("pgvector sink: the table is busy, its HNSW index is left for a later run", "table", table, "space", name)
		return sp.Rollback(ctx)
	}
	if err != nil {
		return err
	}
	s.o.Logger.Info("pgvector sink: built the HNSW index of an existing table", "table", table, "space", name,
		"seconds", time.Since(start).Seconds())
	return sp.Commit(ctx)
}
