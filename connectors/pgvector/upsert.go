package pgvector

import (
	"context"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
	"github.com/jackc/pgx/v5"
	pgv "github.com/pgvector/pgvector-go"

	"github.com/reignpipe/reignpipe/schemas"
)

// send puts every row and deletion not yet sent into the open transaction (beginning one), in
// call order: runs of writes and runs of deletions take turns, so a deletion applies to the
// writes before it and guards the ones after it. Counts go to pending until the commit.
func (s *Sink) send(ctx context.Context) error {
	if err := s.ensureConn(ctx); err != nil {
		return err
	}
	for s.sent < len(s.rows) {
		end, del := s.sent, s.rows[s.sent].del
		for end < len(s.rows) && s.rows[end].del == del {
			end++
		}
		var err error
		if del {
			err = s.sendDeletes(ctx, s.rows[s.sent:end])
		} else {
			err = s.sendWrites(ctx, s.rows[s.sent:end])
		}
		if err != nil {
			return err
		}
		s.sent = end
	}
	return nil
}

// begin opens the write transaction unless one is open.
func (s *Sink) begin(ctx context.Context) error {
	if s.tx != nil {
		return nil
	}
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		return err
	}
	s.tx = tx
	return nil
}

// sendWrites upserts a run of rows, in statements of at most BatchRows rows per space.
func (s *Sink) sendWrites(ctx context.Context, unsent []row) error {
	// Spaces first: their DDL runs on its own connection, before the write transaction holds
	// any lock a creating writer might wait for.
	var order []string
	bySpace := map[string][]row{}
	for _, r := range unsent {
		if _, ok := bySpace[r.space]; !ok {
			order = append(order, r.space)
		}
		bySpace[r.space] = append(bySpace[r.space], r)
	}
	spaces := make([]*space, len(order))
	for i, name := range order {
		rows := bySpace[name]
		for _, r := range rows[1:] {
			if len(r.vec) != len(rows[0].vec) {
				return permanent(nil, "pgvector sink: space %s has vectors of %d and %d dimensions (%s, %s)", name, len(rows[0].vec), len(r.vec), rows[0].docID, r.docID)
			}
		}
		sp, err := s.space(ctx, name, len(rows[0].vec))
		if err != nil {
			return err
		}
		spaces[i] = sp
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	for i, name := range order {
		rows := bySpace[name]
		for start := 0; start < len(rows); start += s.o.BatchRows {
			if err := s.upsert(ctx, spaces[i], rows[start:min(start+s.o.BatchRows, len(rows))]); err != nil {
				return err
			}
		}
		spaces[i].written = true
	}
	return nil
}

// stored is what a table holds for a doc id.
type stored struct {
	version string
	hash    uint64
}

// decide is the one upsert rule: the newest version wins (schemas.CompareVersions); the
// same version with the same content hash is a redelivery and changes nothing; the same
// version with another hash is replaced (the last writer wins).
func decide(old *stored, version string, hash uint64) string {
	if old == nil {
		return Inserted
	}
	switch c := schemas.CompareVersions(version, old.version); {
	case c < 0:
		return OlderSkipped
	case c > 0:
		return Updated
	case hash == old.hash:
		return Unchanged
	}
	return SameVersionReplaced
}

// uniqueIDs lists the doc ids of rows once each, in first-seen order.
func uniqueIDs(rows []row) []string {
	ids := make([]string, 0, len(rows))
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.docID] {
			seen[r.docID] = true
			ids = append(ids, r.docID)
		}
	}
	return ids
}

