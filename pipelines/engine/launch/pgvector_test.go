package launch_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	pgv "github.com/pgvector/pgvector-go"
	pgxvec "github.com/pgvector/pgvector-go/pgx"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/launch"
)

var topics = []string{"a bread oven with a steam injector", "a bicycle gear hub with seven speeds",
	"a violin chin rest of moulded cork", "a rocket nozzle cooled by its own fuel", "a lawn mower blade guard",
	"a coffee grinder with ceramic burrs", "a window latch for sliding sashes", "a hearing aid battery door"}

// patentXML is one grant, as the weekly full-text files carry them.
func patentXML(num int, date, topic string) string {
	return fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE us-patent-grant SYSTEM "us-patent-grant-v42-2006-08-23.dtd" [ ]>
<us-patent-grant lang="EN" dtd-version="v4.2 2006-08-23">
<us-bibliographic-data-grant>
<publication-reference><document-id><country>US</country><doc-number>%08d</doc-number><kind>B2</kind><date>%s</date></document-id></publication-reference>
<invention-title>%s</invention-title>
</us-bibliographic-data-grant>
<abstract><p>Disclosed is %s.</p></abstract>
<description><p>The invention relates to %s. %s</p></description>
<claims><claim><claim-text>1. Apparatus comprising %s.</claim-text></claim></claims>
</us-patent-grant>
`, num, date, topic, topic, topic, strings.Repeat("It is described in detail with its parts and their use. ", 20), topic)
}

type row struct {
	version string
	vec     []float32
	written time.Time
}

// pgRows reads every row of the one table of space.
func pgRows(t *testing.T, dsn, space string) map[string]row {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := pgxvec.RegisterTypes(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var table string
	if err := conn.QueryRow(ctx, "SELECT table_name FROM pat_spaces WHERE space = $1", space).Scan(&table); err != nil {
		t.Fatalf("space %s not registered: %v", space, err)
	}
	rows, err := conn.Query(ctx, "SELECT doc_id, version, embedding, written_at FROM "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]row{}
	for rows.Next() {
		var id string
		var r row
		var v pgv.Vector
		if err := rows.Scan(&id, &r.version, &v, &r.written); err != nil {
			t.Fatal(err)
		}
		r.vec = v.Slice()
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPatentFolderToPGVector: a pipeline over a folder of patents writes every document to
// pgvector as to parquet (same count, the same float32 vectors); a later file with newer versions
// of two patents replaces exactly those two rows, and an older version arriving late is skipped.
func TestPatentFolderToPGVector(t *testing.T) {
	dsn := pgtest.Database(t)
	model, tok := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	dir := t.TempDir()
	feed := filepath.Join(dir, "feed")
	if err := os.MkdirAll(feed, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, topic := range topics {
		if err := os.WriteFile(filepath.Join(feed, fmt.Sprintf("a%02d.xml", i)), []byte(patentXML(7000000+i, "20060103", topic)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	yaml := fmt.Sprintf(`version: 1
name: patents
source: {type: uspto, path: %q}
gn: {name: bge-small-en-v15, model: %q, tokenizer: %q}
batching: {max_wait: 5ms}
cache: {dir: %q}
sinks:
  - {type: parquet, dir: %q}
  - {type: pgvector, dsn: %q, table: pat, index: deferred}
run: {state_dir: %q, progress: off, commit_every: 3}
`, feed, model, tok, filepath.Join(dir, "cache"), filepath.Join(dir, "vectors"), dsn, filepath.Join(dir, "state"))
	cfg, err := pipelines.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	run := func() map[string]map[string]int64 {
		t.Helper()
		sum, err := launch.Run(context.Background(), cfg, launch.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if sum.DocsFailed != 0 {
			t.Fatalf("failed documents: %+v", sum)
		}
		return sum.Sinks
	}
	run()
	latest, err := vectorfile.Latest(filepath.Join(dir, "vectors"))
	if err != nil {
		t.Fatal(err)
	}
	space := latest["uspto:US07000000B2"].Space
	first := pgRows(t, dsn, space)
	if len(first) != len(topics) || len(latest) != len(topics) {
		t.Fatalf("pgvector has %d rows, parquet %d documents, want %d", len(first), len(latest), len(topics))
	}
	for id, v := range latest {
		if r, ok := first[id]; !ok || r.version != v.Version || !slices.Equal(r.vec, v.Vector) {
			t.Fatalf("%s: pgvector row %+v differs from the parquet vector (version %s)", id, r.version, v.Version)
		}
	}

	// Newer versions of two patents, with new text; and an older version of a third, late.
	time.Sleep(10 * time.Millisecond) // written_at of a replaced row must move
	newer := patentXML(7000001, "20070102", "a bicycle gear hub with eleven speeds and a belt drive") +
		patentXML(7000005, "20070102", "a coffee grinder with steel burrs and a timer")
	older := patentXML(7000006, "20050101", "a window latch of an earlier design")
	if err := os.WriteFile(filepath.Join(feed, "b-update.xml"), []byte(newer+older), 0o644); err != nil {
		t.Fatal(err)
	}
	counts := run()
	second := pgRows(t, dsn, space)
	latest, err = vectorfile.Latest(filepath.Join(dir, "vectors"))
	if err != nil {
		t.Fatal(err)
	}
	if len(second) != len(topics) || len(latest) != len(topics) {
		t.Fatalf("after the update: pgvector %d rows, parquet %d documents, want %d", len(second), len(latest), len(topics))
	}
	var changed []string
	for id, r := range second {
		v := latest[id]
		if r.version != v.Version || !slices.Equal(r.vec, v.Vector) {
			t.Fatalf("%s: pgvector (version %s) and parquet (version %s) disagree after the update", id, r.version, v.Version)
		}
		if r.version != first[id].version || !r.written.Equal(first[id].written) {
			changed = append(changed, id)
		}
	}
	slices.Sort(changed)
	if want := []string{"uspto:US07000001B2", "uspto:US07000005B2"}; !slices.Equal(changed, want) {
		t.Fatalf("rows replaced: %v, want exactly %v", changed, want)
	}
	if second["uspto:US07000006B2"].version != "20060103B2" {
		t.Fatalf("the late older version replaced the newer row: %+v", second["uspto:US07000006B2"].version)
	}
	var pg map[string]int64
	for out, c := range counts {
		if strings.HasPrefix(out, "pgvector") {
			pg = c
		}
	}
	if pg["updated"] != 2 || pg["older_skipped"] != 1 {
		t.Fatalf("the run summary's pgvector counts %v: want updated 2, older_skipped 1", counts)
	}
}
