// Package pgvector is the PostgreSQL + pgvector vector sink and the nearest-neighbour query
// side over the tables it writes.
//
// Layout: one table per vector space, named <prefix>_<kind>_<8 hex of xxhash64(space)>
// (reignpipe_reign_1a2b3c4d, reignpipe_gn_5e6f7a8b), since vectors of two spaces are never
// comparable and may differ in dimension. <prefix>_spaces maps each space to its table, its
// dimension and the distance its index ranks by. A row is one document: doc_id (the primary
// key), version, content_hash (the uint64 xxhash64 stored as the bigint with the same 64 bits,
// so values past 2^63 read back negative in SQL; Hit.ContentHash undoes it), title, source,
// n_chunks, n_tokens, embedding vector(dim) and written_at.
//
// Each table keeps the newest version of a document, ordered exactly as the file readers order
// them (schemas.CompareVersions); the SQL function <prefix>_version_cmp reproduces that
// order so the upsert's own guard agrees with the Go decision. Rows are written inside one
// transaction per Flush, so nothing is visible before Flush returns and a failed Flush leaves
// the whole batch to be sent again: every write is idempotent (same version and content hash
// again is a no-op).
package pgvector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/schemas"
)

// Defaults of the keys left out (DefaultConfig).
const (
	DefaultTable        = "reignpipe"
	DefaultBatchRows    = 500
	DefaultIndex        = IndexHNSW
	DefaultDistance     = InnerProduct
	DefaultRetryTimeout = 2 * time.Minute
	// DefaultDeleteRetention is run.delete_retention's default, for a sink opened without it.
	DefaultDeleteRetention = 7 * 24 * time.Hour
)

// Index modes.
const (
	IndexHNSW     = "hnsw"     // the index exists from the table's creation on
	IndexDeferred = "deferred" // built by Close, after a bulk load: faster than a live index
	IndexNone     = "none"     // never built (exact scans only)
)

// Distances. Every vector reignpipe publishes is L2-normalised, so the inner product ranks as
// the cosine does and costs less.
const (
	InnerProduct = "inner_product"
	Cosine       = "cosine"
	L2           = "l2"
)

// MaxHNSWDim is the largest dimension pgvector's HNSW index takes for the vector type.
const MaxHNSWDim = 2000

// maxPrefix keeps every name the sink derives within PostgreSQL's 63-byte identifiers:
// prefix + "_" + kind (<= 8) + "_" + 8 hex + "_hnsw".
const maxPrefix = 40

var prefixRe = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// CheckTable says why prefix cannot be a table prefix ("" when it can): a plain lowercase SQL
// identifier, so that psql needs no quotes around the names derived from it.
func CheckTable(prefix string) string {
	switch {
	case !prefixRe.MatchString(prefix):
		return fmt.Sprintf("%q is not a plain identifier: use lowercase letters, digits and _, starting with a letter or _", prefix)
	case len(prefix) > maxPrefix:
		return fmt.Sprintf("%q is %d characters, more than %d (the table names derived from it must fit PostgreSQL's 63)", prefix, len(prefix), maxPrefix)
	}
	return ""
}

// Config is a pgvector sink's keys in a pipeline file (a sinks[] entry of type pgvector): their
// defaults are DefaultConfig's and their rules Validate's, which the pipeline loader and Open
// both apply, so a value is refused once, with one message, whichever meets it first.
type Config struct {
	// DSN is a libpq connection string or URL; "" reads the standard PG* environment variables
	// (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE).
	DSN          string        `yaml:"dsn" default:"PG* env" doc:"libpq connection string or URL; empty: PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE"`
	Table        string        `yaml:"table" default:"reignpipe" doc:"table prefix: <table>_spaces lists the spaces, each in its table <table>_<kind>_<hash>"`
	BatchRows    int           `yaml:"batch_rows" default:"500" doc:"rows per upsert statement; a commit (run.commit_every) is one transaction"`
	Index        string        `yaml:"index" default:"hnsw" doc:"hnsw (with the table), deferred (built when the run ends: faster bulk loads) or none"`
	Distance     string        `yaml:"distance" default:"inner_product" doc:"inner_product (the vectors are L2-normalised: ranks as cosine, cheaper), cosine or l2"`
	RetryTimeout time.Duration `yaml:"retry_timeout" default:"2m" doc:"how long a commit waits for a database that is down before the run fails"`
}

