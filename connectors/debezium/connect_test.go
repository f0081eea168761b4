package debezium_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/connectors/debezium"
	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/schemas"
)

// connectURL is the REST URL of the Kafka Connect worker ops/kafka-connect runs
// (REIGNPIPE_CONNECT_URL, which ops/with-kafka-connect exports), or the one that
// REIGNPIPE_CONNECT_CTL starts (idempotent: a running worker only prints its URL). Without
// either the test skips, or fails under REIGNPIPE_STRICT=1.
func connectURL(t *testing.T, brokers string) string {
	t.Helper()
	if u := os.Getenv("REIGNPIPE_CONNECT_URL"); u != "" {
		return u
	}
	ctl := os.Getenv("REIGNPIPE_CONNECT_CTL")
	if ctl == "" {
		testenv.Missing(t, "REIGNPIPE_CONNECT_URL and REIGNPIPE_CONNECT_CTL not set: the Debezium tests run against the Kafka Connect worker ops/kafka-connect starts (make test runs them under ops/with-kafka-connect)")
	}
	cmd := exec.Command(ctl, "start")
	cmd.Env = append(os.Environ(), "REIGNPIPE_KAFKA_BROKERS="+brokers)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s start: %v\n%s", ctl, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

func rest(t *testing.T, method, u string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

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
	connect := connectURL(t, brokers)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
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
		// Names no other test uses: a slot and a publication are the database's, a topic
		// prefix and a connector name the cluster's.
		prefix := kafkatest.Topic(t, fmt.Sprintf("dbz-schemas-%v", schemasEnable))
		ident := strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToLower(prefix))
		name := prefix
		config := map[string]string{
			"connector.class":   "io.debezium.connector.postgresql.PostgresConnector",
			"database.hostname": u.Hostname(), "database.port": u.Port(), "database.user": u.User.Username(),
			"database.password": "unused (trust)", "database.dbname": db,
			"topic.prefix": prefix, "table.include.list": "public.articles",
			"plugin.name": "pgoutput", "slot.name": ident, "publication.name": ident,
			"publication.autocreate.mode": "filtered", "snapshot.mode": "initial",
			// The broker creates no topic on first use: the worker creates Debezium's.
			"topic.creation.default.replication.factor": "1", "topic.creation.default.partitions": "1",
			"value.converter":                "org.apache.kafka.connect.json.JsonConverter",
			"value.converter.schemas.enable": fmt.Sprint(schemasEnable),
		}
		if code, body := rest(t, http.MethodPut, connect+"/connectors/"+name+"/config", config); code/100 != 2 {
			t.Fatalf("registering connector %s: HTTP %d: %s", name, code, body)
		}
		// Registered after pgtest.Database, so it runs before the database is dropped, which
		// a replication slot would refuse.
		t.Cleanup(func() {
			if code, body := rest(t, http.MethodDelete, connect+"/connectors/"+name, nil); code/100 != 2 && code != http.StatusNotFound {
				t.Errorf("deleting connector %s: HTTP %d: %s", name, code, body)
			}
			// The task lets go of its slot once stopped; the slot is dropped with retries until then.
			deadline := time.Now().Add(60 * time.Second)
			for {
				err := dropSlot(dsn, ident)
				if err == nil {
					return
				}
				if time.Now().After(deadline) {
					t.Errorf("dropping replication slot %s: %v", ident, err)
					return
				}
				time.Sleep(500 * time.Millisecond)
			}
		})
		topic := prefix + ".public.articles"
		waitRunning(t, connect, name)
		waitTopic(t, ctx, brokers, topic)
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

// waitRunning waits until the connector and its task run: a task that failed (a database it
// cannot reach, wal_level not logical) says why in its trace.
func waitRunning(t *testing.T, connect, name string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, body := rest(t, http.MethodGet, connect+"/connectors/"+name+"/status", nil)
		var st struct {
			Connector struct{ State string } `json:"connector"`
			Tasks     []struct {
				State string `json:"state"`
				Trace string `json:"trace"`
			} `json:"tasks"`
		}
		if code == http.StatusOK && json.Unmarshal(body, &st) == nil {
			if len(st.Tasks) > 0 && st.Tasks[0].State == "FAILED" {
				t.Fatalf("connector %s: task failed: %s", name, st.Tasks[0].Trace)
			}
			if st.Connector.State == "RUNNING" && len(st.Tasks) > 0 && st.Tasks[0].State == "RUNNING" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("connector %s not running after 90s: HTTP %d: %s", name, code, body)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitTopic waits until the worker has created Debezium's topic (at the snapshot's first
// record): a consumer group joined before it exists would start at its end.
func waitTopic(t *testing.T, ctx context.Context, brokers, topic string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, err := exec.CommandContext(ctx, kafkatest.Ctl(), "topic", "list").Output()
		if err == nil && bytes.Contains(append([]byte("\n"), out...), []byte("\n"+topic+"\n")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s not created after 90s (%v)", topic, err)
		}
		time.Sleep(time.Second)
	}
}

func dropSlot(dsn, slot string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
	return err
}
