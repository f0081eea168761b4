package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/connecttest"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/pipelines"
)

// The distributed done-means test of change data capture: a table of 200 real patents followed
// by Debezium's connector in the real Kafka Connect worker → its topic → `stage process`
// (source.type debezium) → pgvector and a compacted vectors topic. Inserts, updates that change
// the text and that do not, and deletes are applied while it runs, and the stage is killed with
// SIGKILL twice at random points and started again. After catch-up pgvector holds exactly the table's ids with the
// content hash of each row's current text, and kafka-python, reading the vectors topic as
// compaction leaves it, sees exactly the same live set.
func TestDebeziumStagesFollowTheTable(t *testing.T) {
	c := newCDCTable(t, 200)
	brokers := kafkatest.Brokers(t)
	connect := connecttest.URL(t, brokers)
	dbz := connecttest.Postgres(t, connect, c.dsn, "docs", false)
	topics := kafkatest.Topic(t, "dbz-stage")
	y := fmt.Sprintf(`version: 1
name: dbz
source: {type: debezium, name: docs, id_column: id, title_column: title, text_columns: [body]}
gn: {name: all-minilm-l6-v2, model: %q, tokenizer: %q}
chunking: {k: 128, s: 128}
batching: {max_wait: 5ms, token_budget: 4096}
cache: {dir: %q}
sinks:
  - {type: kafka}
  - {type: pgvector, dsn: %q, table: vec}
dead_letter: {path: %q}
run: {state_dir: %q, progress: log, commit_every: 16, commit_interval: 300ms}
transport:
  type: kafka
  kafka: {brokers: [%q], topics: %q, partitions: 1, raw_format: debezium, raw_topic: %q}
`, c.model, c.tok, filepath.Join(c.dir, "dbz-cache"), c.dsn, filepath.Join(c.dir, "dbz-dl.jsonl"),
		filepath.Join(c.dir, "dbz-state"), brokers, topics, dbz)
	if _, err := pipelines.Parse([]byte(y)); err != nil {
		t.Fatalf("pipeline file: %v\n%s", err, y)
	}
	cfg := filepath.Join(c.dir, "dbz.yaml")
	if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}

	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 28))
	n := 0
	for round := 0; round < 2; round++ {
		proc := c.launch(t, fmt.Sprintf("process%d", round+1), "stage", "process", cfg)
		stop := time.Now().Add(time.Duration(4000+r.IntN(6000)) * time.Millisecond)
		for time.Now().Before(stop) {
			c.change(t, r, n)
			n++
			time.Sleep(50 * time.Millisecond)
		}
		if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = proc.Wait()
	}
	for i := 0; i < 40; i++ {
		c.change(t, r, n)
		n++
	}
	proc := c.launch(t, "process3", "stage", "process", cfg)
	c.caughtUp(t, 4*time.Minute)

	want := c.want(t)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := map[string]int64{}
		for id, l := range kafkatest.LiveSet(t, brokers, topics+".vectors", "rpdv") {
			got[id] = int64(l.ContentHash)
		}
		d := diff(got, want)
		if d == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s as compaction leaves it, after %d changes: %s", topics+".vectors", n, d)
		}
		time.Sleep(2 * time.Second)
	}
	stopRun(t, proc)
	log, _ := os.ReadFile(filepath.Join(c.dir, "process3.log"))
	// The 40 changes made while no stage ran hold deletes (one in four is one), so the
	// restarted stage's summary must count some.
	if m := regexp.MustCompile(`"docs_deleted": (\d+)`).FindAllSubmatch(log, -1); len(m) == 0 || string(m[len(m)-1][1]) == "0" {
		t.Errorf("the restarted process stage's summary counts no deletion:\n%s", tail(string(log), 3000))
	}
	t.Logf("%d changes, the table holds %d rows", n, len(want))
}