// DefaultConfig is the configuration of a pgvector sink whose keys are left out.
func DefaultConfig() Config {
	return Config{Table: DefaultTable, BatchRows: DefaultBatchRows, Index: DefaultIndex, Distance: DefaultDistance, RetryTimeout: DefaultRetryTimeout}
}

// Validate reports the first bad value through bad, by its key ("index").
func (c Config) Validate(bad func(key, format string, args ...any) error) error {
	switch {
	case CheckTable(c.Table) != "":
		return bad("table", "%s", CheckTable(c.Table))
	case c.BatchRows < 1:
		return bad("batch_rows", "must be >= 1")
	case CheckIndex(c.Index) != "":
		return bad("index", "%s", CheckIndex(c.Index))
	case CheckDistance(c.Distance) != "":
		return bad("distance", "%s", CheckDistance(c.Distance))
	case c.RetryTimeout <= 0:
		return bad("retry_timeout", "must be > 0")
	}
	return nil
}

// Options configure a Sink: its keys (zero values mean DefaultConfig's) and what the pipeline
// tells it besides.
type Options struct {
	Config
	// Dim and GNDim are the pipeline's vector dimensions (0: unknown, taken from the first
	// vector). GNDim > 0: every vector also carries its GN mean-pool companion.
	Dim, GNDim int
	// DeleteRetention is how long a deletion is remembered against older upserts
	// (run.delete_retention; 0: DefaultDeleteRetention).
	DeleteRetention time.Duration
	// Key is the sink's place in the pipeline file ("sinks[0]"), for messages.
	Key    string
	Logger *slog.Logger
}

func (o *Options) defaults() error {
	d := DefaultConfig()
	if o.Table == "" {
		o.Table = d.Table
	}
	if o.BatchRows == 0 {
		o.BatchRows = d.BatchRows
	}
	if o.Index == "" {
		o.Index = d.Index
	}
	if o.Distance == "" {
		o.Distance = d.Distance
	}
	if o.RetryTimeout == 0 {
		o.RetryTimeout = d.RetryTimeout
	}
	if o.DeleteRetention == 0 {
		o.DeleteRetention = DefaultDeleteRetention
	}
	if o.Key == "" {
		o.Key = "sinks[]"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	err := o.Config.Validate(func(key, format string, args ...any) error {
		return fmt.Errorf("pgvector sink: %s.%s: %s", o.Key, key, fmt.Sprintf(format, args...))
	})
	if err != nil {
		return err
	}
	for _, d := range []int{o.Dim, o.GNDim} {
		if err := o.checkDim(d); err != nil {
			return err
		}
	}
	return nil
}

// CheckIndex says why mode is not an index mode ("" when it is one).
func CheckIndex(mode string) string {
	switch mode {
	case IndexHNSW, IndexDeferred, IndexNone:
		return ""
	}
	return fmt.Sprintf("%q is not hnsw, deferred or none", mode)
}

// CheckDistance says why d is not a distance ("" when it is one).
func CheckDistance(d string) string {
	switch d {
	case InnerProduct, Cosine, L2:
		return ""
	}
	return fmt.Sprintf("%q is not inner_product, cosine or l2", d)
}

func (o *Options) checkDim(dim int) error {
	if dim > MaxHNSWDim && o.Index != IndexNone {
		return fmt.Errorf("pgvector sink: %s.index: %s cannot index %d-dimensional vectors (pgvector's HNSW takes at most %d for the vector type); set %s.index: none for exact scans only",
			o.Key, o.Index, dim, MaxHNSWDim, o.Key)
	}
	return nil
}

// row is one vector as it goes into its space's table, or (del set) a deletion of docID at
// version, which goes to every table.
type row struct {
	del            bool
	space          string
	docID, version string
	hash           uint64
	title, source  string
	nChunks        int
	nTokens        int
	vec            []float32
}

// Sink writes DocVectors to PostgreSQL. It is used from one goroutine at a time (the
// connectors.Sink contract) and starts none.
type Sink struct {
	o      Options
	cfg    *pgx.ConnConfig
	target string // host:port/db, for messages: never the password
	conn   *pgx.Conn
	tx     pgx.Tx
	spaces map[string]*space // spaces known to exist with their table

	// rows are everything written and deleted since the last commit, in call order; sent of
	// them went into the open transaction. Only a commit drops them.
	rows []row
	sent int
	// purged is when the last purge of expired deletions ran (at most one a minute).
	purged time.Time
	// deletedIn holds the tables the open transaction deleted from.
	deletedIn map[string]bool
	// counts are the committed outcomes (under mu: Counts may be called from any goroutine);
	// pending those of the open transaction.
	mu              sync.Mutex
	counts, pending map[string]int64
	closed          bool
	err             error // a permanent failure: later calls return it
}

// Outcome names of Counts.
const (
	Inserted            = "inserted"
	Updated             = "updated"
	Unchanged           = "unchanged"
	OlderSkipped        = "older_skipped"
	SameVersionReplaced = "same_version_replaced"
	// Deleted counts rows a deletion removed (one per space's table holding the document).
	Deleted = "deleted"
	// DeleteSuperseded counts rows a deletion left because they hold a newer version.
	DeleteSuperseded = "delete_superseded"
	// DeletedSkipped counts upserts kept out by a remembered deletion at their version or a
	// newer one.
	DeletedSkipped = "deleted_skipped"
)

// Open connects, checks (or creates) the vector extension and the table prefix's registry, and
// returns a sink. A database that is down is waited for up to RetryTimeout; bad credentials, a
// missing database or a missing extension fail at once.
func Open(ctx context.Context, o Options) (*Sink, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	cfg, err := parseDSN(o.DSN, "pgvector sink", o.Key+".dsn")
	if err != nil {
		return nil, err
	}
	s := &Sink{o: o, cfg: cfg, target: target(cfg.Config), spaces: map[string]*space{},
		counts: map[string]int64{}, pending: map[string]int64{}, deletedIn: map[string]bool{}}
	err = s.retry(ctx, "connect", func(ctx context.Context) error {
		if err := s.connect(ctx); err != nil {
			return err
		}
		return s.setup(ctx)
	})
	if err != nil {
		s.drop()
		return nil, err
	}
	return s, nil
}

// Target names the database the sink writes to (host:port/database), without credentials.
func (s *Sink) Target() string { return s.target }

// Describe names where a sink with this dsn and table prefix writes, for run summaries:
// "pgvector:HOST:PORT/DATABASE table PREFIX", never the password.
func Describe(dsn, table string) string {
	if table == "" {
		table = DefaultTable
	}
	where := "(dsn not valid)"
	if cfg, err := pgx.ParseConfig(dsn); err == nil {
		where = target(cfg.Config)
	}
	return "pgvector:" + where + " table " + table
}

// Write buffers v; once BatchRows rows wait it sends them into the open transaction. Nothing is
// committed before Flush.
func (s *Sink) Write(ctx context.Context, v schemas.DocVector) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if err := s.check(v); err != nil {
		return err
	}
	s.rows = append(s.rows, newRow(v.Space, v, v.Vector))
	// With single_chunk: gn a one-chunk document's vector is its GN vector, labelled so: one
	// row says it.
	if len(v.GNVector) > 0 && v.GNSpace != v.Space {
		s.rows = append(s.rows, newRow(v.GNSpace, v, v.GNVector))
	}
	if len(s.rows)-s.sent < s.o.BatchRows {
		return nil
	}
	return s.fail(s.retry(ctx, "write", s.send))
}

