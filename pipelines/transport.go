package pipelines

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/pipelines/components"
)

// TransportConfig says how the stages of a pipeline are joined. "embedded" (the default) runs
// every stage in one process (`reignpipe run`); "kafka" runs each stage as its own process
// (`reignpipe stage NAME`) joined by Kafka topics, scaled by consumer groups. The rest of the
// pipeline file means the same under both.
type TransportConfig struct {
	Type  string      `yaml:"type"` // embedded | kafka
	Kafka KafkaConfig `yaml:"kafka"`
}

// KafkaConfig places a pipeline on a Kafka cluster.
type KafkaConfig struct {
	Brokers  []string `yaml:"brokers"`
	ClientID string   `yaml:"client_id"`
	// Topics derives the topic names: <topics>.raw, .chunks, .vectors, .deadletter, and the
	// compacted .windows and .manifests.
	Topics string `yaml:"topics"`
	// RawTopicName replaces <topics>.raw as the topic the embed and process stages read (and
	// ingest writes): the topic another producer already writes, such as Debezium's
	// <topic.prefix>.<schema>.<table>.
	RawTopicName string `yaml:"raw_topic"`
	// Group prefixes the consumer groups: <group>.embed, <group>.aggregate. Default: topics.
	Group string `yaml:"group"`
	// Partitions and ReplicationFactor are used when a topic is missing and gets created.
	Partitions        int `yaml:"partitions"`
	ReplicationFactor int `yaml:"replication_factor"`
	// RawRetention and ChunksRetention are retention.ms of <topics>.raw and <topics>.chunks
	// when reignpipe creates them: a duration ("168h", "30d") or "forever" (also -1). Kafka is
	// the store of record, so the raw topic keeps everything by default: the broker's default
	// (delete after 7 days) would make every document older than a week impossible to replay.
	// The chunk topic is a transit topic (the windows and manifests topics hold what it carries,
	// compacted), so it keeps 7 days whatever the broker's default.
	RawRetention    Retention `yaml:"raw_retention"`
	ChunksRetention Retention `yaml:"chunks_retention"`
	// MaxRecordBytes bounds every record value reignpipe produces; larger messages (a huge
	// document, its chunk embeddings) are split into fragments, so broker limits stay as they are.
	MaxRecordBytes int    `yaml:"max_record_bytes"`
	Compression    string `yaml:"compression"` // zstd | lz4 | snappy | gzip | none
	// RawFormat is the value format of the raw topic: json (reignpipe's raw document),
	// uspto-xml (one USPTO full-text XML document per record, as some feeds are pushed;
	// source.sections picks the text) or debezium (Debezium's change events of a table,
	// JsonConverter with or without schemas; source.type debezium names the columns).
	RawFormat   string `yaml:"raw_format"`
	StartOffset string `yaml:"start_offset"` // earliest | latest, for a group without offsets
	TLS         *struct {
		CAFile             string `yaml:"ca_file"`
		CertFile           string `yaml:"cert_file"`
		KeyFile            string `yaml:"key_file"`
		ServerName         string `yaml:"server_name"`
		InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
	} `yaml:"tls"`
	SASL *struct {
		Mechanism string `yaml:"mechanism"` // PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
		Username  string `yaml:"username"`
		// PasswordEnv names the environment variable holding the password, so pipeline files
		// can be committed without secrets; Password is accepted for local experiments.
		Password    string `yaml:"password"`
		PasswordEnv string `yaml:"password_env"`
	} `yaml:"sasl"`
}

// Retention is a topic's retention as written in YAML: a duration ("168h", "30d") or
// "forever" / "-1". Checked by Validate; Millis gives retention.ms.
type Retention string

// Millis is the topic's retention.ms: -1 for forever.
func (r Retention) Millis() (int64, error) {
	v := strings.TrimSpace(string(r))
	if v == "forever" || v == "-1" {
		return -1, nil
	}
	var d time.Duration
	var err error
	if n, ok := strings.CutSuffix(v, "d"); ok {
		var days float64
		if days, err = strconv.ParseFloat(n, 64); err == nil {
			d = time.Duration(days * float64(24*time.Hour))
		}
	} else {
		d, err = time.ParseDuration(v)
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration (e.g. 168h, 30d) or forever", v)
	case d < time.Minute:
		return 0, fmt.Errorf("%s is under a minute: a topic that keeps records that briefly loses them before a stopped stage restarts (forever or -1 keeps them)", v)
	}
	return d.Milliseconds(), nil
}

// Topic names.
func (k KafkaConfig) RawTopic() string {
	if k.RawTopicName != "" {
		return k.RawTopicName
	}
	return k.Topics + ".raw"
}
func (k KafkaConfig) ChunksTopic() string     { return k.Topics + ".chunks" }
func (k KafkaConfig) VectorsTopic() string    { return k.Topics + ".vectors" }
func (k KafkaConfig) DeadLetterTopic() string { return k.Topics + ".deadletter" }

