package pgvector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	pgv "github.com/pgvector/pgvector-go"
	pgxvec "github.com/pgvector/pgvector-go/pgx"
	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/schemas"
)

// SearchOptions configure a Searcher. Table is the sink's table prefix ("" = reignpipe); DSN as
// for the sink ("" = the PG* environment variables).
type SearchOptions struct{ DSN, Table string }

// Searcher answers nearest-neighbour queries over the tables a Sink wrote: the pgvector sink's
// connectors.VectorStore. It is safe for concurrent use: queries share a connection pool.
type Searcher struct {
	pool   *pgxpool.Pool
	prefix string
	target string

	mu     sync.Mutex
	spaces map[string]SpaceInfo // registered spaces seen so far (Rows not kept)
	hnsw   map[string]bool      // tables seen with a valid HNSW index
}

// SpaceInfo describes one registered space: its table, distance, dimension and row count.
type SpaceInfo struct {
	Space, Table, Distance string
	Dim                    int
	Rows                   int64
}

// OpenSearcher connects to the database and checks that the prefix's registry table exists.
func OpenSearcher(ctx context.Context, o SearchOptions) (*Searcher, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if why := CheckTable(o.Table); why != "" {
		return nil, fmt.Errorf("pgvector search: table prefix %s", why)
	}
	cc, err := parseDSN(o.DSN, "pgvector search", "the dsn")
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(o.DSN)
	if err != nil {
		return nil, err // parseDSN accepted the same string
	}
	cfg.ConnConfig = cc
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error { return pgxvec.RegisterTypes(ctx, c) }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, explain(err, cc.Config, "pgvector search", "the dsn")
	}
	s := &Searcher{pool: pool, prefix: o.Table, target: target(cc.Config), spaces: map[string]SpaceInfo{}, hnsw: map[string]bool{}}
	var reg *string
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1)::text", ident(spacesTable(o.Table))).Scan(&reg); err != nil {
		pool.Close()
		return nil, explain(err, cc.Config, "pgvector search", "the dsn")
	}
	if reg == nil {
		pool.Close()
		return nil, fmt.Errorf("pgvector search: the database at %s has no table %s: no pgvector sink has written with table prefix %s there",
			s.target, spacesTable(o.Table), o.Table)
	}
	return s, nil
}

var _ connectors.VectorStore = (*Searcher)(nil)

// Name says which store answers.
func (s *Searcher) Name() string { return "pgvector table prefix " + s.prefix }

// Close releases the connections.
func (s *Searcher) Close() error { s.pool.Close(); return nil }

// Spaces lists the registered spaces, by name, with their row counts (exact: a count over each
// table).
func (s *Searcher) Spaces(ctx context.Context) ([]SpaceInfo, error) {
	rows, err := s.pool.Query(ctx, "SELECT space, table_name, distance, dim FROM "+ident(spacesTable(s.prefix))+" ORDER BY space")
	if err != nil {
		return nil, s.wrap(err)
	}
	infos, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpaceInfo, error) {
		var i SpaceInfo
		err := r.Scan(&i.Space, &i.Table, &i.Distance, &i.Dim)
		return i, err
	})
	if err != nil {
		return nil, s.wrap(err)
	}
	for i := range infos {
		err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+ident(infos[i].Table)).Scan(&infos[i].Rows)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P01" {
			continue // registered, table dropped by hand: no rows
		}
		if err != nil {
			return nil, s.wrap(err)
		}
	}
	return infos, nil
}

// space looks a space up in the registry (cached once found).
func (s *Searcher) space(ctx context.Context, name string) (SpaceInfo, error) {
	s.mu.Lock()
	info, ok := s.spaces[name]
	s.mu.Unlock()
	if ok {
		return info, nil
	}
	info.Space = name
	err := s.pool.QueryRow(ctx, "SELECT table_name, distance, dim FROM "+ident(spacesTable(s.prefix))+" WHERE space = $1", name).
		Scan(&info.Table, &info.Distance, &info.Dim)
	if errors.Is(err, pgx.ErrNoRows) {
		var names []string
		rows, err := s.pool.Query(ctx, "SELECT space FROM "+ident(spacesTable(s.prefix))+" ORDER BY space")
		if err == nil {
			names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return info, s.wrap(err)
		}
		have := "none"
		if len(names) > 0 {
			have = strings.Join(names, ", ")
		}
		return info, fmt.Errorf("pgvector search: no vectors of space %s in %s (it has: %s)", name, spacesTable(s.prefix), have)
	}
	if err != nil {
		return info, s.wrap(err)
	}
	s.mu.Lock()
	s.spaces[name] = info
	s.mu.Unlock()
	return info, nil
}

