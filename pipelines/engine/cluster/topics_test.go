package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/pipelines"
)

func kafkaConfig(t *testing.T) *pipelines.Config {
	t.Helper()
	y := "version: 1\nname: t\nsource: {type: jsonl, path: in.jsonl}\nsinks:\n  - {type: kafka}\n" +
		"transport:\n  type: kafka\n  kafka:\n    brokers: [\"b:9092\"]\n    topics: p\n"
	cfg, err := pipelines.Parse([]byte(y))
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	return cfg
}

// min.insync.replicas follows the replication factor: nothing at 1, 1 at 2, a majority from 3.
func TestMinInsyncReplicas(t *testing.T) {
	for _, c := range []struct{ rf, want int }{{1, 0}, {2, 1}, {3, 2}, {4, 3}, {5, 3}, {7, 4}} {
		if got := MinInsyncReplicas(c.rf); got != c.want {
			t.Errorf("RF %d: min.insync.replicas %d, want %d", c.rf, got, c.want)
		}
	}
}

// The worst-case window count of a document within source.max_doc_bytes (one token per byte),
// and the manifest bound from it, for each chunking mode; no bound is an error naming the key.
func TestManifestMaxBytes(t *testing.T) {
	cases := []struct {
		name        string
		k, s        int
		mode        string
		maxDocBytes int64
		windows     int64
		err         string
	}{
		{name: "defaults", k: 512, s: 512, mode: "fixed", maxDocBytes: 32 << 20, windows: 65794},
		{name: "overlap", k: 64, s: 34, mode: "fixed", maxDocBytes: 1000, windows: 1 + (1000-62+31)/32},
		{name: "short document", k: 512, s: 512, mode: "fixed", maxDocBytes: 100, windows: 1},
		{name: "anchored", k: 512, s: 512, mode: "anchored", maxDocBytes: 1 << 20, windows: 1 << 20},
		{name: "no bound", k: 512, s: 512, mode: "fixed", err: "source.max_doc_bytes: 0 (no bound)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := kafkaConfig(t)
			cfg.Chunking.K, cfg.Chunking.S, cfg.Chunking.Mode, cfg.Source.MaxDocBytes = c.k, c.s, c.mode, c.maxDocBytes
			got, err := ManifestMaxBytes(cfg)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.windows*8+64<<10 {
				t.Fatalf("%d bytes (%v), want %d windows -> %d", got, err, c.windows, c.windows*8+64<<10)
			}
		})
	}
}

// The settings every topic is created with.
func TestTopicSpecs(t *testing.T) {
	cfg := kafkaConfig(t)
	cfg.Transport.Kafka.ReplicationFactor = 3
	cfg.Run.DeleteRetention.Duration = 2 * time.Hour
	specs, err := topicSpecs(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"p.raw":        {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1", "min.insync.replicas": "2"},
		"p.chunks":     {"cleanup.policy": "delete", "retention.ms": "604800000", "min.insync.replicas": "2"},
		"p.deadletter": {"min.insync.replicas": "2"},
		"p.windows":    {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", "max.message.bytes": "1048588", "min.insync.replicas": "2"},
		"p.manifests": {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", "max.message.bytes": "1048588", "min.insync.replicas": "2",
			"delete.retention.ms": "7200000"},
		"p.vectors": {"cleanup.policy": "compact", "min.insync.replicas": "2", "delete.retention.ms": "7200000"},
	}
	if len(specs) != len(want) {
		t.Fatalf("%d topics, want %d: %+v", len(specs), len(want), specs)
	}
	for _, s := range specs {
		w, ok := want[s.Name]
		if !ok || s.Partitions != 6 || s.ReplicationFactor != 3 || len(s.Config) != len(w) {
			t.Errorf("%s: %+v, want config %v", s.Name, s, w)
			continue
		}
		for k, v := range w {
			if s.Config[k] != v {
				t.Errorf("%s: %s = %q, want %q", s.Name, k, s.Config[k], v)
			}
		}
	}
	// A manifest bound, or a record size, over the broker default raises the topics' limits
	// to the producers' batches: the record plus 100 000 bytes plus the framing margin.
	for _, c := range []struct {
		maxDocBytes        int64
		maxRecordBytes     int
		windows, manifests string
	}{
		{256 << 20, 900_000, "1048588", "4392680"},
		{32 << 20, 2_000_000, "2116384", "2116384"},
	} {
		cfg.Source.MaxDocBytes, cfg.Transport.Kafka.MaxRecordBytes = c.maxDocBytes, c.maxRecordBytes
		specs, _ = topicSpecs(cfg)
		for _, s := range specs {
			want := map[string]string{"p.windows": c.windows, "p.manifests": c.manifests}[s.Name]
			if want != "" && s.Config["max.message.bytes"] != want {
				t.Errorf("%d-byte documents, %d-byte records: %s max.message.bytes %s, want %s", c.maxDocBytes, c.maxRecordBytes, s.Name, s.Config["max.message.bytes"], want)
			}
		}
	}
}
