// Command cdc measures the postgres source (source.type: postgres) against the real server: a
// table of real patents read as a snapshot beside a JSONL run of the same documents; change to
// searchable (a row update committed -> its new vector in pgvector) under a steady rate of
// changes; deletes/s into pgvector; and how many windows an edit to one paragraph of a long
// document re-embeds with chunking.mode: anchored.
//
//	go run ./ops/bench/cdc -dsn "$REIGNPIPE_PG_DSN" -out ops/bench/results/cdc-2026-12-02.md
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/ops/bench/benchenv"
)

const pkg = "ops/bench/cdc"

func main() { benchenv.Main("cdc", run) }

type bench struct {
	sec         benchenv.Section
	dsn, dir    string
	db          *pgx.Conn
	model, tok  string
	docs, chars int
	rate        float64
	seconds     int
	deletes     int
	keep        bool
	ids         []string
	texts       map[string]string
	long        []string // the long document's paragraphs
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	b := &bench{texts: map[string]string{}}
	fs := benchenv.Flags(pkg, "Measures the postgres source: snapshot docs/s beside JSONL, change-to-searchable p50/p99 at a steady rate, deletes/s into pgvector, anchored re-embedding of a one-paragraph edit.")
	b.sec.Flags(fs)
	fs.StringVar(&b.dsn, "dsn", os.Getenv("REIGNPIPE_PG_DSN"), "the server (a database is made for the run and dropped after)")
	fs.IntVar(&b.docs, "docs", 400, "patents in the table")
	fs.IntVar(&b.chars, "chars", 1500, "characters of each patent's text kept (0: all)")
	fs.Float64Var(&b.rate, "rate", 5, "changes per second for the latency measurement")
	fs.IntVar(&b.seconds, "seconds", 60, "how long the changes run")
	fs.IntVar(&b.deletes, "deletes", 200, "rows deleted for deletes/s")
	fs.BoolVar(&b.keep, "keep", false, "keep the database and the temp folder")
	if err := benchenv.Parse(fs, args); err != nil {
		return err
	}
	if err := b.sec.Resolve(); err != nil {
		return err
	}
	root, err := benchenv.Root()
	if err != nil {
		return err
	}
	dir := filepath.Join(testenv.Home(), "gn", "all-minilm-l6-v2")
	b.model, b.tok = filepath.Join(dir, "model.onnx"), filepath.Join(dir, "tokenizer.json")
	if b.dir, err = os.MkdirTemp("", "cdc-bench-"); err != nil {
		return err
	}
	admin, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	name := fmt.Sprintf("cdc_bench_%d", time.Now().Unix())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	u, err := url.Parse(b.dsn)
	if err != nil {
		return fmt.Errorf("-dsn: a URL postgres://USER@HOST:PORT/DATABASE is needed here (the run makes a database beside it)")
	}
	u.Path = "/" + name
	b.dsn = u.String()
	defer benchenv.Leftovers("cdc", b.keep, b.dir, "database "+name, func(ctx context.Context) error {
		if b.db != nil {
			b.db.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database()")
			b.db.Close(ctx)
		}
		_, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		return err
	})
	if b.db, err = pgx.Connect(ctx, b.dsn); err != nil {
		return err
	}
	header := b.sec.Header(root, "PostgreSQL 15 from ops/postgres (wal_level = logical), GN all-minilm-l6-v2 on CPU, K = S = 128")
	if err := b.load(ctx, testenv.SharedDataDir()); err != nil {
		return err
	}
	report, err := b.measure(ctx)
	if err != nil {
		return err
	}
	return b.sec.Write(stdout, "Postgres source benchmark (ops/bench/cdc)", b.sec.Heading(header, benchenv.Command(pkg, args))+report)
}

func (b *bench) exec(ctx context.Context, sql string, args ...any) error {
	_, err := b.db.Exec(ctx, sql, args...)
	return err
}

