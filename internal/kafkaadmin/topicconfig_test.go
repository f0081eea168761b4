package kafkaadmin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkatest"
)

// An existing topic is checked against the spec's requirements on the real broker
// (DescribeConfigs): one that breaks a requirement is refused at once, with the setting, the
// value needed and the command that fixes it; settings that are only different pass.
func TestEnsureTopicsRequirements(t *testing.T) {
	cfg := brokerConfig(t)
	name := kafkatest.Topic(t, "kafka-require")
	t.Cleanup(func() { deleteTopic(t, cfg, name) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Someone else made the topic: delete policy, the default message size.
	if err := EnsureTopics(ctx, cfg, TopicSpec{Name: name, Partitions: 2, ReplicationFactor: 1,
		Config: map[string]string{"cleanup.policy": "delete", "retention.ms": "3600000"}}); err != nil {
		t.Fatal(err)
	}
	compact := Requirement{Key: "cleanup.policy", Equal: "compact", Why: "a store"}
	big := Requirement{Key: "max.message.bytes", AtLeast: 4 << 20, Why: "big records"}
	fits := Requirement{Key: "max.message.bytes", AtLeast: 1000, Why: "small records"}
	cases := []struct {
		name    string
		require []Requirement
		want    []string // in the refusal; none: accepted
	}{
		{"only different", nil, nil},
		{"met", []Requirement{{Key: "cleanup.policy", Equal: "delete", Why: "x"}, fits}, nil},
		{"not compacted", []Requirement{compact}, []string{"topic " + name + " has cleanup.policy=delete, and reignpipe needs compact: a store",
			"--entity-name " + name + " --add-config cleanup.policy=compact"}},
		{"too small", []Requirement{fits, big}, []string{"has max.message.bytes=1048588, and reignpipe needs at least 4194304: big records"}},
		{"both", []Requirement{compact, big}, []string{"cleanup.policy=delete", "max.message.bytes=1048588"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			err := EnsureTopics(ctx, cfg, TopicSpec{Name: name, Partitions: 3, ReplicationFactor: 1,
				Config: map[string]string{"cleanup.policy": "compact", "retention.ms": "-1"}, Require: c.require})
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a ConfigError", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not contain %q", err, w)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("refused after %v: a refusal is not retried", d)
			}
		})
	}
}

// The broker's socket.request.max.bytes (the default on the test broker) is read per broker.
func TestBrokerSetting(t *testing.T) {
	cfg := brokerConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := BrokerSetting(ctx, cfg, "socket.request.max.bytes")
	if err != nil || n != 104857600 {
		t.Fatalf("socket.request.max.bytes %d (%v), want the broker default 104857600", n, err)
	}
}
