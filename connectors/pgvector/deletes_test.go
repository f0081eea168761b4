package pgvector

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/schemas"
)

// op is one call of a deletion case: a write of "doc" at version (del false) or its deletion.
type op struct {
	del     bool
	version string
	flush   bool
}

func w(version string, flush bool) op { return op{version: version, flush: flush} }
func d(version string, flush bool) op { return op{del: true, version: version, flush: flush} }

// The version rule of schemas.Deletion, as the table ends up holding it, and the counts that
// say why.
func TestDeletionVersionRule(t *testing.T) {
	dsn := pgtest.Database(t)
	cases := []struct {
		name string
		ops  []op
		want string // the version the table holds at the end; "-" for no row
		// remembered is the deletions table's version for doc at the end ("-": none).
		remembered string
		counts     map[string]int64
	}{
		{"a deletion at the stored version removes it", []op{w("5", true), d("5", true)}, "-", "5",
			map[string]int64{Inserted: 1, Deleted: 1}},
		{"a newer deletion removes it", []op{w("9", true), d("10", true)}, "-", "10",
			map[string]int64{Inserted: 1, Deleted: 1}},
		{"an older deletion keeps the newer row (numbers, not text)", []op{w("10", true), d("9", true)}, "10", "9",
			map[string]int64{Inserted: 1, DeleteSuperseded: 1}},
		{"a re-delivered upsert after the deletion stays out", []op{w("5", true), d("5", true), w("5", true)}, "-", "5",
			map[string]int64{Inserted: 1, Deleted: 1, DeletedSkipped: 1}},
		{"an older upsert after the deletion stays out (numbers, not text)", []op{w("9", true), d("10", true), w("9", true)}, "-", "10",
			map[string]int64{Inserted: 1, Deleted: 1, DeletedSkipped: 1}},
		{"a newer upsert brings it back", []op{w("5", true), d("5", true), w("6", true)}, "6", "5",
			map[string]int64{Inserted: 2, Deleted: 1}},
		{"after it is back an older one is just older", []op{w("5", true), d("5", true), w("6", true), w("4", true)}, "6", "5",
			map[string]int64{Inserted: 2, Deleted: 1, OlderSkipped: 1}},
		{"a later newer deletion removes it again", []op{w("5", true), d("5", true), w("6", true), d("7", true), w("7", true)}, "-", "7",
			map[string]int64{Inserted: 2, Deleted: 2, DeletedSkipped: 1}},
		{"a deletion of an id never held keeps older upserts out", []op{d("5", true), w("4", true)}, "-", "5",
			map[string]int64{DeletedSkipped: 1}},
		{"an older deletion does not lower the remembered one", []op{d("8", true), d("3", true), w("6", true)}, "-", "8",
			map[string]int64{DeletedSkipped: 1}},
		{"no version: whatever is stored goes, not remembered", []op{w("9", true), d("", true), w("3", true)}, "3", "-",
			map[string]int64{Inserted: 2, Deleted: 1}},
		{"within one commit: write, delete, re-delivered write", []op{w("5", false), d("5", false), w("5", true)}, "-", "5",
			map[string]int64{Inserted: 1, Deleted: 1, DeletedSkipped: 1}},
		{"within one commit: delete, newer write", []op{w("5", true), d("5", false), w("6", true)}, "6", "5",
			map[string]int64{Inserted: 2, Deleted: 1}},
		{"within one commit: two deletions, the newer counts", []op{w("5", true), d("4", false), d("6", true)}, "-", "6",
			map[string]int64{Inserted: 1, Deleted: 1}},
	}
	r := rand.New(rand.NewPCG(7, 8))
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prefix := fmt.Sprintf("d%d", i)
			s := openSink(t, Options{Config: Config{DSN: dsn, Table: prefix, BatchRows: 2, Index: IndexNone}})
			for _, o := range c.ops {
				var err error
				if o.del {
					err = s.Delete(ctxT(t), schemas.Deletion{DocID: "doc", Source: "src", Version: o.version})
				} else {
					err = s.Write(ctxT(t), schemas.DocVector{DocID: "doc", Version: o.version, ContentHash: 1, Space: gnSpace, Vector: unit(r, 4)})
				}
				if err != nil {
					t.Fatal(err)
				}
				if o.flush {
					if err := s.Flush(ctxT(t)); err != nil {
						t.Fatal(err)
					}
				}
			}
			conn := connect(t, dsn)
			got := "-"
			if row, ok := readTable(t, conn, TableName(prefix, gnSpace))["doc"]; ok {
				got = row.version
			}
			if got != c.want {
				t.Errorf("table holds version %s, want %s", got, c.want)
			}
			rem := "-"
			rows, err := conn.Query(ctxT(t), "SELECT version FROM "+ident(deletionsTable(prefix))+" WHERE doc_id = 'doc'")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				if err := rows.Scan(&rem); err != nil {
					t.Fatal(err)
				}
			}
			if rem != c.remembered {
				t.Errorf("deletions table remembers %s, want %s", rem, c.remembered)
			}
			for k, n := range s.Counts() {
				if n != c.counts[k] {
					t.Fatalf("counts %v, want %v", s.Counts(), c.counts)
				}
			}
		})
	}
}

