package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkaadmin"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
)

// The pipeline's topics on the real broker: created with reignpipe's settings (which the broker
// must accept), a raw topic someone made with another partition count is used as it is, and an
// existing store topic that would lose data, or a configuration whose manifests no broker
// request can carry, refuses the start with what to change.
func TestEnsurePipelineTopics(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	client := kafkaclient.ClientConfig{Brokers: strings.Split(brokers, ",")}
	cases := []struct {
		name   string
		before []kafkaadmin.TopicSpec // made first, as an operator might have; .raw etc. are suffixes
		edit   func(cfg *configEdit)
		want   []string // in the refusal; none: accepted
	}{
		{name: "fresh"},
		{name: "raw with its own partition count", before: []kafkaadmin.TopicSpec{{Name: ".raw", Partitions: 2}, {Name: ".chunks", Partitions: 5}}},
		{name: "windows not compacted", before: []kafkaadmin.TopicSpec{{Name: ".windows", Partitions: 1, Config: map[string]string{"cleanup.policy": "delete"}}},
			want: []string{".windows has cleanup.policy=delete, and reignpipe needs compact", "--add-config cleanup.policy=compact"}},
		{name: "manifests too small", before: []kafkaadmin.TopicSpec{{Name: ".manifests", Partitions: 1, Config: map[string]string{"cleanup.policy": "compact", "max.message.bytes": "100000"}}},
			want: []string{".manifests has max.message.bytes=100000, and reignpipe needs at least 1048588", "source.max_doc_bytes=33554432 can reach 591888 bytes"}},
		{name: "vectors with delete", before: []kafkaadmin.TopicSpec{{Name: ".vectors", Partitions: 1, Config: map[string]string{"cleanup.policy": "compact,delete"}}},
			want: []string{".vectors has cleanup.policy=compact,delete, and reignpipe needs compact"}},
		{name: "manifest over the broker's request limit", edit: func(c *configEdit) { c.maxDocBytes, c.anchored = 200<<20, true },
			want: []string{"source.max_doc_bytes: a document of 209715200 bytes can have 209715200 windows (chunking.mode anchored",
				"socket.request.max.bytes 104857600): lower source.max_doc_bytes to 13082412 or less"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := kafkaConfig(t)
			prefix := kafkatest.Topic(t, "launch")
			cfg.Transport.Kafka.Brokers, cfg.Transport.Kafka.Topics, cfg.Transport.Kafka.Partitions = client.Brokers, prefix, 3
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, b := range c.before {
				b.Name, b.ReplicationFactor = prefix+b.Name, 1
				if err := kafkaadmin.EnsureTopics(ctx, client, b); err != nil {
					t.Fatal(err)
				}
			}
			if c.edit != nil {
				e := configEdit{maxDocBytes: cfg.Source.MaxDocBytes}
				c.edit(&e)
				cfg.Source.MaxDocBytes = e.maxDocBytes
				if e.anchored {
					cfg.Chunking.Mode = "anchored"
				}
			}
			start := time.Now()
			err := EnsureTopics(ctx, cfg, client)
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("took %v", d)
			}
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				checkSettings(t, ctx, client, prefix, c.before)
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
			t.Logf("refused: %v", err)
		})
	}
}

type configEdit struct {
	maxDocBytes int64
	anchored    bool
}

// checkSettings reads back what the broker holds for the topics reignpipe created (those not
// made before by the test).
func checkSettings(t *testing.T, ctx context.Context, client kafkaclient.ClientConfig, prefix string, before []kafkaadmin.TopicSpec) {
	t.Helper()
	want := map[string]map[string]string{
		".raw":       {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"},
		".chunks":    {"cleanup.policy": "delete", "retention.ms": "604800000"},
		".windows":   {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", "max.message.bytes": "1048588"},
		".manifests": {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", "max.message.bytes": "1048588", "delete.retention.ms": "604800000"},
		".vectors":   {"cleanup.policy": "compact", "delete.retention.ms": "604800000"},
	}
	for _, b := range before {
		delete(want, b.Name)
	}
	for suffix, w := range want {
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		got, err := kafkaadmin.TopicSettings(ctx, client, prefix+suffix, keys...)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range w {
			if got[k] != v {
				t.Errorf("%s%s: %s = %q on the broker, want %q", prefix, suffix, k, got[k], v)
			}
		}
	}
}