// lockDocs takes the lock slots of ids in table until the commit: advisory locks, taken in one
// order, so they hold also for ids not in the table yet, and taken by deletions too.
func lockDocs(ctx context.Context, tx pgx.Tx, table string, ids []string) error {
	keys := make([]int32, len(ids))
	for i, id := range ids {
		keys[i] = int32(xxhash.Sum64String(id) % lockSlots)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	_, err := tx.Exec(ctx, "SELECT count(pg_advisory_xact_lock($1::int4, k)) FROM unnest($2::int4[]) AS k",
		int32(xxhash.Sum64String(table)), keys)
	return err
}

// lockSlots bounds the advisory locks one commit holds per table. Every lock is held until the
// commit and PostgreSQL's shared lock table is small (max_locks_per_transaction × max_connections,
// 6,400 by default, for every session), so a lock per doc id made a commit of some thousands of
// documents fail with "out of shared memory". Doc ids share the slots by hash: two writers may
// wait on each other for different documents, never decide on the same one at once.
const lockSlots = 256

// upsert writes rows of one space. The doc ids' lock slots are taken first (lockDocs), then
// their stored versions and remembered deletions read, so two writers decide in turn on what
// the other committed. The INSERT's own guard applies the same rules in SQL, for writers that do
// not take the locks.
func (s *Sink) upsert(ctx context.Context, sp *space, rows []row) error {
	tx, table := s.tx, ident(sp.table)
	ids := uniqueIDs(rows)
	if err := lockDocs(ctx, tx, sp.table, ids); err != nil {
		return err
	}
	state := map[string]*stored{}
	q, err := tx.Query(ctx, "SELECT doc_id, version, content_hash FROM "+table+" WHERE doc_id = ANY($1) FOR UPDATE", ids)
	if err != nil {
		return err
	}
	for q.Next() {
		var id string
		var st stored
		var h int64
		if err := q.Scan(&id, &st.version, &h); err != nil {
			q.Close()
			return err
		}
		st.hash = uint64(h)
		state[id] = &st
	}
	q.Close()
	if err := q.Err(); err != nil {
		return err
	}
	deleted, err := s.remembered(ctx, ids)
	if err != nil {
		return err
	}
	// Rows in write order, each decided against what the table (or an earlier row of the
	// batch) holds, so a doc id twice in a batch keeps its newest and counts like two batches.
	final := map[string]int{}
	for i, r := range rows {
		out := decide(state[r.docID], r.version, r.hash)
		if dv, ok := deleted[r.docID]; ok && out != OlderSkipped && out != Unchanged && schemas.Supersedes(dv, r.version) {
			out = DeletedSkipped
		}
		s.pending[out]++
		if out == OlderSkipped || out == Unchanged || out == DeletedSkipped {
			continue
		}
		state[r.docID] = &stored{version: r.version, hash: r.hash}
		final[r.docID] = i
	}
	if len(final) == 0 {
		return nil
	}
	n := len(final)
	var (
		docs, versions, titles, sources = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		hashes, tokens                  = make([]int64, 0, n), make([]int64, 0, n)
		chunks                          = make([]int32, 0, n)
		vecs                            = make([]pgv.Vector, 0, n)
	)
	for _, id := range ids {
		i, ok := final[id]
		if !ok {
			continue
		}
		r := rows[i]
		docs, versions, titles, sources = append(docs, r.docID), append(versions, r.version), append(titles, r.title), append(sources, r.source)
		hashes, tokens = append(hashes, int64(r.hash)), append(tokens, int64(r.nTokens))
		chunks, vecs = append(chunks, int32(r.nChunks)), append(vecs, pgv.NewVector(r.vec))
	}
	cmp := ident(versionCmp(s.o.Table))
	sql := fmt.Sprintf(`INSERT INTO %[1]s AS t (doc_id, version, content_hash, title, source, n_chunks, n_tokens, embedding)
SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[], $6::int4[], $7::int8[], $8::vector[])
	AS u(doc_id, version, content_hash, title, source, n_chunks, n_tokens, embedding)
WHERE NOT EXISTS (SELECT 1 FROM %[3]s d WHERE d.doc_id = u.doc_id AND %[2]s(u.version, d.version) <= 0)
ON CONFLICT (doc_id) DO UPDATE SET version = EXCLUDED.version, content_hash = EXCLUDED.content_hash,
	title = EXCLUDED.title, source = EXCLUDED.source, n_chunks = EXCLUDED.n_chunks, n_tokens = EXCLUDED.n_tokens,
	embedding = EXCLUDED.embedding, written_at = now()
WHERE %[2]s(EXCLUDED.version, t.version) > 0
	OR (%[2]s(EXCLUDED.version, t.version) = 0 AND EXCLUDED.content_hash <> t.content_hash)`, table, cmp, ident(deletionsTable(s.o.Table)))
	_, err = tx.Exec(ctx, sql, docs, versions, hashes, titles, sources, chunks, tokens, vecs)
	return err
}
