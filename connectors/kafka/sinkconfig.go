package kafka

import (
	"regexp"
	"slices"
)

// TopicName is the rule for the topic names and prefixes a pipeline file gives.
var TopicName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,200}$`)

// VectorSinkConfig is a kafka sink's keys in a pipeline file (a sinks[] entry of type kafka);
// the connection is transport.kafka's.
type VectorSinkConfig struct {
	Topic string `yaml:"topic" default:"<p>.vectors" doc:"the vector topic; default <transport.kafka.topics>.vectors"`
	// Format is the record format: rpdv (binary, the default, "" here), json or connect-json
	// (schemas/WIRE.md).
	Format string `yaml:"format" default:"rpdv" doc:"rpdv (binary), json or connect-json (Kafka Connect JsonConverter); JSON records are never fragmented"`
}

// Validate reports a bad topic name or format through bad.
func (c VectorSinkConfig) Validate(bad func(key, format string, args ...any) error) error {
	if c.Topic != "" && !TopicName.MatchString(c.Topic) {
		return bad("topic", "%q is not a valid topic name", c.Topic)
	}
	if c.Format != "" && !slices.Contains(VectorFormats, c.Format) {
		return bad("format", "%q is not rpdv, json or connect-json", c.Format)
	}
	return nil
}
