package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

// Topics are created by package kafkaadmin (EnsureTopics); this package checks their names
// and waits for them to exist.

// ValidTopicName applies the broker's rule to a topic name, so a bad name fails before any
// connection.
func ValidTopicName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 249 {
		return fmt.Errorf("kafka: invalid topic name %q", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("kafka: invalid topic name %q: only ASCII letters, digits, '.', '_' and '-' are allowed", name)
		}
	}
	return nil
}

// topicWait is how long a consumer waits for missing topics to be created, and how long a
// producer retries a topic the broker does not know. A variable so tests can shorten it.
var topicWait = time.Minute

// awaitTopics returns once every topic in names exists, or fails when one is still missing
// after topicWait. It asks without allowing the broker to create topics, so a misspelt name
// fails instead of creating a topic where auto-creation is on.
func awaitTopics(ctx context.Context, rc Resolved, names []string, log *slog.Logger) error {
	tr := rc.Transport()
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(rc.brokers...), Transport: tr, Timeout: 30 * time.Second}
	var firstMissing time.Time
	for attempt := 1; ; attempt++ {
		meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
		var missing []string
		if err == nil {
			found := map[string]bool{}
			for _, t := range meta.Topics {
				if t.Error == nil {
					found[t.Name] = true
				} else if !errors.Is(t.Error, kafka.UnknownTopicOrPartition) && err == nil {
					err = fmt.Errorf("topic %s: %w", t.Name, t.Error)
				}
			}
			for _, t := range names {
				if !found[t] {
					missing = append(missing, t)
				}
			}
			if err == nil && len(missing) == 0 {
				return nil
			}
		}
		switch {
		case err != nil && !Transient(err):
			return fmt.Errorf("kafka: reading topic metadata: %w", err)
		case err != nil:
			log.Warn("kafka: reading topic metadata failed; retrying", "attempt", attempt, "err", err)
		default:
			if firstMissing.IsZero() {
				firstMissing = time.Now()
			} else if time.Since(firstMissing) > topicWait {
				return fmt.Errorf("kafka: topics %v do not exist (create them with EnsureTopics)", missing)
			}
			log.Warn("kafka: waiting for topics to be created", "topics", missing)
		}
		if !WaitRetry(ctx, attempt) {
			return ctx.Err()
		}
	}
}