// load fills table docs with real patents, table long with one document of many paragraphs,
// and writes the same patents as JSONL.
func (b *bench) load(ctx context.Context, shared string) error {
	for _, s := range []string{"CREATE EXTENSION IF NOT EXISTS vector", "CREATE TABLE docs (id text PRIMARY KEY, title text, body text)",
		"CREATE TABLE long (id text PRIMARY KEY, body text)"} {
		if err := b.exec(ctx, s); err != nil {
			return err
		}
	}
	files, _ := filepath.Glob(filepath.Join(shared, "patents", "uspto", "ipg*.xml"))
	slices.Sort(files)
	var jl strings.Builder
	for _, f := range files {
		src, err := uspto.Open(uspto.Options{Path: f})
		if err != nil {
			return err
		}
		for len(b.ids) < b.docs {
			d, _, err := src.Read(ctx)
			if err == io.EOF {
				break
			}
			var bad *connectors.BadInputError
			if errors.As(err, &bad) {
				continue
			}
			if err != nil {
				return err
			}
			id, text := strings.TrimPrefix(d.ID, "uspto:"), d.Text
			if _, dup := b.texts[id]; dup {
				continue
			}
			if len(b.long) < 40 {
				for _, p := range strings.Split(text, "\n") {
					if len(p) > 200 && len(b.long) < 40 {
						b.long = append(b.long, p)
					}
				}
			}
			if b.chars > 0 && len(text) > b.chars {
				text = text[:strings.LastIndexByte(text[:b.chars], ' ')]
			}
			if err := b.exec(ctx, "INSERT INTO docs VALUES ($1, $2, $3)", id, d.Title, text); err != nil {
				return err
			}
			b.ids, b.texts[id] = append(b.ids, id), text
			line, _ := json.Marshal(map[string]string{"id": id, "title": d.Title, "text": text})
			jl.Write(line)
			jl.WriteByte('\n')
		}
		src.Close(ctx)
	}
	if len(b.ids) < b.docs {
		return fmt.Errorf("only %d patents under %s", len(b.ids), shared)
	}
	if err := b.exec(ctx, "INSERT INTO long VALUES ('one', $1)", strings.Join(b.long, "\n\n")); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.dir, "docs.jsonl"), []byte(jl.String()), 0o644)
}

// pipeline writes a pipeline file: source is the source section, table the pgvector prefix.
func (b *bench) pipeline(name, source, table, mode string) (string, error) {
	y := fmt.Sprintf(`version: 1
name: %s
source: %s
gn: {name: all-minilm-l6-v2, model: %q, tokenizer: %q}
chunking: {k: 128, s: 128, mode: %s}
batching: {max_wait: 5ms}
cache: {dir: %q}
sinks:
  - {type: pgvector, dsn: %q, table: %s}
dead_letter: {path: %q}
run: {state_dir: %q, progress: log, commit_every: 64, commit_interval: 100ms, summary: %q}
`, name, source, b.model, b.tok, mode, filepath.Join(b.dir, name+"-cache"), b.dsn, table, filepath.Join(b.dir, name+"-dl.jsonl"),
		filepath.Join(b.dir, name+"-state"), filepath.Join(b.dir, name+"-summary.json"))
	path, _, err := benchenv.Pipeline(b.dir, y)
	if err != nil {
		return "", err
	}
	named := filepath.Join(b.dir, name+".yaml")
	return named, os.Rename(path, named)
}

