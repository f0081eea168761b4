package kafkaadmin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	kafka "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
)

// brokerConfig is the client config of the test broker; the test skips without one.
func brokerConfig(t *testing.T) kafkaclient.ClientConfig {
	t.Helper()
	return kafkaclient.ClientConfig{Brokers: strings.Split(kafkatest.Brokers(t), ","), ClientID: "reignpipe-test"}
}

func deleteTopic(t *testing.T, cfg kafkaclient.ClientConfig, name string) {
	rc, err := cfg.Resolve()
	if err != nil {
		t.Error(err)
		return
	}
	tr := rc.Transport()
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(rc.Brokers()...), Transport: tr}
	resp, err := client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{name}})
	if err == nil {
		err = resp.Errors[name]
	}
	if err != nil && !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Logf("deleting topic %s: %v", name, err)
	}
}

// topicPartitions returns the partition count the broker reports, 0 for a missing topic.
func topicPartitions(t *testing.T, cfg kafkaclient.ClientConfig, name string) int {
	t.Helper()
	rc, _ := cfg.Resolve()
	tr := rc.Transport()
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(rc.Brokers()...), Transport: tr}
	meta, err := client.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range meta.Topics {
		if tp.Name == name && tp.Error == nil {
			return len(tp.Partitions)
		}
	}
	return 0
}

func TestEnsureTopicsIdempotent(t *testing.T) {
	cfg := brokerConfig(t)
	a, b := kafkatest.Topic(t, "kafka-ensure-a"), kafkatest.Topic(t, "kafka-ensure-b")
	t.Cleanup(func() { deleteTopic(t, cfg, a); deleteTopic(t, cfg, b) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	specs := []TopicSpec{
		{Name: a, Partitions: 3, ReplicationFactor: 1, Config: map[string]string{"retention.ms": "3600000"}},
		{Name: b, Partitions: 1, ReplicationFactor: 1},
	}
	if err := EnsureTopics(ctx, cfg, specs...); err != nil {
		t.Fatal(err)
	}
	if err := EnsureTopics(ctx, cfg, specs...); err != nil {
		t.Fatalf("second EnsureTopics: %v", err)
	}
	// A differing partition count is left alone, not an error.
	if err := EnsureTopics(ctx, cfg, TopicSpec{Name: a, Partitions: 8, ReplicationFactor: 1}); err != nil {
		t.Fatalf("EnsureTopics with another partition count: %v", err)
	}
	if n := topicPartitions(t, cfg, a); n != 3 {
		t.Fatalf("%s has %d partitions, want 3", a, n)
	}
	if n := topicPartitions(t, cfg, b); n != 1 {
		t.Fatalf("%s has %d partitions, want 1", b, n)
	}
	// The topic is usable at once: a producer writes to every partition without a retry.
	p, err := kafkaclient.NewProducer(cfg, kafkaclient.ProducerOptions{Topic: a})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	for i := range 30 {
		if err := p.Send(ctx, kafkaclient.Message{Key: strings.Repeat("k", i+1), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestEnsureTopicsRejected(t *testing.T) {
	cfg := brokerConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := kafkatest.Topic(t, "kafka-ensure-bad")
	t.Cleanup(func() { deleteTopic(t, cfg, name) })
	// One broker cannot hold three replicas: the error comes back at once, not after retries.
	start := time.Now()
	err := EnsureTopics(ctx, cfg, TopicSpec{Name: name, Partitions: 1, ReplicationFactor: 3})
	if err == nil {
		t.Fatal("a replication factor above the broker count was accepted")
	}
	t.Logf("replication factor 3: %v", err)
	if time.Since(start) > 20*time.Second {
		t.Fatalf("a permanent error took %v", time.Since(start))
	}
	err = EnsureTopics(ctx, cfg, TopicSpec{Name: name, Partitions: 1, ReplicationFactor: 1,
		Config: map[string]string{"cleanup.policy": "sideways"}})
	if err == nil {
		t.Fatal("an invalid topic config was accepted")
	}
	t.Logf("bad config: %v", err)
	if n := topicPartitions(t, cfg, name); n != 0 {
		t.Fatalf("a rejected topic exists with %d partitions", n)
	}
}

func TestEnsureTopicsValidates(t *testing.T) {
	cfg := kafkaclient.ClientConfig{Brokers: []string{"127.0.0.1:9"}}
	ctx := context.Background()
	for _, tc := range []struct {
		spec TopicSpec
		want string
	}{
		{TopicSpec{Name: "", Partitions: 1, ReplicationFactor: 1}, "invalid topic"},
		{TopicSpec{Name: "t/x", Partitions: 1, ReplicationFactor: 1}, "invalid topic"},
		{TopicSpec{Name: "..", Partitions: 1, ReplicationFactor: 1}, "invalid topic"},
		{TopicSpec{Name: strings.Repeat("x", 250), Partitions: 1, ReplicationFactor: 1}, "invalid topic"},
		{TopicSpec{Name: "t", Partitions: 0, ReplicationFactor: 1}, "partitions"},
		{TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 0}, "replication"},
		{TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 1, Config: map[string]string{"": "x"}}, "config key"},
	} {
		if err := EnsureTopics(ctx, cfg, tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.spec, err, tc.want)
		}
	}
	s := TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 1}
	if err := EnsureTopics(ctx, cfg, s, s); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate spec: %v", err)
	}
	if err := EnsureTopics(ctx, kafkaclient.ClientConfig{}, s); err == nil {
		t.Error("EnsureTopics accepted a config without brokers")
	}
}
