// Package kafkaadmin administers a Kafka cluster for reignpipe, beside the client (package
// kafkaclient) as an admin client is beside a producer and a consumer: EnsureTopics creates
// missing topics and refuses existing ones whose settings would lose data, and BrokerSetting
// and TopicSettings read broker and topic settings. The stages call it before their producers
// and consumers start; nothing here reads or writes records.
//
// It connects through the client's resolved configuration (kafkaclient.ClientConfig.Resolve:
// brokers, TLS, SASL), retries what the client calls transient on the client's schedule
// (kafkaclient.Transient, kafkaclient.WaitRetry), and while it waits for unreachable brokers
// it logs the wait and gives up naming transport.kafka.brokers (reach.go).
package kafkaadmin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	kafka "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/internal/kafkaclient"
)

// TopicSpec is a topic to create if it is missing.
type TopicSpec struct {
	Name              string
	Partitions        int // at least 1
	ReplicationFactor int // at least 1, at most the number of brokers
	// Config holds topic-level settings such as "retention.ms" or "cleanup.policy", set when
	// the topic is created; an existing topic whose value differs is logged and left alone.
	Config map[string]string
	// Require lists settings an existing topic must satisfy: one that does not is refused.
	Require []Requirement
}

// topicsRetryTimeout bounds how long EnsureTopics retries an unreachable cluster or waits for
// new partitions to get leaders when ctx has no earlier deadline.
const topicsRetryTimeout = time.Minute

func (s TopicSpec) validate() error {
	if err := kafkaclient.ValidTopicName(s.Name); err != nil {
		return err
	}
	if s.Partitions < 1 {
		return fmt.Errorf("kafka: topic %s: partitions must be at least 1, got %d", s.Name, s.Partitions)
	}
	if s.ReplicationFactor < 1 || s.ReplicationFactor > 32767 {
		return fmt.Errorf("kafka: topic %s: replication factor must be in 1..32767, got %d", s.Name, s.ReplicationFactor)
	}
	for k := range s.Config {
		if k == "" {
			return fmt.Errorf("kafka: topic %s: empty config key", s.Name)
		}
	}
	for _, r := range s.Require {
		if r.Key == "" || (r.Equal == "" && r.AtLeast <= 0) {
			return fmt.Errorf("kafka: topic %s: a requirement needs a key and a value", s.Name)
		}
	}
	return nil
}

// EnsureTopics creates those of specs that do not exist and returns once every listed topic
// exists with a leader for each partition, so producers and consumers can use them at once.
// Existing topics are left as they are: a partition count or a Config value that differs from
// the spec is logged at Info on slog.Default (the topic's data and keys' partitions would move
// if it were changed here), and a topic that breaks a Requirement is refused (ConfigError). It
// blocks on the cluster and retries transient failures (broker unreachable, controller moving)
// until ctx ends or a minute passes; other errors, such as a rejected config or replication
// factor, a failed authentication or an untrusted certificate, are returned at once.
func EnsureTopics(ctx context.Context, cfg kafkaclient.ClientConfig, specs ...TopicSpec) error {
	rc, err := cfg.Resolve()
	if err != nil {
		return err
	}
	byName := make(map[string]TopicSpec, len(specs))
	for _, s := range specs {
		if err := s.validate(); err != nil {
			return err
		}
		if _, dup := byName[s.Name]; dup {
			return fmt.Errorf("kafka: topic %s listed twice", s.Name)
		}
		byName[s.Name] = s
	}
	if len(specs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, topicsRetryTimeout)
	defer cancel()
	tr := rc.Transport()
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(rc.Brokers()...), Transport: tr, Timeout: 30 * time.Second}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)

	created, checked := false, false
	started, lastLog := time.Now(), time.Time{}
	for attempt := 1; ; attempt++ {
		missing, leaderless, err := describeTopics(ctx, client, names, byName, !created)
		if err == nil && len(missing) == 0 && len(leaderless) == 0 {
			// Settings are read once every topic is there: a topic created just now has its
			// spec's, and the check then only confirms the broker took them.
			if err = checkTopicConfigs(ctx, client, names, byName, !checked); err == nil {
				return nil
			}
			checked = true
		}
		if err == nil && len(missing) > 0 {
			err = createTopics(ctx, client, missing, byName)
			created = true
		}
		if err != nil && !kafkaclient.Transient(err) {
			return err
		}
		if err == nil {
			err = fmt.Errorf("topics %v have no leader yet", append(missing, leaderless...))
		}
		retryLog(ctx, rc.Brokers(), err, started, &lastLog)
		if !kafkaclient.WaitRetry(ctx, attempt) {
			return gaveUp(ctx, rc.Brokers(), fmt.Sprintf("ensuring topics %v", names), started, err)
		}
	}
}

// describeTopics reports which topics are missing and which exist but have a partition
// without a leader (just created, metadata still spreading).
func describeTopics(ctx context.Context, client *kafka.Client, names []string, specs map[string]TopicSpec, logDiffs bool) (missing, leaderless []string, err error) {
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		return nil, nil, err
	}
	seen := make(map[string]bool, len(names))
	for _, t := range meta.Topics {
		if _, ok := specs[t.Name]; !ok {
			continue
		}
		seen[t.Name] = true
		switch {
		case errors.Is(t.Error, kafka.UnknownTopicOrPartition):
			missing = append(missing, t.Name)
			continue
		case t.Error != nil && errors.Is(t.Error, kafka.LeaderNotAvailable):
			leaderless = append(leaderless, t.Name)
			continue
		case t.Error != nil:
			return nil, nil, fmt.Errorf("kafka: metadata of topic %s: %w", t.Name, t.Error)
		}
		if len(t.Partitions) == 0 {
			leaderless = append(leaderless, t.Name)
			continue
		}
		for _, p := range t.Partitions {
			if p.Leader.Host == "" || p.Error != nil {
				leaderless = append(leaderless, t.Name)
				break
			}
		}
		if want := specs[t.Name].Partitions; logDiffs && len(t.Partitions) != want {
			slog.Info("kafka: topic exists with a different partition count; leaving it as it is",
				"topic", t.Name, "partitions", len(t.Partitions), "spec", want)
		}
	}
	for _, n := range names {
		if !seen[n] {
			missing = append(missing, n)
		}
	}
	return missing, leaderless, nil
}

func createTopics(ctx context.Context, client *kafka.Client, names []string, specs map[string]TopicSpec) error {
	req := &kafka.CreateTopicsRequest{}
	for _, n := range names {
		s := specs[n]
		tc := kafka.TopicConfig{Topic: n, NumPartitions: s.Partitions, ReplicationFactor: s.ReplicationFactor}
		keys := make([]string, 0, len(s.Config))
		for k := range s.Config {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: s.Config[k]})
		}
		req.Topics = append(req.Topics, tc)
	}
	resp, err := client.CreateTopics(ctx, req)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		e := resp.Errors[n]
		switch {
		case e == nil:
			slog.Info("kafka: created topic", "topic", n, "partitions", specs[n].Partitions,
				"replication_factor", specs[n].ReplicationFactor)
		case errors.Is(e, kafka.TopicAlreadyExists):
			// Another client created it between our metadata request and this one.
		default:
			errs = append(errs, fmt.Errorf("kafka: creating topic %s: %w", n, e))
		}
	}
	return errors.Join(errs...)
}