func (b *bench) start(name, cfg string) (*exec.Cmd, error) {
	f, err := os.Create(filepath.Join(b.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(b.sec.Bin, "run", cfg)
	cmd.Stdout, cmd.Stderr = f, f
	return cmd, cmd.Start()
}

func stop(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
}

func (b *bench) summaryWindows(name string) (int64, error) {
	var s struct {
		GN int64 `json:"gn_windows"`
	}
	data, err := os.ReadFile(filepath.Join(b.dir, name+"-summary.json"))
	if err != nil {
		return 0, err
	}
	return s.GN, json.Unmarshal(data, &s)
}

// stored is what pgvector table prefix holds: doc id -> content hash.
func (b *bench) stored(ctx context.Context, prefix string) (map[string]int64, error) {
	var table string
	err := b.db.QueryRow(ctx, `SELECT table_name FROM information_schema.columns WHERE column_name = 'embedding' AND table_name LIKE $1 LIMIT 1`, prefix+`\_%`).Scan(&table)
	if errors.Is(err, pgx.ErrNoRows) {
		return map[string]int64{}, nil
	}
	if err != nil {
		return nil, err
	}
	rows, err := b.db.Query(ctx, "SELECT doc_id, content_hash FROM "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var h int64
		if err := rows.Scan(&id, &h); err != nil {
			return nil, err
		}
		out[id] = h
	}
	return out, rows.Err()
}

// until polls pgvector every 10ms until ok says yes.
func (b *bench) until(ctx context.Context, prefix string, within time.Duration, ok func(map[string]int64) bool) error {
	deadline := time.Now().Add(within)
	for {
		got, err := b.stored(ctx, prefix)
		if err != nil {
			return err
		}
		if ok(got) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgvector %s not there after %s (%d rows)", prefix, within, len(got))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func hash(s string) int64 { return int64(xxhash.Sum64String(s)) }

func (b *bench) measure(ctx context.Context) (string, error) {
	var r strings.Builder
	n := len(b.ids)

	// JSONL first, then the table: the same documents, each run with a cache of its own.
	jcfg, err := b.pipeline("jsonl", fmt.Sprintf("{type: jsonl, path: %q, name: docs}", filepath.Join(b.dir, "docs.jsonl")), "vjsonl", "fixed")
	if err != nil {
		return "", err
	}
	t0 := time.Now()
	j, err := b.start("jsonl", jcfg)
	if err != nil {
		return "", err
	}
	if err := j.Wait(); err != nil {
		return "", fmt.Errorf("the JSONL run: %v (log %s)", err, filepath.Join(b.dir, "jsonl.log"))
	}
	jsonlWall := time.Since(t0)

	pcfg, err := b.pipeline("pg", fmt.Sprintf("{type: postgres, dsn: %q, table: docs, title_column: title, text_columns: [body]}", b.dsn), "vpg", "fixed")
	if err != nil {
		return "", err
	}
	t0 = time.Now()
	p, err := b.start("pg", pcfg)
	if err != nil {
		return "", err
	}
	defer stop(p)
	if err := b.until(ctx, "vpg", 30*time.Minute, func(m map[string]int64) bool { return len(m) >= n }); err != nil {
		return "", err
	}
	snapWall := time.Since(t0)
	fmt.Fprintf(&r, "Snapshot: %d patents (text cut to %d characters), one pgvector sink, from process start to the last row in pgvector (the JSONL run: to its exit, after its last commit); the same documents, each run with a cache of its own (every window embedded).\n\n", n, b.chars)
	fmt.Fprintf(&r, "| source | wall s | docs/s |\n|---|---:|---:|\n| postgres snapshot | %.1f | %.1f |\n| jsonl | %.1f | %.1f |\n\n",
		snapWall.Seconds(), float64(n)/snapWall.Seconds(), jsonlWall.Seconds(), float64(n)/jsonlWall.Seconds())

	// Change to searchable: an update every 1/rate s, each to a row of its own; the time from
	// its commit returning to its content hash in pgvector, polled every 10 ms.
	changes := min(int(b.rate*float64(b.seconds)), n)
	type pending struct {
		id string
		h  int64
		at time.Time
	}
	var open []pending
	var lat []time.Duration
	interval := time.Duration(float64(time.Second) / b.rate)
	next, issued := time.Now(), 0
	deadline := time.Now().Add(time.Duration(b.seconds)*time.Second + 5*time.Minute)
	for issued < changes || len(open) > 0 {
		if issued < changes && !time.Now().Before(next) {
			id := b.ids[issued]
			text := b.texts[id] + fmt.Sprintf(" edit %d", issued)
			if err := b.exec(ctx, "UPDATE docs SET body = $2 WHERE id = $1", id, text); err != nil {
				return "", err
			}
			b.texts[id] = text
			open = append(open, pending{id: "docs:" + id, h: hash(text), at: time.Now()})
			issued++
			next = next.Add(interval)
		}
		got, err := b.stored(ctx, "vpg")
		if err != nil {
			return "", err
		}
		now := time.Now()
		open = slices.DeleteFunc(open, func(q pending) bool {
			if got[q.id] == q.h {
				lat = append(lat, now.Sub(q.at))
				return true
			}
			return false
		})
		if now.After(deadline) {
			return "", fmt.Errorf("%d changes not in pgvector after %s", len(open), deadline.Sub(t0))
		}
		time.Sleep(10 * time.Millisecond)
	}
	slices.Sort(lat)
	pct := func(q float64) float64 { return lat[min(len(lat)-1, int(q*float64(len(lat))))].Seconds() * 1000 }
	fmt.Fprintf(&r, "Change to searchable: %d updates of the text at %.0f/s (each a row of its own), from the UPDATE's commit returning to the row's new content hash in pgvector (polled every 10 ms).\n\n", len(lat), b.rate)
	fmt.Fprintf(&r, "| p50 ms | p90 ms | p99 ms | max ms |\n|---:|---:|---:|---:|\n| %.0f | %.0f | %.0f | %.0f |\n\n", pct(0.5), pct(0.9), pct(0.99), lat[len(lat)-1].Seconds()*1000)

	// Deletes: one statement each, as fast as they commit; until the last is gone.
	gone := b.ids[n-b.deletes:]
	t0 = time.Now()
	for _, id := range gone {
		if err := b.exec(ctx, "DELETE FROM docs WHERE id = $1", id); err != nil {
			return "", err
		}
	}
	issuedIn := time.Since(t0)
	if err := b.until(ctx, "vpg", 10*time.Minute, func(m map[string]int64) bool {
		for _, id := range gone {
			if _, ok := m["docs:"+id]; ok {
				return false
			}
		}
		return true
	}); err != nil {
		return "", err
	}
	delWall := time.Since(t0)
	fmt.Fprintf(&r, "Deletes: %d rows deleted one statement each (issued in %.2f s), from the first DELETE to the last row gone from pgvector: %.2f s, **%.0f deletes/s**.\n\n", len(gone), issuedIn.Seconds(), delWall.Seconds(), float64(len(gone))/delWall.Seconds())
	stop(p)

	// Anchored: a document of %d paragraphs; one paragraph edited.
	lcfg, err := b.pipeline("long", fmt.Sprintf("{type: postgres, dsn: %q, table: long, text_columns: [body]}", b.dsn), "vlong", "anchored")
	if err != nil {
		return "", err
	}
	body := strings.Join(b.long, "\n\n")
	for round := 0; round < 2; round++ {
		l, err := b.start(fmt.Sprintf("long%d", round), lcfg)
		if err != nil {
			return "", err
		}
		if round == 1 {
			edited := slices.Clone(b.long)
			edited[len(edited)/2] += " This paragraph was amended."
			body = strings.Join(edited, "\n\n")
			if err := b.exec(ctx, "UPDATE long SET body = $1", body); err != nil {
				return "", err
			}
		}
		want := hash(body)
		err = b.until(ctx, "vlong", 10*time.Minute, func(m map[string]int64) bool { return m["long:one"] == want })
		stop(l)
		if err != nil {
			return "", err
		}
		w, err := b.summaryWindows("long")
		if err != nil {
			return "", err
		}
		if round == 0 {
			fmt.Fprintf(&r, "Anchored chunking: one document of %d paragraphs (%d characters) from the patents, `chunking.mode: anchored`, K = S = 128: the snapshot embeds %d windows; ", len(b.long), len(body), w)
		} else {
			fmt.Fprintf(&r, "an UPDATE that appends a sentence to paragraph %d re-embeds **%d** window(s) (the run's gn_windows).\n", len(b.long)/2+1, w)
		}
	}
	return r.String(), nil
}
