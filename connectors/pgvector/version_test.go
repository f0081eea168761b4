package pgvector

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/schemas"
)

// versionPairs are the pairs the SQL order is checked on: the ones that tell numeric from
// text order, leading zeros, dates, mixed and non-ASCII, then random ones built from them.
func versionPairs() [][2]string {
	fixed := [][2]string{
		{"9", "10"}, {"10", "9"}, {"007", "7"}, {"7", "007"}, {"0", "00"}, {"0", ""}, {"", ""}, {"", "1"},
		{"100", "99"}, {"0100", "99"}, {"18446744073709551616", "18446744073709551615"},
		{"123456789012345678901234567890", "123456789012345678901234567891"},
		{"2024-01-02", "2023-12-31"}, {"2024-01-02", "2024-01-02"}, {"2024-01-02", "2024-01-02-B1"},
		{"20240102", "2024-01-02"}, {"9a", "10"}, {"10", "9a"}, {"v9", "v10"}, {"1.10", "1.9"},
		{"a", "B"}, {"B", "a"}, {"é", "f"}, {"Z", "é"}, {"10\n", "9"}, {" 9", "10"}, {"٣", "2"},
		{"-1", "1"}, {"+9", "10"}, {"1e3", "999"}, {"A2", "a1"}, {"ab", "abc"},
	}
	parts := []string{"", "0", "00", "1", "9", "10", "99", "007", "2024", "-", "a", "B", "é", "x9", "1.2"}
	r := rand.New(rand.NewPCG(11, 12))
	for range 3000 {
		var a, b strings.Builder
		for range r.IntN(4) {
			a.WriteString(parts[r.IntN(len(parts))])
		}
		for range r.IntN(4) {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		fixed = append(fixed, [2]string{a.String(), b.String()})
	}
	return fixed
}

// The SQL function the upsert guard uses orders versions exactly as schemas.CompareVersions
// does, in a database with the C collation and in one whose default collation (ICU en-US) sorts
// "a" before "B".
func TestVersionCmpSQLMatchesCompareVersions(t *testing.T) {
	icu := icuDatabase(t)
	for _, db := range []struct{ name, dsn string }{{"C collation", pgtest.Database(t)}, {"ICU en-US collation", icu}} {
		t.Run(db.name, func(t *testing.T) {
			conn := rawConnect(t, db.dsn)
			if _, err := conn.Exec(ctxT(t), versionCmpSQL("vt")); err != nil {
				t.Fatal(err)
			}
			pairs := versionPairs()
			as, bs := make([]string, len(pairs)), make([]string, len(pairs))
			for i, p := range pairs {
				as[i], bs[i] = p[0], p[1]
			}
			rows, err := conn.Query(ctxT(t), "SELECT vt_version_cmp(a, b) FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS p(a, b, i) ORDER BY i", as, bs)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(pairs) {
				t.Fatalf("%d results for %d pairs", len(got), len(pairs))
			}
			for i, p := range pairs {
				if want := schemas.CompareVersions(p[0], p[1]); int(got[i]) != want {
					t.Errorf("version_cmp(%q, %q) = %d, CompareVersions says %d", p[0], p[1], got[i], want)
				}
			}
		})
	}
}

// icuDatabase creates a database whose default collation is ICU en-US, dropped at the end.
func icuDatabase(t *testing.T) string {
	admin := pgtest.DSN(t)
	name := fmt.Sprintf("t_versions_icu_%d", rand.Uint32())
	conn, err := pgx.Connect(ctxT(t), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctxT(t), "CREATE DATABASE "+ident(name)+" TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C.UTF-8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	dsn := u.String()
	// The database really sorts by ICU: otherwise the test would not test the COLLATE "C".
	c := rawConnect(t, dsn)
	var less bool
	if err := c.QueryRow(ctxT(t), "SELECT 'a' < 'B'").Scan(&less); err != nil || !less {
		t.Fatalf("ICU database does not sort 'a' before 'B' (%v)", err)
	}
	return dsn
}

// rawConnect connects without the vector types (the ICU database has no extension).
func rawConnect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
