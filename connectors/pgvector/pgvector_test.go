package pgvector

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	pgv "github.com/pgvector/pgvector-go"
	pgxvec "github.com/pgvector/pgvector-go/pgx"

	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/schemas"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func openSink(t *testing.T, o Options) *Sink {
	t.Helper()
	s, err := Open(ctxT(t), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// unit returns a random L2-normalised vector.
func unit(r *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	var n float64
	for i := range v {
		v[i] = float32(r.NormFloat64())
		n += float64(v[i]) * float64(v[i])
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / math.Sqrt(n))
	}
	return v
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := pgxvec.RegisterTypes(ctxT(t), conn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// dbRow is a row as a table holds it.
type dbRow struct {
	version, title, source string
	hash                   uint64
	nChunks, nTokens       int64
	vec                    []float32
	writtenAt              time.Time
}

func readTable(t *testing.T, conn *pgx.Conn, table string) map[string]dbRow {
	t.Helper()
	rows, err := conn.Query(ctxT(t), "SELECT doc_id, version, title, source, content_hash, n_chunks, n_tokens, embedding, written_at FROM "+ident(table))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]dbRow{}
	for rows.Next() {
		var id string
		var r dbRow
		var h int64
		var e pgv.Vector
		if err := rows.Scan(&id, &r.version, &r.title, &r.source, &h, &r.nChunks, &r.nTokens, &e, &r.writtenAt); err != nil {
			t.Fatal(err)
		}
		r.hash, r.vec = uint64(h), e.Slice()
		if _, dup := out[id]; dup {
			t.Fatalf("%s: doc id %s twice", table, id)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func count(t *testing.T, conn *pgx.Conn, table string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(ctxT(t), "SELECT count(*) FROM "+ident(table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

const (
	reignSpace = "reign:ck-test"
	gnSpace    = "gn-meanpool:fp-test"
)

// reignDoc is a REIGN vector with its GN companion.
func reignDoc(r *rand.Rand, i int, version string) schemas.DocVector {
	return schemas.DocVector{
		DocID: fmt.Sprintf("enwiki:%d", i), Title: fmt.Sprintf("Title %d", i), Source: "enwiki", Version: version,
		// Past 2^63: stored as the negative bigint with the same bits, read back the same.
		ContentHash: 1<<63 + uint64(i)*7919, NChunks: 1 + i%5, NTokens: 100 + i,
		Space: reignSpace, Vector: unit(r, 16), GNSpace: gnSpace, GNVector: unit(r, 8),
	}
}

func TestREIGNStreamLandsInOneTablePerSpace(t *testing.T) {
	dsn := pgtest.Database(t)
	s := openSink(t, Options{Config: Config{DSN: dsn, BatchRows: 7}, Dim: 16, GNDim: 8})
	r := rand.New(rand.NewPCG(1, 2))
	want := map[string]schemas.DocVector{}
	for i := range 30 {
		v := reignDoc(r, i, "100")
		want[v.DocID] = v
		if err := s.Write(ctxT(t), v); err != nil {
			t.Fatal(err)
		}
	}
	// single_chunk: gn: a one-chunk document's vector is its GN vector, in the GN space only.
	one := reignDoc(r, 30, "100")
	one.Space, one.Vector = gnSpace, one.GNVector
	if err := s.Write(ctxT(t), one); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	spaces := map[string]string{}
	rows, _ := conn.Query(ctxT(t), "SELECT space, table_name, dim, distance FROM reignpipe_spaces")
	for rows.Next() {
		var sp, table, dist string
		var dim int
		if err := rows.Scan(&sp, &table, &dim, &dist); err != nil {
			t.Fatal(err)
		}
		spaces[sp] = fmt.Sprintf("%s %d %s", table, dim, dist)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	wantSpaces := map[string]string{
		reignSpace: TableName("reignpipe", reignSpace) + " 16 inner_product",
		gnSpace:    TableName("reignpipe", gnSpace) + " 8 inner_product",
	}
	if fmt.Sprint(spaces) != fmt.Sprint(wantSpaces) {
		t.Fatalf("reignpipe_spaces = %v, want %v", spaces, wantSpaces)
	}
	if !strings.HasPrefix(TableName("reignpipe", reignSpace), "reignpipe_reign_") || !strings.HasPrefix(TableName("reignpipe", gnSpace), "reignpipe_gn_") {
		t.Fatalf("table names %s, %s do not say their kind", TableName("reignpipe", reignSpace), TableName("reignpipe", gnSpace))
	}
	for _, sp := range []string{reignSpace, gnSpace} {
		got := readTable(t, conn, TableName("reignpipe", sp))
		if sp == gnSpace {
			if !equal(got[one.DocID].vec, one.GNVector) {
				t.Fatalf("the one-chunk document's GN vector: %v, wrote %v", got[one.DocID].vec, one.GNVector)
			}
			delete(got, one.DocID)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d rows, want %d", sp, len(got), len(want))
		}
		for id, v := range want {
			g := got[id]
			wv := v.Vector
			if sp == gnSpace {
				wv = v.GNVector
			}
			if !equal(g.vec, wv) {
				t.Fatalf("%s %s: vector read back %v, wrote %v", sp, id, g.vec, wv)
			}
			if g.version != v.Version || g.hash != v.ContentHash || g.title != v.Title || g.source != v.Source ||
				g.nChunks != int64(v.NChunks) || g.nTokens != int64(v.NTokens) {
				t.Fatalf("%s %s: row %+v, wrote %+v", sp, id, g, v)
			}
		}
	}
	if c := s.Counts(); c[Inserted] != 61 || c[Updated]+c[Unchanged]+c[OlderSkipped]+c[SameVersionReplaced] != 0 {
		t.Fatalf("counts %v, want 61 inserted (30 documents in two spaces, one in one)", c)
	}
}

// write is one Write in a version test; flush ends a transaction after it.
type write struct {
	version string
	hash    uint64
	flush   bool
}

func TestVersionOrder(t *testing.T) {
	dsn := pgtest.Database(t)
	cases := []struct {
		name        string
		writes      []write
		wantVersion string
		wantHash    uint64
		want        map[string]int64
	}{
		{"9 then 10 keeps 10", []write{{"9", 1, true}, {"10", 2, true}}, "10", 2, map[string]int64{Inserted: 1, Updated: 1}},
		{"10 then 9 skips 9", []write{{"10", 1, true}, {"9", 2, true}}, "10", 1, map[string]int64{Inserted: 1, OlderSkipped: 1}},
		{"same version and hash is unchanged", []write{{"5", 7, true}, {"5", 7, true}}, "5", 7, map[string]int64{Inserted: 1, Unchanged: 1}},
		{"same version other hash replaces", []write{{"5", 7, true}, {"5", 8, true}}, "5", 8, map[string]int64{Inserted: 1, SameVersionReplaced: 1}},
		{"007 equals 7", []write{{"007", 7, true}, {"7", 7, true}}, "007", 7, map[string]int64{Inserted: 1, Unchanged: 1}},
		{"dates", []write{{"2024-01-02", 1, true}, {"2023-12-31", 2, true}, {"2024-01-10", 3, true}}, "2024-01-10", 3, map[string]int64{Inserted: 1, OlderSkipped: 1, Updated: 1}},
		{"within one batch: 9, 10, 9", []write{{"9", 1, false}, {"10", 2, false}, {"9", 3, true}}, "10", 2, map[string]int64{Inserted: 1, Updated: 1, OlderSkipped: 1}},
		{"within one batch: 10 twice, other hash", []write{{"10", 1, false}, {"10", 2, true}}, "10", 2, map[string]int64{Inserted: 1, SameVersionReplaced: 1}},
		{"within one batch after a stored 10: 11, 9", []write{{"10", 1, true}, {"11", 2, false}, {"9", 3, true}}, "11", 2, map[string]int64{Inserted: 1, Updated: 1, OlderSkipped: 1}},
		{"across two statements of one transaction", []write{{"9", 1, false}, {"x", 0, false}, {"10", 2, true}}, "10", 2, map[string]int64{Inserted: 2, Updated: 1}},
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A prefix of its own, so each case starts from empty tables and its own counts.
			// BatchRows 2 sends a statement every second write: "x" is another document that
			// fills one.
			s := openSink(t, Options{Config: Config{DSN: dsn, Table: fmt.Sprintf("v%d", i), BatchRows: 2, Index: IndexNone}})
			conn := connect(t, dsn)
			table := TableName(fmt.Sprintf("v%d", i), gnSpace)
			var writtenAt time.Time
			for j, w := range c.writes {
				id := "doc"
				if w.version == "x" {
					id = "other"
				}
				v := schemas.DocVector{DocID: id, Version: w.version, ContentHash: w.hash, Space: gnSpace, Vector: unit(r, 4)}
				if err := s.Write(ctxT(t), v); err != nil {
					t.Fatal(err)
				}
				if !w.flush {
					continue
				}
				if err := s.Flush(ctxT(t)); err != nil {
					t.Fatal(err)
				}
				row := readTable(t, conn, table)["doc"]
				if j > 0 && c.want[Unchanged] > 0 && !row.writtenAt.Equal(writtenAt) {
					t.Fatalf("an unchanged row's written_at moved: %v -> %v", writtenAt, row.writtenAt)
				}
				writtenAt = row.writtenAt
				time.Sleep(2 * time.Millisecond)
			}
			row := readTable(t, conn, table)["doc"]
			if row.version != c.wantVersion || row.hash != c.wantHash {
				t.Fatalf("stored version %s hash %d, want %s %d", row.version, row.hash, c.wantVersion, c.wantHash)
			}
			got := s.Counts()
			for k, n := range got {
				if n != c.want[k] {
					t.Fatalf("counts %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestNothingVisibleBeforeFlush(t *testing.T) {
	dsn := pgtest.Database(t)
	s := openSink(t, Options{Config: Config{DSN: dsn, BatchRows: 10, Index: IndexNone}})
	conn := connect(t, dsn)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 25 {
		v := schemas.DocVector{DocID: fmt.Sprint(i), Version: "1", Space: gnSpace, Vector: unit(r, 4)}
		if err := s.Write(ctxT(t), v); err != nil {
			t.Fatal(err)
		}
	}
	table := TableName("reignpipe", gnSpace)
	// Two statements of 10 went into the open transaction: the table exists, its rows do not.
	if n := count(t, conn, table); n != 0 {
		t.Fatalf("%d rows visible before Flush", n)
	}
	if err := s.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, table); n != 25 {
		t.Fatalf("%d rows after Flush, want 25", n)
	}
}

// A commit of three times more documents than PostgreSQL's shared lock table has slots
// (max_locks_per_transaction × max_connections) goes through: the sink's advisory locks are bounded per table, not one per document.
func TestLargeCommit(t *testing.T) {
	dsn := pgtest.Database(t)
	s := openSink(t, Options{Config: Config{DSN: dsn, Index: IndexNone, RetryTimeout: 10 * time.Second}})
	conn := connect(t, dsn)
	var slots int
	if err := conn.QueryRow(ctxT(t), "SELECT current_setting('max_locks_per_transaction')::int * current_setting('max_connections')::int").Scan(&slots); err != nil {
		t.Fatal(err)
	}
	n := 3 * slots
	r := rand.New(rand.NewPCG(7, 8))
	for i := range n {
		v := schemas.DocVector{DocID: fmt.Sprint("d", i), Version: "1", Space: gnSpace, Vector: unit(r, 4)}
		if err := s.Write(ctxT(t), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := count(t, conn, TableName("reignpipe", gnSpace)); got != n {
		t.Fatalf("%d rows after one commit of %d", got, n)
	}
}

func TestRefusals(t *testing.T) {
	dsn := pgtest.Database(t)
	cases := []struct {
		name string
		o    Options
		want []string
	}{
		{"HNSW past 2000 dimensions", Options{Config: Config{DSN: dsn}, Dim: 3072, Key: "sinks[1]"}, []string{"sinks[1].index", "hnsw", "3072", "2000", "sinks[1].index: none"}},
		{"deferred HNSW past 2000", Options{Config: Config{DSN: dsn, Index: IndexDeferred}, Dim: 384, GNDim: 2048, Key: "sinks[0]"}, []string{"sinks[0].index", "2048", "2000"}},
		{"prefix not an identifier", Options{Config: Config{DSN: dsn, Table: "My-Vectors"}, Key: "sinks[0]"}, []string{"sinks[0].table", "My-Vectors", "not a plain identifier"}},
		{"prefix too long", Options{Config: Config{DSN: dsn, Table: strings.Repeat("a", 41)}}, []string{".table", "more than 40"}},
		{"bad index", Options{Config: Config{DSN: dsn, Index: "ivfflat"}, Key: "sinks[0]"}, []string{"sinks[0].index", "ivfflat"}},
		{"bad distance", Options{Config: Config{DSN: dsn, Distance: "dot"}, Key: "sinks[0]"}, []string{"sinks[0].distance", "dot"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Open(ctxT(t), c.o)
			if err == nil {
				s.Close(context.Background())
				t.Fatal("opened")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
		})
	}
	t.Run("3072 dimensions without an index", func(t *testing.T) {
		s := openSink(t, Options{Config: Config{DSN: dsn, Index: IndexNone}, Dim: 3072})
		v := schemas.DocVector{DocID: "a", Version: "1", Space: "reign:big", Vector: unit(rand.New(rand.NewPCG(1, 1)), 3072)}
		if err := s.Write(ctxT(t), v); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSpaceRegisteredOtherwise(t *testing.T) {
	dsn := pgtest.Database(t)
	r := rand.New(rand.NewPCG(7, 8))
	first := openSink(t, Options{Config: Config{DSN: dsn, Index: IndexNone}})
	if err := first.Write(ctxT(t), schemas.DocVector{DocID: "a", Version: "1", Space: "reign:x", Vector: unit(r, 8)}); err != nil {
		t.Fatal(err)
	}
	if err := first.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		o    Options
		dim  int
		want []string
	}{
		{"another dimension", Options{Config: Config{DSN: dsn, Index: IndexNone}}, 16, []string{"reign:x", "8 dimensions", "16"}},
		{"another distance", Options{Config: Config{DSN: dsn, Index: IndexNone, Distance: Cosine}, Key: "sinks[2]"}, 8, []string{"reign:x", "inner_product", "sinks[2].distance is cosine"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openSink(t, c.o)
			if err := s.Write(ctxT(t), schemas.DocVector{DocID: "b", Version: "1", Space: "reign:x", Vector: unit(r, c.dim)}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err := s.Flush(ctxT(t))
			if err == nil {
				t.Fatal("flushed")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("a permanent error took %v", time.Since(start))
			}
		})
	}
}

func TestBadConnectionFailsFast(t *testing.T) {
	dsn := pgtest.Database(t)
	host := strings.SplitN(strings.TrimPrefix(dsn, "postgres://"), "@", 2)[1]
	host = strings.SplitN(host, "/", 2)[0]
	const pw = "s3cret-Pa55word"
	cases := []struct {
		name, dsn string
		want      []string
	}{
		{"malformed", "postgres://reignpipe:" + pw + "@" + host + ":x:y/db", []string{"sinks[0].dsn", "not a valid PostgreSQL connection string"}},
		{"unknown user", "postgres://nosuchuser:" + pw + "@" + host + "/postgres?sslmode=disable", []string{"refused user nosuchuser", host}},
		{"no such database", "postgres://reignpipe:" + pw + "@" + host + "/no_such_db?sslmode=disable", []string{"has no database no_such_db"}},
		{"unknown host", "postgres://reignpipe:" + pw + "@no-such-host.invalid:5432/x?sslmode=disable", []string{"no-such-host.invalid"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			s, err := Open(ctxT(t), Options{Config: Config{DSN: c.dsn}, Key: "sinks[0]"})
			if err == nil {
				s.Close(context.Background())
				t.Fatal("opened")
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Fatalf("took %v to fail (retried a permanent error?)", d)
			}
			if strings.Contains(err.Error(), pw) {
				t.Fatalf("the password is in the error: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// Two writers upserting the same documents at once, each in versions the other also writes:
// every row ends at the newest version, whatever the interleaving.
func TestConcurrentWriters(t *testing.T) {
	dsn := pgtest.Database(t)
	const docs, rounds = 200, 6
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := range 2 {
		s := openSink(t, Options{Config: Config{DSN: dsn, BatchRows: 37, Index: IndexHNSW}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for round := range rounds {
				for _, i := range r.Perm(docs) {
					// Versions 8..13 with numeric order: "9" < "10" as numbers, not as text.
					v := schemas.DocVector{DocID: fmt.Sprint(i), Version: fmt.Sprint(8 + r.IntN(6)), ContentHash: uint64(w*100 + round), Space: reignSpace, Vector: unit(r, 8)}
					if err := s.Write(context.Background(), v); err != nil {
						errs <- err
						return
					}
				}
				if err := s.Flush(context.Background()); err != nil {
					errs <- err
					return
				}
			}
			// The final round writes version 13 (the newest) for half the documents.
			for i := range docs / 2 {
				v := schemas.DocVector{DocID: fmt.Sprint(i * 2), Version: "13", ContentHash: 999, Space: reignSpace, Vector: unit(r, 8)}
				if err := s.Write(context.Background(), v); err != nil {
					errs <- err
					return
				}
			}
			errs <- s.Flush(context.Background())
		}()
	}
	wg.Wait()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got := readTable(t, connect(t, dsn), TableName("reignpipe", reignSpace))
	if len(got) != docs {
		t.Fatalf("%d rows, want %d", len(got), docs)
	}
	for i := 0; i < docs; i += 2 {
		if row := got[fmt.Sprint(i)]; row.version != "13" {
			t.Fatalf("doc %d at version %s after both writers wrote 13", i, row.version)
		}
	}
}

func TestIndexModes(t *testing.T) {
	dsn := pgtest.Database(t)
	conn := connect(t, dsn)
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		index, distance, ops   string
		afterFlush, afterClose bool
	}{
		{IndexHNSW, InnerProduct, "vector_ip_ops", true, true},
		{IndexHNSW, Cosine, "vector_cosine_ops", true, true},
		{IndexDeferred, L2, "vector_l2_ops", false, true},
		{IndexNone, InnerProduct, "", false, false},
	} {
		t.Run(c.index+" "+c.distance, func(t *testing.T) {
			prefix := "i_" + c.index + "_" + c.distance
			s, err := Open(ctxT(t), Options{Config: Config{DSN: dsn, Table: prefix, Index: c.index, Distance: c.distance}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 50 {
				if err := s.Write(ctxT(t), schemas.DocVector{DocID: fmt.Sprint(i), Version: "1", Space: reignSpace, Vector: unit(r, 8)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Flush(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			indexdef := func() string {
				var def string
				err := conn.QueryRow(ctxT(t), "SELECT coalesce(string_agg(indexdef, ';'), '') FROM pg_indexes WHERE tablename = $1 AND indexdef LIKE '%hnsw%'",
					TableName(prefix, reignSpace)).Scan(&def)
				if err != nil {
					t.Fatal(err)
				}
				return def
			}
			if got := indexdef() != ""; got != c.afterFlush {
				t.Fatalf("HNSW index after Flush: %v, want %v", got, c.afterFlush)
			}
			if err := s.Close(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			def := indexdef()
			if (def != "") != c.afterClose || !strings.Contains(def, c.ops) {
				t.Fatalf("index after Close %q, want one with %q: %v", def, c.ops, c.afterClose)
			}
		})
	}
}

// A database without the vector extension: the sink creates it when its user may; a user who
// may not is told what to run.
func TestMissingExtension(t *testing.T) {
	admin := pgtest.DSN(t)
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprint(rand.Uint32())
	db, role := "t_noext_"+suffix, "pgv_nopriv_"+suffix
	conn := rawConnect(t, admin)
	for _, q := range []string{"CREATE DATABASE " + db, "CREATE ROLE " + role + " LOGIN"} {
		if _, err := conn.Exec(ctxT(t), q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		for _, q := range []string{"DROP DATABASE IF EXISTS " + db + " WITH (FORCE)", "DROP ROLE IF EXISTS " + role} {
			if _, err := c.Exec(context.Background(), q); err != nil {
				t.Error(err)
			}
		}
	})
	u.Path = "/" + db
	asRole := *u
	asRole.User = url.UserPassword(role, "not-this-one")
	_, err = Open(ctxT(t), Options{Config: Config{DSN: asRole.String()}})
	if err == nil {
		t.Fatal("opened without the extension, as a user who cannot create it")
	}
	for _, w := range []string{"no vector extension", "user " + role + " cannot create it", "run `CREATE EXTENSION vector;` in database " + db} {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not say %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "not-this-one") {
		t.Fatalf("the password is in the error: %v", err)
	}
	s := openSink(t, Options{Config: Config{DSN: u.String()}})
	if err := s.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var version string
	if err := rawConnect(t, u.String()).QueryRow(ctxT(t), "SELECT extversion FROM pg_extension WHERE extname = 'vector'").Scan(&version); err != nil {
		t.Fatalf("the sink did not create the extension: %v", err)
	}
}

// index: deferred builds the index of every space the sink wrote, once: a later run into the
// same tables finds it there.
func TestDeferredIndexesEverySpace(t *testing.T) {
	dsn := pgtest.Database(t)
	conn := connect(t, dsn)
	r := rand.New(rand.NewPCG(91, 92))
	for run := range 2 {
		s, err := Open(ctxT(t), Options{Config: Config{DSN: dsn, Index: IndexDeferred}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			if err := s.Write(ctxT(t), reignDoc(r, run*20+i, "1")); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := conn.QueryRow(ctxT(t), "SELECT count(*) FROM pg_indexes WHERE indexname = ANY($1)",
			[]string{TableName("reignpipe", reignSpace) + "_hnsw", TableName("reignpipe", gnSpace) + "_hnsw"}).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Fatalf("run %d: %d HNSW indexes, want one per space", run, n)
		}
	}
}