// A deletion removes the document from every space's table under the prefix, those another
// sink created included, and a search no longer finds it; a stale upsert re-delivered to a
// sink opened later stays out; once the deletion is older than the retention, it is forgotten.
func TestDeletionEverySpaceRedeliveryAndRetention(t *testing.T) {
	dsn := pgtest.Database(t)
	r := rand.New(rand.NewPCG(9, 10))
	writer := openSink(t, Options{Config: Config{DSN: dsn, Table: "rd", Index: IndexNone}})
	docs := make([]schemas.DocVector, 4)
	for i := range docs {
		docs[i] = reignDoc(r, i, "100")
	}
	writeFlush(t, writer, docs)
	// A sink that never wrote a vector: it knows the spaces from the registry only.
	del := openSink(t, Options{Config: Config{DSN: dsn, Table: "rd", Index: IndexNone}})
	for _, id := range []string{docs[1].DocID, docs[2].DocID} {
		if err := del.Delete(ctxT(t), schemas.Deletion{DocID: id, Source: "enwiki", Version: "100"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := del.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := del.Counts()[Deleted]; got != 4 {
		t.Fatalf("deleted %d rows, want 4 (two documents in two spaces)", got)
	}
	conn := connect(t, dsn)
	for _, sp := range []string{reignSpace, gnSpace} {
		rows := readTable(t, conn, TableName("rd", sp))
		if len(rows) != 2 {
			t.Fatalf("%s: %d rows, want 2", sp, len(rows))
		}
		for _, gone := range []string{docs[1].DocID, docs[2].DocID} {
			if _, ok := rows[gone]; ok {
				t.Fatalf("%s still holds %s", sp, gone)
			}
		}
	}
	srch, err := OpenSearcher(ctxT(t), SearchOptions{DSN: dsn, Table: "rd"})
	if err != nil {
		t.Fatal(err)
	}
	defer srch.Close()
	var nf *connectors.NotFoundError
	if _, err := srch.Lookup(ctxT(t), reignSpace, docs[1].DocID); !errors.As(err, &nf) {
		t.Fatalf("lookup of a deleted document: %v, want not found", err)
	}
	ans, err := srch.Search(ctxT(t), reignSpace, docs[1].Vector, 10, schemas.Exclude{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Hits) != 2 {
		t.Fatalf("search finds %d documents, want the 2 left", len(ans.Hits))
	}
	for _, h := range ans.Hits {
		if h.DocID == docs[1].DocID || h.DocID == docs[2].DocID {
			t.Fatalf("search returns the deleted %s", h.DocID)
		}
	}

	// The run restarts and its source re-delivers the old vectors: they stay out.
	again := openSink(t, Options{Config: Config{DSN: dsn, Table: "rd", Index: IndexNone}})
	writeFlush(t, again, docs[1:3])
	if got := again.Counts(); got[DeletedSkipped] != 4 || got[Inserted] != 0 {
		t.Fatalf("re-delivery counts %v, want 4 deleted_skipped", got)
	}
	if n := count(t, conn, TableName("rd", reignSpace)); n != 2 {
		t.Fatalf("%d rows after the re-delivery, want 2", n)
	}

	// Past the retention the deletion is forgotten (purged when a sink opens): the same
	// re-delivery then goes in.
	if _, err := conn.Exec(ctxT(t), "UPDATE rd_deletions SET deleted_at = now() - interval '2 hours' WHERE doc_id = $1", docs[1].DocID); err != nil {
		t.Fatal(err)
	}
	late := openSink(t, Options{Config: Config{DSN: dsn, Table: "rd", Index: IndexNone}, DeleteRetention: time.Hour})
	if n := count(t, conn, "rd_deletions"); n != 1 {
		t.Fatalf("%d deletions remembered after the purge, want 1", n)
	}
	writeFlush(t, late, docs[1:3])
	if got := late.Counts(); got[Inserted] != 2 || got[DeletedSkipped] != 2 {
		t.Fatalf("after the purge counts %v, want 2 inserted (the forgotten deletion) and 2 deleted_skipped", got)
	}
}

// writeFlush writes vs to s and commits them.
func writeFlush(t *testing.T, s *Sink, vs []schemas.DocVector) {
	t.Helper()
	for _, v := range vs {
		if err := s.Write(ctxT(t), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// A sink with index: hnsw that deletes from a table another sink made without the index, and
// then writes to that space in the same commit, does not wait on its own transaction to build
// the index (CREATE INDEX would wait for the deletion's lock until lock_timeout): it leaves the
// index for a later run and commits.
func TestDeleteThenWriteIntoAnUnindexedTable(t *testing.T) {
	dsn := pgtest.Database(t)
	r := rand.New(rand.NewPCG(11, 12))
	doc := reignDoc(r, 1, "1")
	doc.GNSpace, doc.GNVector = "", nil
	writeFlush(t, openSink(t, Options{Config: Config{DSN: dsn, Table: "ui", Index: IndexNone}}), []schemas.DocVector{doc})
	s := openSink(t, Options{Config: Config{DSN: dsn, Table: "ui", Index: IndexHNSW}})
	start := time.Now()
	if err := s.Delete(ctxT(t), schemas.Deletion{DocID: doc.DocID, Version: "1"}); err != nil {
		t.Fatal(err)
	}
	doc.Version = "2"
	writeFlush(t, s, []schemas.DocVector{doc})
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("the commit took %v: it waited on its own lock", d)
	}
	if got := s.Counts(); got[Deleted] != 1 || got[Inserted] != 1 {
		t.Fatalf("counts %v, want 1 deleted and 1 inserted", got)
	}
	if row := readTable(t, connect(t, dsn), TableName("ui", reignSpace))[doc.DocID]; row.version != "2" {
		t.Fatalf("table holds version %q, want 2", row.version)
	}
}
