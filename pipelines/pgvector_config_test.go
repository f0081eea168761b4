package pipelines

import (
	"strings"
	"testing"
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

// Each bad value of a pgvector sink key is refused with its YAML path and line.
func TestPgvectorSinkKeys(t *testing.T) {
	c, err := Parse([]byte(pgvectorPipeline + "    table: docs\n    index: deferred\n    distance: cosine\n    batch_rows: 100\n    retry_timeout: 30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Sinks[1]; s.Table != "docs" || s.Index != "deferred" || s.Distance != "cosine" || s.BatchRows != 100 || s.RetryTimeout.Seconds() != 30 {
		t.Fatalf("parsed %+v", s)
	}
	cases := []struct{ name, extra, want string }{
		{"index", "    index: ivfflat\n", `line 11: sinks.1.index: "ivfflat" is not hnsw, deferred or none`},
		{"distance", "    distance: dot\n", `line 11: sinks.1.distance: "dot" is not inner_product, cosine or l2`},
		{"batch_rows", "    batch_rows: -5\n", "line 11: sinks.1.batch_rows: must be >= 1"},
		{"table", "    table: My-Vectors\n", `line 11: sinks.1.table: "My-Vectors" is not a plain identifier`},
		{"long table", "    table: " + strings.Repeat("t", 41) + "\n", "line 11: sinks.1.table:"},
		{"negative retry_timeout", "    retry_timeout: -1s\n", "line 11: sinks.1.retry_timeout: must be > 0"},
		{"retry_timeout not a duration", "    retry_timeout: soon\n", "line 11"},
		{"unknown key", "    indexes: hnsw\n", "line 11: sinks.1.indexes: unknown key; did you mean sinks.1.index?"},
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