func newRow(sp string, v schemas.DocVector, vec []float32) row {
	// A copy: the caller may reuse its slices once Write returns, and the row may be sent
	// again after a reconnect.
	return row{space: sp, docID: v.DocID, version: v.Version, hash: v.ContentHash, title: v.Title,
		source: v.Source, nChunks: v.NChunks, nTokens: v.NTokens, vec: append([]float32(nil), vec...)}
}

func (s *Sink) check(v schemas.DocVector) error {
	switch {
	case v.DocID == "":
		return errors.New("pgvector sink: a vector without a doc id")
	case v.Space == "" || len(v.Vector) == 0:
		return fmt.Errorf("pgvector sink: %s: a vector without its space or values", v.DocID)
	case len(v.GNVector) > 0 && v.GNSpace == "":
		return fmt.Errorf("pgvector sink: %s: a GN vector without its space", v.DocID)
	case len(v.GNVector) > 0 && s.o.GNDim > 0 && len(v.GNVector) != s.o.GNDim:
		return fmt.Errorf("pgvector sink: %s: GN vector of %d dimensions, the pipeline's are %d", v.DocID, len(v.GNVector), s.o.GNDim)
	}
	// With single_chunk: gn a one-chunk document's Vector is its GN vector: either dimension.
	if n := len(v.Vector); s.o.Dim > 0 && n != s.o.Dim && (s.o.GNDim == 0 || n != s.o.GNDim) {
		return fmt.Errorf("pgvector sink: %s: vector of %d dimensions, the pipeline's are %d", v.DocID, n, s.o.Dim)
	}
	return nil
}

