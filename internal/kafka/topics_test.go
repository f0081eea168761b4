package kafka

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	kafka "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/internal/kafkatest"
)

// brokerConfig is the client config of the test broker; the test skips without one.
func brokerConfig(t *testing.T) ClientConfig {
	t.Helper()
	return ClientConfig{Brokers: strings.Split(kafkatest.Brokers(t), ","), ClientID: "reignpipe-test"}
}

// newTopic creates a topic of its own for the test and deletes it afterwards.
func newTopic(t *testing.T, cfg ClientConfig, partitions int) string {
	t.Helper()
	name := kafkatest.Topic(t, "kafka-"+t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := EnsureTopics(ctx, cfg, TopicSpec{Name: name, Partitions: partitions, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteTopic(t, cfg, name) })
	return name
}

func deleteTopic(t *testing.T, cfg ClientConfig, name string) {
	rc, err := cfg.resolve()
	if err != nil {
		t.Error(err)
		return
	}
	tr := rc.transport()
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(rc.brokers...), Transport: tr}
	resp, err := client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{name}})
	if err == nil {
		err = resp.Errors[name]
	}
	if err != nil && !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Logf("deleting topic %s: %v", name, err)
	}
}

// topicPartitions returns the partition count the broker reports, 0 for a missing topic.
func topicPartitions(t *testing.T, cfg ClientConfig, name string) int {
	t.Helper()
	rc, _ := cfg.resolve()
	tr := rc.transport()
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(rc.brokers...), Transport: tr}
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
	p, err := NewProducer(cfg, ProducerOptions{Topic: a})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	for i := range 30 {
		if err := p.Send(ctx, Message{Key: strings.Repeat("k", i+1), Value: []byte("v")}); err != nil {
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

// TestConsumerWaitsForTopic starts a consumer before its topic exists, as a worker may start
// before the topic's creator: it must read the partitions once the topic is created.
func TestConsumerWaitsForTopic(t *testing.T) {
	cfg := brokerConfig(t)
	topic := kafkatest.Topic(t, "kafka-late")
	t.Cleanup(func() { deleteTopic(t, cfg, topic) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newConsumer(t, cfg, "g-"+topic, topic)
	time.Sleep(2 * time.Second)
	if err := EnsureTopics(ctx, cfg, TopicSpec{Name: topic, Partitions: 3, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	p, err := NewProducer(cfg, ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	produce(t, ctx, p, 0, 30)
	seen := map[string]bool{}
	for len(seen) < 30 {
		d, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of 30: %v", len(seen), err)
		}
		seen[string(d.Value)] = true
	}
}

func TestMissingTopicFails(t *testing.T) {
	cfg := brokerConfig(t)
	defer func(d time.Duration) { topicWait = d }(topicWait)
	topicWait = 2 * time.Second
	topic := kafkatest.Topic(t, "kafka-never")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c := newConsumer(t, cfg, "g-"+topic, topic)
	if _, err := c.Next(ctx); err == nil || !strings.Contains(err.Error(), "do not exist") {
		t.Fatalf("Next on a missing topic: %v", err)
	}
	p, err := NewProducer(cfg, ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if err := p.Send(ctx, Message{Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Flush to a missing topic: %v", err)
	}
	if n := topicPartitions(t, cfg, topic); n != 0 {
		t.Fatalf("the missing topic was created with %d partitions", n)
	}
}
