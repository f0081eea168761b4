package pgvector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/schemas"
)

// purgeBatch bounds the expired deletions one purge removes, so that a commit never waits on
// an unbounded delete; what is left goes at the next purge.
const purgeBatch = 10000

// purgeEvery is how often Flush purges expired deletions: their expiry is counted in days, and
// a purge per commit would only repeat the index probe.
const purgeEvery = time.Minute

func deletionsTable(prefix string) string { return prefix + "_deletions" }

func createDeletionsSQL(prefix string) []string {
	t := deletionsTable(prefix)
	return []string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	doc_id     text PRIMARY KEY,
	version    text NOT NULL,
	deleted_at timestamptz NOT NULL DEFAULT now())`, ident(t)),
		fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s (deleted_at)", ident(t+"_at"), ident(t)),
	}
}

// Delete buffers a deletion of d.DocID; Flush applies it, in call order with the writes, in
// the same transaction: the document's row goes from every space's table registered under the
// prefix where its version is <= d.Version (every version when d.Version is empty), and a
// deletion with a version is remembered for DeleteRetention, keeping out later upserts at a
// version <= it.
func (s *Sink) Delete(ctx context.Context, d schemas.Deletion) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if d.DocID == "" {
		return errors.New("pgvector sink: a deletion without a doc id")
	}
	s.rows = append(s.rows, row{del: true, docID: d.DocID, version: d.Version, source: d.Source})
	if len(s.rows)-s.sent < s.o.BatchRows {
		return nil
	}
	return s.fail(s.retry(ctx, "delete", s.send))
}

// deletion is what a run of deletions asks of one doc id: every version gone (a deletion
// without a version among them), and the newest version to remove and remember.
type deletion struct {
	all     bool
	version string // "" when none of them had one
}

// sendDeletes applies a run of deletions to every table of the prefix and records the
// versioned ones in the deletions table. The lock slots of the ids are taken in every table
// first, as upsert takes them, so a writer of the same document decides after the deletion.
func (s *Sink) sendDeletes(ctx context.Context, dels []row) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	ids := uniqueIDs(dels)
	by := make(map[string]*deletion, len(ids))
	for _, r := range dels {
		d := by[r.docID]
		if d == nil {
			d = &deletion{}
			by[r.docID] = d
		}
		switch {
		case r.version == "":
			d.all = true
		case d.version == "" || schemas.CompareVersions(r.version, d.version) > 0:
			d.version = r.version
		}
	}
	versions, all := make([]string, len(ids)), make([]bool, len(ids))
	var recIDs, recVersions []string
	for i, id := range ids {
		d := by[id]
		versions[i], all[i] = d.version, d.all
		if d.version != "" {
			recIDs, recVersions = append(recIDs, id), append(recVersions, d.version)
		}
	}
	tables, err := s.tables(ctx)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if err := lockDocs(ctx, s.tx, t, ids); err != nil {
			return err
		}
		s.deletedIn[t] = true
	}
	cmp := ident(versionCmp(s.o.Table))
	for _, t := range tables {
		// The CTE's DELETE and the count of rows kept read the same snapshot; their conditions
		// are disjoint.
		sql := fmt.Sprintf(`WITH d AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bool[]) AS d(doc_id, version, every)),
gone AS (DELETE FROM %[1]s t USING d WHERE t.doc_id = d.doc_id AND (d.every OR %[2]s(t.version, d.version) <= 0) RETURNING 1)
SELECT (SELECT count(*) FROM gone),
	(SELECT count(*) FROM %[1]s t JOIN d USING (doc_id) WHERE NOT d.every AND %[2]s(t.version, d.version) > 0)`, ident(t), cmp)
		var gone, kept int64
		if err := s.tx.QueryRow(ctx, sql, ids, versions, all).Scan(&gone, &kept); err != nil {
			return err
		}
		s.pending[Deleted] += gone
		s.pending[DeleteSuperseded] += kept
	}
	if len(recIDs) == 0 {
		return nil
	}
	_, err = s.tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s AS r (doc_id, version) SELECT * FROM unnest($1::text[], $2::text[])
ON CONFLICT (doc_id) DO UPDATE SET version = EXCLUDED.version, deleted_at = now()
WHERE %[2]s(EXCLUDED.version, r.version) >= 0`, ident(deletionsTable(s.o.Table)), cmp), recIDs, recVersions)
	return err
}

// tables lists the tables of every space registered under the prefix that exist, sorted, so
// that deleters take their locks in one order. Read at each run of deletions: another writer
// may have registered a space since.
func (s *Sink) tables(ctx context.Context) ([]string, error) {
	rows, err := s.tx.Query(ctx, "SELECT table_name FROM "+ident(spacesTable(s.o.Table))+" WHERE to_regclass(quote_ident(table_name)) IS NOT NULL")
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// remembered returns the remembered deletion versions of ids.
func (s *Sink) remembered(ctx context.Context, ids []string) (map[string]string, error) {
	rows, err := s.tx.Query(ctx, "SELECT doc_id, version FROM "+ident(deletionsTable(s.o.Table))+" WHERE doc_id = ANY($1)", ids)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var id, v string
	_, err = pgx.ForEachRow(rows, []any{&id, &v}, func() error {
		out[id] = v
		return nil
	})
	return out, err
}

// purge forgets up to purgeBatch deletions older than DeleteRetention.
func (s *Sink) purge(ctx context.Context, tx pgx.Tx) error {
	t := ident(deletionsTable(s.o.Table))
	_, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %[1]s WHERE doc_id IN (
	SELECT doc_id FROM %[1]s WHERE deleted_at < now() - $1 * interval '1 second' LIMIT %[2]d)`, t, purgeBatch),
		s.o.DeleteRetention.Seconds())
	return err
}
