package kafkaclient

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
	t.Cleanup(func() { deleteTopic(t, cfg, name) })
	createTopic(t, ctx, cfg, name, partitions)
	return name
}

// createTopic creates a topic and returns once every partition has a leader. Topics are made by
// package kafkaadmin (EnsureTopics), which imports this one, so the tests here make their own.
func createTopic(t *testing.T, ctx context.Context, cfg ClientConfig, name string, partitions int) {
	t.Helper()
	rc, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	tr := rc.Transport()
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(rc.brokers...), Transport: tr, Timeout: 30 * time.Second}
	created := false
	for attempt := 1; ; attempt++ {
		if !created {
			var resp *kafka.CreateTopicsResponse
			resp, err = client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{
				{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}}})
			if err == nil {
				if err = resp.Errors[name]; errors.Is(err, kafka.TopicAlreadyExists) {
					err = nil
				}
			}
			created = err == nil
		}
		if created {
			var meta *kafka.MetadataResponse
			if meta, err = client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{name}}); err == nil && leadersFor(meta, name, partitions) {
				return
			}
		}
		if err != nil && !Transient(err) {
			t.Fatalf("creating topic %s: %v", name, err)
		}
		if !WaitRetry(ctx, attempt) {
			t.Fatalf("topic %s: no leader for every partition (%v)", name, err)
		}
	}
}

// leadersFor reports whether meta shows topic with its partitions, each with a leader.
func leadersFor(meta *kafka.MetadataResponse, topic string, partitions int) bool {
	for _, tp := range meta.Topics {
		if tp.Name != topic || tp.Error != nil || len(tp.Partitions) != partitions {
			continue
		}
		for _, p := range tp.Partitions {
			if p.Leader.Host == "" || p.Error != nil {
				return false
			}
		}
		return true
	}
	return false
}

func deleteTopic(t *testing.T, cfg ClientConfig, name string) {
	rc, err := cfg.Resolve()
	if err != nil {
		t.Error(err)
		return
	}
	tr := rc.Transport()
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
	rc, _ := cfg.Resolve()
	tr := rc.Transport()
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
	createTopic(t, ctx, cfg, topic, 3)
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
