package pipelines

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/pgvector"
	"github.com/reignpipe/reignpipe/pipelines/components"
)

const pgvectorPipeline = `version: 1
name: t
source:
  type: jsonl
  path: in.jsonl
sinks:
  - type: parquet
    dir: out/v
  - type: pgvector
    dsn: postgres://reignpipe@127.0.0.1:5432/vectors
`

// Each bad value of a pgvector sink key is refused with its YAML path and line; the sink's Open
// refuses the same value for the same reason (one rule, pgvector.Config.Validate), naming the
// key as the pipeline file does.
func TestPgvectorSinkKeys(t *testing.T) {
	c, err := Parse([]byte(pgvectorPipeline + "    table: docs\n    index: deferred\n    distance: cosine\n    batch_rows: 100\n    retry_timeout: 30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := components.PgvectorSettings(c.Sinks[1]); s.Table != "docs" || s.Index != "deferred" || s.Distance != "cosine" || s.BatchRows != 100 || s.RetryTimeout.Seconds() != 30 {
		t.Fatalf("parsed %+v", s)
	}
	c, err = Parse([]byte(pgvectorPipeline))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := *components.PgvectorSettings(c.Sinks[1]), pgvector.DefaultConfig(); got.DSN == "" || got.Table != want.Table || got.BatchRows != want.BatchRows ||
		got.Index != want.Index || got.Distance != want.Distance || got.RetryTimeout != want.RetryTimeout {
		t.Fatalf("keys left out: %+v, want the defaults %+v", got, want)
	}
	cases := []struct{ name, extra, want string }{
		{"index", "    index: ivfflat\n", `line 11: sinks.1.index: "ivfflat" is not hnsw, deferred or none`},
		{"distance", "    distance: dot\n", `line 11: sinks.1.distance: "dot" is not inner_product, cosine or l2`},
		{"batch_rows", "    batch_rows: -5\n", "line 11: sinks.1.batch_rows: must be >= 1"},
		{"batch_rows 0", "    batch_rows: 0\n", "line 11: sinks.1.batch_rows: must be >= 1"},
		{"table", "    table: My-Vectors\n", `line 11: sinks.1.table: "My-Vectors" is not a plain identifier`},
		{"long table", "    table: " + strings.Repeat("t", 41) + "\n", "line 11: sinks.1.table:"},
		{"negative retry_timeout", "    retry_timeout: -1s\n", "line 11: sinks.1.retry_timeout: must be > 0"},
		{"retry_timeout not a duration", "    retry_timeout: soon\n", `line 11: sinks.1.retry_timeout: "soon" is not a duration like 5s or 20ms`},
		{"retry_timeout a number", "    retry_timeout: 30\n", `line 11: sinks.1.retry_timeout: "30" is not a duration like 5s or 20ms`},
		{"batch_rows a word", "    batch_rows: many\n", `line 11: sinks.1.batch_rows: "many" is not a whole number`},
		{"unknown key", "    indexes: hnsw\n", "line 11: sinks.1.indexes: unknown key; did you mean sinks.1.index?"},
		{"a file sink's key", "    dir: out/w\n", "line 11: sinks.1.dir: applies only to the parquet and jsonl sinks"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(pgvectorPipeline + c.extra))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	// A pgvector key on another sink type is refused as such.
	_, err = Parse([]byte(strings.Replace(pgvectorPipeline, "    dir: out/v\n", "    dir: out/v\n    index: hnsw\n", 1)))
	if err == nil || !strings.Contains(err.Error(), "line 9: sinks.0.index: applies only to the pgvector sink") {
		t.Fatalf("index on a parquet sink: %v", err)
	}
}

// The loader and the sink's Open say the same reason for the same bad value: Open refuses it
// before connecting, so no database is needed.
func TestPgvectorOneRule(t *testing.T) {
	cases := []struct {
		key  string
		bad  func(*pgvector.Config)
		yaml string
	}{
		{"index", func(c *pgvector.Config) { c.Index = "ivfflat" }, "    index: ivfflat\n"},
		{"distance", func(c *pgvector.Config) { c.Distance = "dot" }, "    distance: dot\n"},
		{"batch_rows", func(c *pgvector.Config) { c.BatchRows = -5 }, "    batch_rows: -5\n"},
		{"table", func(c *pgvector.Config) { c.Table = "My-Vectors" }, "    table: My-Vectors\n"},
		{"retry_timeout", func(c *pgvector.Config) { c.RetryTimeout = -1 }, "    retry_timeout: -1ns\n"},
	}
	for _, c := range cases {
		t.Run(c.key, func(t *testing.T) {
			_, loadErr := Parse([]byte(pgvectorPipeline + c.yaml))
			var fe *FieldError
			if !errors.As(loadErr, &fe) || fe.Path != "sinks.1."+c.key {
				t.Fatalf("loader: %v", loadErr)
			}
			cfg := pgvector.DefaultConfig()
			c.bad(&cfg)
			_, openErr := pgvector.Open(context.Background(), pgvector.Options{Config: cfg, Key: "sinks[1]"})
			if want := "pgvector sink: sinks[1]." + c.key + ": " + fe.Reason; openErr == nil || openErr.Error() != want {
				t.Fatalf("Open: %v\nwant %q (the loader's reason)", openErr, want)
			}
		})
	}
}