// Search returns the k rows nearest to q in space, best first, ties by ascending doc id. ex
// leaves the query document out. exact=false walks the HNSW index with hnsw.ef_search =
// max(40, 2k) (at most 1000) and an iterative scan in strict order, so the exclusion filter
// still leaves k rows; exact=true scans the table for the true top k. A hit's score is the
// similarity the table ranks by: the inner product for inner_product, 1 - cosine distance for
// cosine, minus the L2 distance for l2.
func (s *Searcher) Search(ctx context.Context, space string, q []float32, k int, ex schemas.Exclude, exact bool) (*schemas.Answer, error) {
	if k < 1 {
		return nil, fmt.Errorf("pgvector search: k must be >= 1 (got %d)", k)
	}
	info, err := s.space(ctx, space)
	if err != nil {
		return nil, err
	}
	if len(q) != info.Dim {
		return nil, fmt.Errorf("pgvector search: the query has %d dimensions, space %s has %d", len(q), space, info.Dim)
	}
	// Without an HNSW index (index: deferred before the run's end built it, index: none) the
	// database scans whatever was asked: the answer is exact, and says so.
	how := "HNSW index"
	if !exact {
		indexed, err := s.indexed(ctx, info.Table)
		if err != nil {
			return nil, err
		}
		if !indexed {
			exact, how = true, "exact scan (the table has no HNSW index yet: index: deferred builds it when the run ends, index: none never)"
		}
	} else {
		how = "exact scan"
	}
	settings, sql, args, err := searchQuery(info, q, k, ex, exact)
	if err != nil {
		return nil, err
	}
	var hits []schemas.Hit
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, set := range settings {
			if _, err := tx.Exec(ctx, set); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		hits, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (schemas.Hit, error) {
			var h schemas.Hit
			var hash int64
			err := r.Scan(&h.DocID, &h.Title, &h.Source, &h.Version, &hash, &h.Score)
			h.ContentHash = uint64(hash)
			return h, err
		})
		return err
	})
	if err != nil {
		return nil, s.wrap(err)
	}
	return &schemas.Answer{Store: "pgvector table " + info.Table, Exact: exact, How: how, Hits: hits}, nil
}

// indexed reports whether table has a valid HNSW index. Once it has, that is remembered: an
// index is built once (deferred: when the run ends) and not dropped by reignpipe.
func (s *Searcher) indexed(ctx context.Context, table string) (bool, error) {
	s.mu.Lock()
	known := s.hnsw[table]
	s.mu.Unlock()
	if known {
		return true, nil
	}
	var have bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = to_regclass($1) AND a.amname = 'hnsw' AND i.indisvalid)`, ident(table)).Scan(&have)
	if err != nil {
		return false, s.wrap(err)
	}
	if have {
		s.mu.Lock()
		s.hnsw[table] = true
		s.mu.Unlock()
	}
	return have, nil
}

// searchQuery is the query Search runs, after its settings (SET LOCAL, in one transaction).
func searchQuery(info SpaceInfo, q []float32, k int, ex schemas.Exclude, exact bool) (settings []string, sql string, args []any, err error) {
	op := distanceOp(info.Distance)
	score := map[string]string{InnerProduct: "-d", Cosine: "1 - d", L2: "-d"}[info.Distance]
	if score == "" {
		return nil, "", nil, fmt.Errorf("pgvector search: space %s has distance %q, which this reignpipe does not know", info.Space, info.Distance)
	}
	where, args := "doc_id <> $2", []any{pgv.NewVector(q), ex.DocID}
	if ex.ByHash {
		where += " AND content_hash <> $3"
		args = append(args, int64(ex.ContentHash))
	}
	// The inner query orders by the distance alone, the order the index gives, and takes 2k
	// rows so that rows tied at the k-th (copies of one document) are there for the outer one
	// to break the tie by doc id. A scan orders by both at once: its ties are exact.
	order, limit := "d", 2*k
	settings = []string{
		fmt.Sprintf("SET LOCAL hnsw.ef_search = %d", min(max(40, 2*k), 1000)),
		"SET LOCAL hnsw.iterative_scan = strict_order",
	}
	if exact {
		order, limit = "d, doc_id", k
		settings = append(settings, "SET LOCAL enable_indexscan = off")
	}
	inner := fmt.Sprintf("SELECT doc_id, title, source, version, content_hash, embedding %s $1 AS d FROM %s WHERE %s ORDER BY %s LIMIT %d",
		op, ident(info.Table), where, order, limit)
	sql = fmt.Sprintf("SELECT doc_id, title, source, version, content_hash, %s FROM (%s) AS n ORDER BY d, doc_id LIMIT %d", score, inner, k)
	return settings, sql, args, nil
}

func (s *Searcher) wrap(err error) error {
	if isPg(err) {
		return fmt.Errorf("pgvector search: %s: %s", s.target, pgMessage(err))
	}
	return fmt.Errorf("pgvector search: %s: %w", s.target, err)
}
