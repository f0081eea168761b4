package pipelines

import (
	"strings"
	"testing"
)

// transport.kafka.raw_retention and .chunks_retention: what each spelling means as retention.ms,
// the defaults, and bad values reported with their YAML path and line.
func TestKafkaRetention(t *testing.T) {
	kafka := func(extra string) string {
		return strings.Replace(minimal, "type: parquet\n    dir: out/v", "type: kafka", 1) +
			"transport:\n  type: kafka\n  kafka:\n    brokers: [\"b:9092\"]\n    topics: p\n" + extra
	}
	cases := []struct {
		name, extra     string
		raw, chunks     int64
		wantErr, reason string
	}{
		{name: "defaults", raw: -1, chunks: 7 * 24 * 3600_000},
		{name: "forever", extra: "    raw_retention: forever\n    chunks_retention: -1\n", raw: -1, chunks: -1},
		{name: "days and hours", extra: "    raw_retention: 30d\n    chunks_retention: 36h\n", raw: 30 * 24 * 3600_000, chunks: 36 * 3600_000},
		{name: "fractional days", extra: "    chunks_retention: 1.5d\n", raw: -1, chunks: 36 * 3600_000},
		{name: "not a duration", extra: "    raw_retention: a week\n", wantErr: "line 13: transport.kafka.raw_retention", reason: `"a week" is not a duration`},
		{name: "under a minute", extra: "    chunks_retention: 10s\n", wantErr: "line 13: transport.kafka.chunks_retention", reason: "under a minute"},
		{name: "zero", extra: "    chunks_retention: 0s\n", wantErr: "line 13: transport.kafka.chunks_retention", reason: "under a minute"},
		{name: "negative other than -1", extra: "    raw_retention: -2h\n", wantErr: "line 13: transport.kafka.raw_retention", reason: "under a minute"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(kafka(c.extra)))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), c.reason) {
					t.Fatalf("error %v, want %q ... %q", err, c.wantErr, c.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			raw, err1 := cfg.Transport.Kafka.RawRetention.Millis()
			chunks, err2 := cfg.Transport.Kafka.ChunksRetention.Millis()
			if err1 != nil || err2 != nil || raw != c.raw || chunks != c.chunks {
				t.Fatalf("raw %d (%v), chunks %d (%v); want %d, %d", raw, err1, chunks, err2, c.raw, c.chunks)
			}
		})
	}
}

// source.type debezium and transport.kafka.raw_format debezium come together; the debezium
// source reads no file; transport.kafka.raw_topic replaces <topics>.raw.
func TestDebeziumRawFormat(t *testing.T) {
	const debeziumSource = "source:\n  type: debezium\n  id_column: article_id\n  text_columns: [summary, body]\n"
	pipeline := func(source, transport string) string {
		return "version: 1\nname: t\n" + source + "sinks:\n  - type: parquet\n    dir: out/v\n" + transport
	}
	kafka := func(extra string) string {
		return "transport:\n  type: kafka\n  kafka:\n    brokers: [\"b:9092\"]\n    topics: p\n" + extra
	}
	cases := []struct {
		name, yaml string
		rawTopic   string
		wantErr    string
	}{
		{name: "debezium", yaml: pipeline(debeziumSource, kafka("    raw_format: debezium\n    raw_topic: dbz.public.articles\n")), rawTopic: "dbz.public.articles"},
		{name: "default raw topic", yaml: pipeline(debeziumSource, kafka("    raw_format: debezium\n")), rawTopic: "p.raw"},
		{name: "embedded", yaml: pipeline(debeziumSource, ""), wantErr: "line 4: source.type: a debezium source is the change events on a Kafka topic"},
		{name: "raw format json", yaml: pipeline(debeziumSource, kafka("")), wantErr: "transport.kafka.raw_format: debezium"},
		{name: "source jsonl", yaml: pipeline("source:\n  type: jsonl\n  path: in.jsonl\n", kafka("    raw_format: debezium\n")), wantErr: "line 14: transport.kafka.raw_format: debezium takes the columns that make a document from the source section: set source.type: debezium"},
		{name: "bad column key", yaml: pipeline("source:\n  type: debezium\n  text_columns: []\n", kafka("    raw_format: debezium\n")), wantErr: "source.text_columns: name at least one column"},
		{name: "bad raw topic", yaml: pipeline(debeziumSource, kafka("    raw_format: debezium\n    raw_topic: a/b\n")), wantErr: `transport.kafka.raw_topic: "a/b" is not a valid topic name`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(c.yaml))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Transport.Kafka.RawTopic(); got != c.rawTopic {
				t.Fatalf("raw topic %q, want %q", got, c.rawTopic)
			}
		})
	}
}
