// Package connecttest gives tests the real Kafka Connect worker that ops/kafka-connect runs with
// Debezium's PostgreSQL connector (`make test` starts it through ops/with-kafka-connect and sets
// REIGNPIPE_CONNECT_URL), and registers a connector that follows one table of a test database.
// Without a worker a test skips, or fails under REIGNPIPE_STRICT=1.
package connecttest

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

	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/internal/testenv"
)

// URL is the REST URL of the worker: REIGNPIPE_CONNECT_URL, or the one REIGNPIPE_CONNECT_CTL
// starts (idempotent: a running worker only prints its URL).
func URL(t testing.TB, brokers string) string {
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

// Postgres registers a Debezium connector that follows public.<table> of the database dsn names
// (pgoutput, an initial snapshot, the JsonConverter with schemas.enable as given), waits until
// its task runs and its topic exists, and returns the topic. Slot, publication, topic prefix
// and connector name are the test's own. The connector is deleted and its slot dropped when the
// test ends: register after pgtest.Database, so that this runs before the database is dropped,
// which a replication slot would refuse.
func Postgres(t testing.TB, connect, dsn, table string, schemasEnable bool) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	prefix := kafkatest.Topic(t, fmt.Sprintf("dbz-schemas-%v", schemasEnable))
	ident := strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToLower(prefix))
	name := prefix
	config := map[string]string{
		"connector.class":   "io.debezium.connector.postgresql.PostgresConnector",
		"database.hostname": u.Hostname(), "database.port": u.Port(), "database.user": u.User.Username(),
		"database.password": "unused (trust)", "database.dbname": strings.TrimPrefix(u.Path, "/"),
		"topic.prefix": prefix, "table.include.list": "public." + table,
		"plugin.name": "pgoutput", "slot.name": ident, "publication.name": ident,
		"publication.autocreate.mode": "filtered", "snapshot.mode": "initial",
		// The broker creates no topic on first use: the worker creates Debezium's.
		"topic.creation.default.replication.factor": "1", "topic.creation.default.partitions": "1",
		"value.converter":                "org.apache.kafka.connect.json.JsonConverter",
		"value.converter.schemas.enable": fmt.Sprint(schemasEnable),
	}
	if code, body := Rest(t, http.MethodPut, connect+"/connectors/"+name+"/config", config); code/100 != 2 {
		t.Fatalf("registering connector %s: HTTP %d: %s", name, code, body)
	}
	t.Cleanup(func() {
		if code, body := Rest(t, http.MethodDelete, connect+"/connectors/"+name, nil); code/100 != 2 && code != http.StatusNotFound {
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
	topic := prefix + ".public." + table
	waitRunning(t, connect, name)
	waitTopic(t, topic)
	return topic
}

// Rest makes one call to the worker's REST API and returns the status and body.
func Rest(t testing.TB, method, u string, body any) (int, []byte) {
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

// waitRunning waits until the connector and its task run: a task that failed (a database it
// cannot reach, wal_level not logical) says why in its trace.
func waitRunning(t testing.TB, connect, name string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, body := Rest(t, http.MethodGet, connect+"/connectors/"+name+"/status", nil)
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
func waitTopic(t testing.TB, topic string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, kafkatest.Ctl(), "topic", "list").Output()
		cancel()
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
