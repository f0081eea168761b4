// Command debezium measures change to searchable on the Debezium path: a row update committed
// in PostgreSQL → Debezium (Kafka Connect) → Kafka → `reignpipe stage process` → the row's new
// vector in pgvector, at a steady rate of changes, as p50 / p99 / max.
//
//	ops/with-kafka-connect go run ./ops/bench/debezium [-bin bin/reignpipe] [-rows 100]
//	    [-rate 5] [-duration 60s] [-out ops/bench/results/debezium-DATE.md]
//
// It makes a database of its own (dropped at the end) with a table of -rows rows, registers a
// Debezium connector for it with the worker at REIGNPIPE_CONNECT_URL, starts one `stage process`
// on a pipeline file like pipelines/debezium.yaml (commit_interval 1s) and waits until the
// snapshot is in pgvector. Then it updates one row every 1/rate seconds, round robin, each
// update its own transaction, and takes the time from the update's COMMIT returning to the
// first poll (every 20 ms) that sees the row's version change in the pgvector table. A row is
// updated again only after -rows/-rate seconds, long after its previous change arrived.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/ops/bench/benchenv"
)

func main() {
	bin := flag.String("bin", "bin/reignpipe", "the reignpipe binary")
	rows := flag.Int("rows", 100, "rows in the table")
	rate := flag.Float64("rate", 5, "row updates per second")
	duration := flag.Duration("duration", 60*time.Second, "how long updates are made")
	out := flag.String("out", "", "append the results to this Markdown file (default: stdout only)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *bin, *rows, *rate, *duration, *out); err != nil {
		fmt.Fprintln(os.Stderr, "debezium bench:", err)
		os.Exit(1)
	}
}

func need(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("%s is not set: run under ops/with-kafka-connect", name)
	}
	return v, nil
}

