package debezium_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/connectors/debezium"
	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/internal/connecttest"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/schemas"
)

func sql(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestDebeziumPostgres follows a real PostgreSQL table with Debezium's connector in a real
// Kafka Connect worker, twice at once -- the JsonConverter with schemas and without -- and
// decodes both topics through the Kafka source into the same documents and deletions: the
// snapshot, then inserts, updates and deletes, versions ordering every row's changes, the
// tombstones after deletes skipped.
func TestDebeziumPostgres(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	dsn := pgtest.Database(t)
	connect := connecttest.URL(t, brokers)
	sql(t, dsn,
		"CREATE TABLE articles (id bigint PRIMARY KEY, title text, body text)",
		"INSERT INTO articles VALUES (1, 'One', 'first body'), (2, 'Two', 'second body'), (3, 'Three', 'third body')")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	type run struct {
		name, topic string
		src         *kafka.DocSource
	}
	var runs []*run
	for _, schemasEnable := range []bool{true, false} {
		topic := connecttest.Postgres(t, connect, dsn, "articles", schemasEnable)
		c, err := kafkaclient.NewConsumer(kafkaclient.ClientConfig{Brokers: []string{brokers}},
			kafkaclient.ConsumerOptions{Group: kafkatest.Topic(t, "dbz-reader"), Topics: []string{topic}})
		if err != nil {
			t.Fatal(err)
		}
		d, err := debezium.NewDecoder(debezium.Config{IDColumn: "id", TitleColumn: "title", TextColumns: []string{"body"}}, "kb")
		if err != nil {
			t.Fatal(err)
		}
		src := kafka.NewDocSource(c, kafka.RawFormat{Decode: d.Decode, Null: kafka.NullSkips(debezium.SkipTombstone)}).KeyedByRow()
		t.Cleanup(func() { src.Close(context.Background()) })
		runs = append(runs, &run{name: fmt.Sprintf("schemas.enable=%v", schemasEnable), topic: topic, src: src})
	}

	// The snapshot: three reads at one log position.
	want := []schemas.Document{
		{ID: "kb:1", Title: "One", Text: "first body"},
		{ID: "kb:2", Title: "Two", Text: "second body"},
		{ID: "kb:3", Title: "Three", Text: "third body"},
	}
	got := make([][]schemas.Document, len(runs))
	for i, r := range runs {
		got[i] = append(got[i], read(t, ctx, r.src, len(want))...)
	}
	// Each connector's slot has its own snapshot position.
	snapshot := make([]string, len(runs))
	for i := range runs {
		snapshot[i] = got[i][0].Version
		for _, d := range got[i] {
			if d.Version != snapshot[i] {
				t.Fatalf("%s: snapshot reads at versions %q and %q, want one log position", runs[i].name, snapshot[i], d.Version)
			}
		}
	}

	// Changes while the connectors stream: an update, an insert, a delete (and its
	// tombstone), an update that empties the text (a deletion), and one transaction changing
	// two rows, one of them twice.
	sql(t, dsn,
		"UPDATE articles SET body = 'first body, edited' WHERE id = 1",
		"INSERT INTO articles VALUES (4, 'Four', 'fourth body')",
		"DELETE FROM articles WHERE id = 3",
		"UPDATE articles SET body = NULL WHERE id = 2",
		"BEGIN; UPDATE articles SET title = 'One again' WHERE id = 1; UPDATE articles SET body = 'fourth body, edited' WHERE id = 4; UPDATE articles SET body = 'first body, third' WHERE id = 1; COMMIT")
	want = append(want,
		schemas.Document{ID: "kb:1", Title: "One", Text: "first body, edited"},
		schemas.Document{ID: "kb:4", Title: "Four", Text: "fourth body"},
		schemas.Document{ID: "kb:3", Deleted: true},
		schemas.Document{ID: "kb:2", Deleted: true},
		schemas.Document{ID: "kb:1", Title: "One again", Text: "first body, edited"},
		schemas.Document{ID: "kb:4", Title: "Four", Text: "fourth body, edited"},
		schemas.Document{ID: "kb:1", Title: "One again", Text: "first body, third"},
	)
	for i, r := range runs {
		got[i] = append(got[i], read(t, ctx, r.src, len(want)-len(got[i]))...)
	}

	for i, r := range runs {
		last := map[string]string{}
		for j, d := range got[i] {
			w := want[j]
			if d.ID != w.ID || d.Deleted != w.Deleted || d.Title != w.Title || d.Text != w.Text || d.Source != "kb" {
				t.Errorf("%s: record %d: got %+v, want %+v", r.name, j, d, w)
			}
			// Every row's changes in order of their versions, each after the snapshot.
			if prev, ok := last[d.ID]; ok && schemas.CompareVersions(prev, d.Version) >= 0 {
				t.Errorf("%s: record %d (%s): version %s does not order after %s", r.name, j, d.ID, d.Version, prev)
			}
			if j >= 3 && schemas.CompareVersions(snapshot[i], d.Version) >= 0 {
				t.Errorf("%s: record %d (%s): version %s does not order after the snapshot's %s", r.name, j, d.ID, d.Version, snapshot[i])
			}
			last[d.ID] = d.Version
		}
		// The changes streamed are at the same log positions, whichever slot read them.
		for j := 3; j < len(got[i]); j++ {
			if got[i][j].Version != got[0][j].Version {
				t.Errorf("%s: record %d at version %s, %s at %s", r.name, j, got[i][j].Version, runs[0].name, got[0][j].Version)
			}
		}
	}
	// The tombstone after the delete of row 3 comes after it on the topic, so it has been read
	// by the time the records after it were.
	for _, r := range runs {
		if n := r.src.Stats().Skipped[debezium.SkipTombstone]; n != 1 {
			t.Errorf("%s: %d tombstones skipped, want 1 (stats %+v)", r.name, n, r.src.Stats())
		}
	}
}

// read returns the next n documents, acking each.
func read(t *testing.T, ctx context.Context, src *kafka.DocSource, n int) []schemas.Document {
	t.Helper()
	var docs []schemas.Document
	for len(docs) < n {
		doc, ack, err := src.Read(ctx)
		if err != nil {
			t.Fatalf("after %d of %d records: %v", len(docs), n, err)
		}
		if err := ack(ctx, nil); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, doc)
	}
	return docs
}