// WindowsTopic is the compacted store of record of window embeddings, keyed by window key;
// ManifestsTopic the compacted one of document manifests, keyed by doc id.
func (k KafkaConfig) WindowsTopic() string   { return k.Topics + ".windows" }
func (k KafkaConfig) ManifestsTopic() string { return k.Topics + ".manifests" }

// GroupFor is the consumer group of a stage.
func (k KafkaConfig) GroupFor(stage string) string {
	g := k.Group
	if g == "" {
		g = k.Topics
	}
	return g + "." + stage
}

// SASLPassword resolves the password from the environment when password_env is set.
func (k KafkaConfig) SASLPassword() (string, error) {
	if k.SASL == nil {
		return "", nil
	}
	if k.SASL.PasswordEnv != "" {
		v, ok := os.LookupEnv(k.SASL.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("transport.kafka.sasl.password_env: %s is not set", k.SASL.PasswordEnv)
		}
		return v, nil
	}
	return k.SASL.Password, nil
}

var topicRe = kafka.TopicName

func (c *Config) validateTransport() error {
	t := c.Transport
	if t.Type != "embedded" && t.Type != "kafka" {
		return c.bad("transport.type", "%q is not embedded or kafka", t.Type)
	}
	reg := components.Builtin()
	for i, s := range c.Sinks {
		if typ, ok := reg.Sink(s.Type); ok && typ.Transport != "" && typ.Transport != t.Type {
			return c.bad(fmt.Sprintf("sinks.%d.type", i), "a %s sink needs transport.type: %s (its connection settings live there)", s.Type, typ.Transport)
		}
	}
	// A source that is a topic's records in a raw format, and a raw format that takes its
	// settings from such a source, come together.
	if src, _ := reg.Source(c.Source.Type); src.RawFormat != "" && (t.Type != "kafka" || t.Kafka.RawFormat != src.RawFormat) {
		return c.bad("source.type", "a %s source is the change events on a Kafka topic, read by `reignpipe stage process`: set transport.type: kafka and transport.kafka.raw_format: %s", src.Type, src.RawFormat)
	}
	if t.Type == "embedded" {
		return nil
	}
	k := t.Kafka
	for _, s := range reg.Sources {
		if s.RawFormat != "" && s.RawFormat == k.RawFormat && c.Source.Type != s.Type {
			return c.bad("transport.kafka.raw_format", "%s takes the columns that make a document from the source section: set source.type: %s", k.RawFormat, s.Type)
		}
	}
	switch {
	case len(k.Brokers) == 0:
		return c.bad("transport.kafka.brokers", "at least one bootstrap broker (host:port) is needed")
	case !topicRe.MatchString(k.Topics):
		return c.bad("transport.kafka.topics", "%q is not a valid topic prefix (letters, digits, . _ -)", k.Topics)
	case k.Group != "" && !topicRe.MatchString(k.Group):
		return c.bad("transport.kafka.group", "%q is not a valid group prefix", k.Group)
	case k.Partitions < 1:
		return c.bad("transport.kafka.partitions", "must be >= 1")
	case k.ReplicationFactor < 1:
		return c.bad("transport.kafka.replication_factor", "must be >= 1")
	case k.MaxRecordBytes < 64<<10:
		return c.bad("transport.kafka.max_record_bytes", "%d is below 64 KiB", k.MaxRecordBytes)
	case k.Compression != "zstd" && k.Compression != "lz4" && k.Compression != "snappy" && k.Compression != "gzip" && k.Compression != "none":
		return c.bad("transport.kafka.compression", "%q is not zstd, lz4, snappy, gzip or none", k.Compression)
	case k.RawFormat != "json" && k.RawFormat != "uspto-xml" && k.RawFormat != "debezium":
		return c.bad("transport.kafka.raw_format", "%q is not json, uspto-xml or debezium", k.RawFormat)
	case k.RawTopicName != "" && !topicRe.MatchString(k.RawTopicName):
		return c.bad("transport.kafka.raw_topic", "%q is not a valid topic name (letters, digits, . _ -)", k.RawTopicName)
	case k.StartOffset != "earliest" && k.StartOffset != "latest":
		return c.bad("transport.kafka.start_offset", "%q is not earliest or latest", k.StartOffset)
	}
	if _, err := k.RawRetention.Millis(); err != nil {
		return c.bad("transport.kafka.raw_retention", "%v", err)
	}
	if _, err := k.ChunksRetention.Millis(); err != nil {
		return c.bad("transport.kafka.chunks_retention", "%v", err)
	}
	for i, b := range k.Brokers {
		if b == "" {
			return c.bad(fmt.Sprintf("transport.kafka.brokers.%d", i), "empty broker address")
		}
	}
	if s := k.SASL; s != nil {
		switch {
		case s.Mechanism != "PLAIN" && s.Mechanism != "SCRAM-SHA-256" && s.Mechanism != "SCRAM-SHA-512":
			return c.bad("transport.kafka.sasl.mechanism", "%q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism)
		case s.Username == "":
			return c.bad("transport.kafka.sasl.username", "missing")
		case s.Password != "" && s.PasswordEnv != "":
			return c.bad("transport.kafka.sasl", "give password or password_env, not both")
		}
	}
	return nil
}