func run(ctx context.Context, bin string, rows int, rate float64, duration time.Duration, out string) error {
	brokers, err := need("REIGNPIPE_KAFKA_BROKERS")
	if err != nil {
		return err
	}
	admin, err := need("REIGNPIPE_PG_DSN")
	if err != nil {
		return err
	}
	connect, err := need("REIGNPIPE_CONNECT_URL")
	if err != nil {
		return err
	}
	bin, err = filepath.Abs(bin)
	if err != nil {
		return err
	}
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000_000)
	name := "dbzbench_" + suffix
	dsn, dropDB, err := database(ctx, admin, name)
	if err != nil {
		return err
	}
	defer dropDB()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// Short rows: one window each, so what is measured is the path, not the GN.
	if _, err := conn.Exec(ctx, `CREATE TABLE articles (id bigint PRIMARY KEY, title text, body text)`); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `INSERT INTO articles SELECT g, 'Article ' || g, 'The first version of article ' || g || ', about the change data capture path.' FROM generate_series(1, $1) g`, rows); err != nil {
		return err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return err
	}
	config := map[string]string{
		"connector.class":   "io.debezium.connector.postgresql.PostgresConnector",
		"database.hostname": u.Hostname(), "database.port": u.Port(), "database.user": u.User.Username(),
		"database.password": "unused", "database.dbname": name,
		"topic.prefix": name, "table.include.list": "public.articles",
		"plugin.name": "pgoutput", "slot.name": name, "publication.name": name,
		"publication.autocreate.mode": "filtered", "snapshot.mode": "initial",
		"topic.creation.default.replication.factor": "1", "topic.creation.default.partitions": "1",
	}
	if err := rest(ctx, http.MethodPut, connect+"/connectors/"+name+"/config", config); err != nil {
		return fmt.Errorf("registering the connector: %w", err)
	}
	// The connector goes first, then its slot, then the database (dropDB, deferred above).
	defer func() {
		_ = rest(context.Background(), http.MethodDelete, connect+"/connectors/"+name, nil)
		for i := 0; i < 120; i++ {
			if _, err := conn.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name); err == nil {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()

	dir, err := os.MkdirTemp("", "dbzbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pipeline := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(pipeline, []byte(fmt.Sprintf(`version: 1
name: %[1]s
source:
  type: debezium
  name: articles
  id_column: id
  title_column: title
  text_columns: [body]
gn:
  name: bge-small-en-v15
chunking:
  k: 512
  s: 512
cache:
  dir: %[2]s/cache
sinks:
  - type: pgvector
    dsn: %[3]q
    table: bench
run:
  state_dir: %[2]s/state
  commit_every: 8
  commit_interval: 1s
transport:
  type: kafka
  kafka:
    brokers: [%[4]q]
    topics: %[1]s
    partitions: 1
    raw_format: debezium
    raw_topic: %[1]s.public.articles
`, name, dir, dsn, brokers)), 0o644); err != nil {
		return err
	}
	stageCtx, stopStage := context.WithCancel(ctx)
	defer stopStage()
	stage := exec.CommandContext(stageCtx, bin, "stage", "process", pipeline)
	stage.Cancel = func() error { return stage.Process.Signal(syscall.SIGTERM) }
	stage.WaitDelay = 60 * time.Second
	logf, err := os.Create(filepath.Join(dir, "stage.log"))
	if err != nil {
		return err
	}
	stage.Stdout, stage.Stderr = logf, logf
	if err := stage.Start(); err != nil {
		return err
	}
	stageDone := make(chan error, 1)
	go func() { stageDone <- stage.Wait() }()
	defer func() {
		stopStage()
		<-stageDone
		logf.Close()
	}()

	// The snapshot in pgvector: every row at some version.
	t0 := time.Now()
	var table string
	versions := map[string]string{}
	for len(versions) < rows {
		select {
		case err := <-stageDone:
			b, _ := os.ReadFile(filepath.Join(dir, "stage.log"))
			return fmt.Errorf("stage process ended (%v) before the snapshot arrived:\n%s", err, tail(b))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Since(t0) > 5*time.Minute {
			return fmt.Errorf("the snapshot did not reach pgvector in 5 minutes (%d of %d rows)", len(versions), rows)
		}
		if table == "" {
			_ = conn.QueryRow(ctx, "SELECT table_name FROM bench_spaces LIMIT 1").Scan(&table)
			if table == "" {
				continue
			}
		}
		if versions, err = poll(ctx, conn, table); err != nil {
			return err
		}
	}
	snapshotAt := time.Since(t0)
	fmt.Fprintf(os.Stderr, "snapshot of %d rows in pgvector %.1fs after the stage started\n", rows, snapshotAt.Seconds())

	// The updates and the poller on one loop: an update is due every 1/rate s, a poll every 20 ms.
	type pending struct {
		at  time.Time
		old string
	}
	waiting := map[string]pending{}
	var lat []time.Duration
	next := time.Now()
	end := next.Add(duration)
	row := 0
	upd, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer upd.Close(context.Background())
	rnd := rand.New(rand.NewPCG(1, 2))
	for time.Now().Before(end) || len(waiting) > 0 {
		if time.Now().After(end.Add(2 * time.Minute)) {
			return fmt.Errorf("%d updates never reached pgvector", len(waiting))
		}
		if now := time.Now(); now.Before(end) && !now.Before(next) {
			row = row%rows + 1
			id := fmt.Sprintf("articles:%d", row)
			if _, err := upd.Exec(ctx, "UPDATE articles SET body = $1 WHERE id = $2",
				fmt.Sprintf("Article %d, edited at %s (%d).", row, now.Format(time.RFC3339Nano), rnd.Int64()), row); err != nil {
				return err
			}
			waiting[id] = pending{at: time.Now(), old: versions[id]}
			next = next.Add(time.Duration(float64(time.Second) / rate))
		}
		select {
		case err := <-stageDone:
			return fmt.Errorf("stage process ended: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if versions, err = poll(ctx, conn, table); err != nil {
			return err
		}
		seen := time.Now()
		for id, p := range waiting {
			if versions[id] != p.old {
				lat = append(lat, seen.Sub(p.at))
				delete(waiting, id)
			}
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	report := fmt.Sprintf(`
## Debezium path, change to searchable (%s)

Machine: %s. Load average at the end: %s.
PostgreSQL (ops/postgres) → Debezium PostgreSQL connector 3.6.1.Final in Kafka Connect 4.1.1
(ops/kafka-connect, distributed mode, one worker) → the ops/kafka broker → one `+"`reignpipe stage process`"+`
(commit_every 8, commit_interval 1s) → pgvector (HNSW). %d rows of one window each; %d updates at
%.1f/s over %s, each its own transaction, round robin over the rows; latency from the update's
COMMIT returning to the first 20 ms poll of the pgvector table that sees the row's new version.
The snapshot of the %d rows was in pgvector %.1f s after the stage started (GN model load and
consumer group join included).

| changes | p50 | p99 | max |
|---|---|---|---|
| %d | %.0f ms | %.0f ms | %.0f ms |
`, time.Now().UTC().Format("2006-01-02 15:04 UTC"), benchenv.Machine(), loadavg(), rows, len(lat), rate, duration, rows, snapshotAt.Seconds(),
		len(lat), ms(q(0.50)), ms(q(0.99)), ms(lat[len(lat)-1]))
	fmt.Print(report)
	if out != "" {
		f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteString(report); err != nil {
			return err
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func poll(ctx context.Context, conn *pgx.Conn, table string) (map[string]string, error) {
	r, err := conn.Query(ctx, "SELECT doc_id, version FROM "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		return nil, err
	}
	defer r.Close()
	m := map[string]string{}
	for r.Next() {
		var id, v string
		if err := r.Scan(&id, &v); err != nil {
			return nil, err
		}
		m[id] = v
	}
	return m, r.Err()
}

// database creates a database of the bench's own on the server of admin, with the vector
// extension; drop removes it.
func database(ctx context.Context, admin, name string) (dsn string, drop func(), err error) {
	a, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, err
	}
	defer a.Close(ctx)
	if _, err := a.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, err
	}
	drop = func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	u, err := url.Parse(admin)
	if err != nil {
		drop()
		return "", nil, err
	}
	u.Path = "/" + name
	c, err := pgx.Connect(ctx, u.String())
	if err != nil {
		drop()
		return "", nil, err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS vector"); err != nil {
		drop()
		return "", nil, err
	}
	return u.String(), drop, nil
}

func rest(ctx context.Context, method, u string, body any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 && !(method == http.MethodDelete && resp.StatusCode == http.StatusNotFound) {
		var msg bytes.Buffer
		_, _ = msg.ReadFrom(resp.Body)
		return fmt.Errorf("%s %s: HTTP %d: %s", method, u, resp.StatusCode, msg.String())
	}
	return nil
}
