package kafkaadmin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	kafka "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/internal/kafkaclient"
)

// Requirement is a setting an existing topic must have for the data on it to stay right. A
// topic made by someone else, or before reignpipe set the value, keeps its own settings, so
// EnsureTopics reads them back (DescribeConfigs) and refuses a topic that breaks one, rather
// than run on a store that loses records.
type Requirement struct {
	Key string
	// Equal: the value must be exactly this. Otherwise AtLeast: a number no smaller.
	Equal   string
	AtLeast int64
	// Why says what breaks otherwise; it ends the refusal.
	Why string
}

func (r Requirement) met(v string) bool {
	if r.Equal != "" {
		return v == r.Equal
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return err == nil && n >= r.AtLeast
}

func (r Requirement) want() string {
	if r.Equal != "" {
		return r.Equal
	}
	return strconv.FormatInt(r.AtLeast, 10)
}

// checkTopicConfigs reads the settings of the spec topics and returns an error listing every
// Requirement an existing topic breaks, each with the command that fixes it. Settings of Config
// that differ but are not required are logged once: they were chosen by whoever made the topic.
// A cluster that does not let this client describe topic configs gets a warning, since the
// check is a guard and the stages need no such permission otherwise.
func checkTopicConfigs(ctx context.Context, client *kafka.Client, names []string, specs map[string]TopicSpec, logDiffs bool) error {
	req := &kafka.DescribeConfigsRequest{}
	for _, n := range names {
		s := specs[n]
		keys := map[string]bool{}
		for k := range s.Config {
			keys[k] = true
		}
		for _, r := range s.Require {
			keys[r.Key] = true
		}
		if len(keys) == 0 {
			continue
		}
		res := kafka.DescribeConfigRequestResource{ResourceType: kafka.ResourceTypeTopic, ResourceName: n}
		for k := range keys {
			res.ConfigNames = append(res.ConfigNames, k)
		}
		sort.Strings(res.ConfigNames)
		req.Resources = append(req.Resources, res)
	}
	if len(req.Resources) == 0 {
		return nil
	}
	resp, err := client.DescribeConfigs(ctx, req)
	if err != nil {
		return err
	}
	var refusals []string
	for _, res := range resp.Resources {
		s, ok := specs[res.ResourceName]
		if !ok {
			continue
		}
		if res.Error != nil {
			if errors.Is(res.Error, kafka.TopicAuthorizationFailed) || errors.Is(res.Error, kafka.ClusterAuthorizationFailed) {
				slog.Warn("kafka: not allowed to read the topic's settings; they are not checked (grant DescribeConfigs on the topic to have them checked)",
					"topic", s.Name, "err", res.Error)
				continue
			}
			return fmt.Errorf("kafka: reading the settings of topic %s: %w", s.Name, res.Error)
		}
		got := map[string]string{}
		for _, e := range res.ConfigEntries {
			got[e.ConfigName] = e.ConfigValue
		}
		required := map[string]bool{}
		for _, r := range s.Require {
			required[r.Key] = true
			if v, ok := got[r.Key]; !ok || !r.met(v) {
				cmp := ""
				if r.Equal == "" {
					cmp = "at least "
				}
				refusals = append(refusals, fmt.Sprintf("topic %s has %s=%s, and reignpipe needs %s%s: %s; set it (kafka-configs.sh --bootstrap-server BROKER --alter --entity-type topics --entity-name %s --add-config %s=%s) or delete the topic and let reignpipe create it",
					s.Name, r.Key, orNone(v, ok), cmp, r.want(), r.Why, s.Name, r.Key, r.want()))
			}
		}
		if !logDiffs {
			continue
		}
		keys := make([]string, 0, len(s.Config))
		for k := range s.Config {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if v := got[k]; !required[k] && v != s.Config[k] {
				slog.Info("kafka: topic setting differs from what reignpipe creates it with; leaving it as it is",
					"topic", s.Name, "setting", k, "value", v, "reignpipe", s.Config[k])
			}
		}
	}
	if len(refusals) > 0 {
		return &ConfigError{Problems: refusals}
	}
	return nil
}

func orNone(v string, ok bool) string {
	if !ok {
		return "(unset)"
	}
	return v
}

// ConfigError is an existing topic whose settings would lose or corrupt data. It is never
// retried: only an operator can change the topic.
type ConfigError struct{ Problems []string }

func (e *ConfigError) Error() string { return "kafka: " + strings.Join(e.Problems, "; ") }

// BrokerSetting is the smallest value of a numeric broker setting (such as
// socket.request.max.bytes) over the cluster's brokers, for limits every broker must allow.
func BrokerSetting(ctx context.Context, cfg kafkaclient.ClientConfig, key string) (int64, error) {
	rc, err := cfg.Resolve()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tr := rc.Transport()
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(rc.Brokers()...), Transport: tr, Timeout: 30 * time.Second}
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
	if err != nil {
		return 0, fmt.Errorf("kafka: listing brokers: %w", err)
	}
	least := int64(-1)
	for _, b := range meta.Brokers {
		resp, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{
			{ResourceType: kafka.ResourceTypeBroker, ResourceName: strconv.Itoa(b.ID), ConfigNames: []string{key}},
		}})
		if err != nil {
			return 0, fmt.Errorf("kafka: reading %s of broker %d: %w", key, b.ID, err)
		}
		for _, res := range resp.Resources {
			if res.Error != nil {
				return 0, fmt.Errorf("kafka: reading %s of broker %d: %w", key, b.ID, res.Error)
			}
			for _, e := range res.ConfigEntries {
				if e.ConfigName != key {
					continue
				}
				n, err := strconv.ParseInt(e.ConfigValue, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("kafka: broker %d: %s=%q is not a number", b.ID, key, e.ConfigValue)
				}
				if least < 0 || n < least {
					least = n
				}
			}
		}
	}
	if least < 0 {
		return 0, fmt.Errorf("kafka: no broker reported %s", key)
	}
	return least, nil
}

// TopicSettings reads the current values of settings of a topic.
func TopicSettings(ctx context.Context, cfg kafkaclient.ClientConfig, topic string, keys ...string) (map[string]string, error) {
	rc, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	tr := rc.Transport()
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(rc.Brokers()...), Transport: tr, Timeout: 30 * time.Second}
	resp, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{
		{ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: keys},
	}})
	if err != nil {
		return nil, fmt.Errorf("kafka: reading the settings of topic %s: %w", topic, err)
	}
	out := map[string]string{}
	for _, res := range resp.Resources {
		if res.Error != nil {
			return nil, fmt.Errorf("kafka: reading the settings of topic %s: %w", topic, res.Error)
		}
		for _, e := range res.ConfigEntries {
			out[e.ConfigName] = e.ConfigValue
		}
	}
	return out, nil
}