// Flush commits every vector written and deletion made so far: when it returns nil they are
// durable and visible. At most once a minute it also purges expired deletions.
// A database that is down is retried (the whole uncommitted batch sent again) for up to
// RetryTimeout; the rows stay buffered after a failure, so a later Flush can still commit them.
func (s *Sink) Flush(ctx context.Context) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if len(s.rows) == 0 {
		return nil
	}
	return s.fail(s.retry(ctx, "flush", func(ctx context.Context) error {
		if err := s.send(ctx); err != nil {
			return err
		}
		purge := time.Since(s.purged) >= purgeEvery
		if purge {
			if err := s.purge(ctx, s.tx); err != nil {
				return err
			}
		}
		if err := s.tx.Commit(ctx); err != nil {
			s.tx = nil
			return err
		}
		s.tx = nil
		if purge {
			s.purged = time.Now()
		}
		s.mu.Lock()
		for k, n := range s.pending {
			s.counts[k] += n
		}
		s.mu.Unlock()
		clear(s.pending)
		clear(s.deletedIn)
		s.rows, s.sent = s.rows[:0], 0
		return nil
	}))
}

// Close flushes, builds the deferred indexes (index: deferred) and disconnects.
func (s *Sink) Close(ctx context.Context) error {
	if s.closed {
		return nil
	}
	err := s.Flush(ctx)
	if err == nil && s.o.Index == IndexDeferred {
		if err = s.fail(s.buildDeferred(ctx)); err != nil {
			// Said here too: a runner closes its sinks after its summary, and may not look.
			s.o.Logger.Error("pgvector sink: the deferred HNSW index was not built; searches scan the table until a later run builds it", "err", err)
		}
	}
	s.closed = true
	s.drop()
	return err
}

// Counts returns the committed outcomes by name (inserted, updated, unchanged, older_skipped,
// same_version_replaced, deleted, delete_superseded, deleted_skipped). A vector and its GN
// companion are two rows and count twice, as the deletion of the two rows does. A batch
// whose commit went through but whose answer was lost with the connection is sent again, and
// its rows then count as unchanged.
func (s *Sink) Counts() map[string]int64 {
	out := map[string]int64{Inserted: 0, Updated: 0, Unchanged: 0, OlderSkipped: 0, SameVersionReplaced: 0,
		Deleted: 0, DeleteSuperseded: 0, DeletedSkipped: 0}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, n := range s.counts {
		out[k] = n
	}
	return out
}

func (s *Sink) usable(ctx context.Context) error {
	switch {
	case s.closed:
		return errors.New("pgvector sink: closed")
	case s.err != nil:
		return s.err
	}
	return ctx.Err()
}

// fail keeps a permanent error for later calls: the sink cannot recover from one by itself.
// Transient ones that ran out of time are not kept: the rows are still there to send again.
func (s *Sink) fail(err error) error {
	var p *permanentError
	if errors.As(err, &p) {
		s.err = err
	}
	return err
}

// drop closes the connection without waiting on a server that may be gone.
func (s *Sink) drop() {
	s.tx = nil
	if s.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.conn.Close(ctx)
		cancel()
		s.conn = nil
	}
}

// buildDeferred builds the index of every table this sink wrote and analyzes it.
func (s *Sink) buildDeferred(ctx context.Context) error {
	names := make([]string, 0, len(s.spaces))
	for name := range s.spaces {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		sp := s.spaces[name]
		if !sp.written {
			continue
		}
		start, built := time.Now(), false
		err := s.retry(ctx, "build index", func(ctx context.Context) error {
			if err := s.ensureConn(ctx); err != nil {
				return err
			}
			var have bool
			if err := s.conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", ident(sp.table+"_hnsw")).Scan(&have); err != nil || have {
				return err // an earlier run built it: new rows went into it as they came
			}
			s.o.Logger.Info("pgvector: building the deferred HNSW index", "table", sp.table, "space", name)
			built = true
			if _, err := s.conn.Exec(ctx, createIndexSQL(sp.table, s.o.Distance)); err != nil {
				return err
			}
			_, err := s.conn.Exec(ctx, "ANALYZE "+ident(sp.table))
			return err
		})
		if err != nil {
			return err
		}
		if !built {
			continue
		}
		s.o.Logger.Info("pgvector: built the deferred HNSW index", "table", sp.table, "space", name,
			"seconds", time.Since(start).Seconds())
	}
	return nil
}
