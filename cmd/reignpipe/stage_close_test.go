package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/internal/pgtest"
)

// TestAggregateStageFailsWhenASinkFailsToClose: the aggregate stage's sinks are closed by the
// same engine as a run's, and a close that fails fails the stage. Its pgvector sink builds its
// deferred HNSW index when it closes; with the table gone by then (dropped under it), the
// stage stopped by SIGTERM exits 1 with the reason, and its summary says failed, not
// completed.
func TestAggregateStageFailsWhenASinkFailsToClose(t *testing.T) {
	s := newStageSetup(t)
	dsn := pgtest.Database(t)
	input, ids := stageCorpus(t, s.dir, 8)
	cfg := s.config(t, "closefail", input, "kafka", fmt.Sprintf("  - {type: pgvector, dsn: %q, table: vec, index: deferred}", dsn))
	ingest := s.start(t, "ingest", "ingest", "--idle-exit", "3s", cfg)
	embed := s.start(t, "embed", "embed", cfg)
	agg := s.start(t, "aggregate", "aggregate", cfg)
	if err := ingest.Wait(); err != nil {
		t.Fatalf("ingest: %v", err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Every vector committed: the table holds one row per document.
	var table string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n int64
		err := conn.QueryRow(ctx, `SELECT table_name FROM vec_spaces LIMIT 1`).Scan(&table)
		if err == nil {
			err = conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, pgx.Identifier{table}.Sanitize())).Scan(&n)
		}
		if err == nil && n == int64(len(ids)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes the table holds %d of %d vectors (%v)", n, len(ids), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop(t, "embed", embed)
	if _, err := conn.Exec(ctx, fmt.Sprintf(`DROP TABLE %s`, pgx.Identifier{table}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	_ = agg.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- agg.Wait() }()
	var exit *exec.ExitError
	select {
	case err := <-done:
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("aggregate after its sink failed to close: %v, want exit 1", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("aggregate still running a minute after SIGTERM")
	}
	out, err := os.ReadFile(agg.Stdout.(*os.File).Name())
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndex(string(out), "\n{\n")
	if i < 0 {
		t.Fatalf("no summary:\n%s", tail(string(out), 3000))
	}
	var sum struct {
		Stopped string `json:"stopped"`
		Error   string `json:"error"`
		Written int64  `json:"docs_written"`
	}
	if err := json.NewDecoder(strings.NewReader(string(out[i:]))).Decode(&sum); err != nil {
		t.Fatal(err)
	}
	if sum.Stopped != "failed" || !strings.Contains(sum.Error, "closing sinks[0]") || sum.Written != int64(len(ids)) {
		t.Fatalf("summary: stopped %q, error %q, %d written", sum.Stopped, sum.Error, sum.Written)
	}
	t.Logf("aggregate exited 1: %s", sum.Error)
}
