package cluster

import (
	"context"
	"fmt"
	"strconv"

	"github.com/reignpipe/reignpipe/internal/kafkaadmin"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/stages/chunk"
)

// Topic settings. Kafka is the store of record in distributed mode, so the settings that keep
// data (cleanup policy, retention, replication) are set on every topic reignpipe creates rather
// than left to broker defaults (delete after 7 days, min.insync.replicas 1).

// kafkaDefaultMaxMessageBytes is the broker's default message.max.bytes (1 MiB plus the
// record batch overhead). No topic is given less, so a setting here never shrinks a limit a
// cluster without overrides already has.
const kafkaDefaultMaxMessageBytes = 1048588

// batchFraming is what a record batch adds on the wire to the bytes a producer counts into
// BatchBytes: the batch header (61 bytes), record varints and a compression frame, which on
// incompressible bytes can grow them slightly. 16 KiB is far more than any of these.
const batchFraming = 16 << 10

// StoreMaxMessageBytes is max.message.bytes of <topics>.windows and <topics>.manifests: the
// largest record batch their producers send (kafkaclient.DefaultBatchBytes of the largest
// record), never below the broker default. Records on these compacted topics are never
// fragmented (fragments of one key would be compacted away). One window record is its
// embedding (4 bytes per dimension: 1.5 KiB for a 384-dimension GN, 16 KiB for 4096) plus key
// and space headers, far under transport.kafka.max_record_bytes; a manifest can reach
// ManifestMaxBytes. With the defaults both are 1048588, the broker's own default.
func StoreMaxMessageBytes(cfg *pipelines.Config) (windows, manifests int64, err error) {
	bound, err := ManifestMaxBytes(cfg)
	if err != nil {
		return 0, 0, err
	}
	k := cfg.Transport.Kafka
	batch := func(record int64) int64 {
		return max(kafkaDefaultMaxMessageBytes, int64(kafkaclient.DefaultBatchBytes(int(record)))+batchFraming)
	}
	return batch(int64(k.MaxRecordBytes)), batch(max(int64(k.MaxRecordBytes), bound)), nil
}

// Manifest sizing: a manifest lists a document's window keys in order (8 bytes each) after a
// header (content hash, space, version). manifestSlack covers the header, the doc-id key and
// the record and batch framing with a wide margin: all of those are under 1 KiB for any
// reasonable doc id.
const (
	manifestBytesPerWindow = 8
	manifestSlack          = 64 << 10
)

// MaxDocWindows is the most windows a document within source.max_doc_bytes can have, and
// false when the bound is off (max_doc_bytes 0). It assumes one content token per byte of text:
// a WordPiece token covers at least one byte (a character is at least one byte in UTF-8), so
// no text of B bytes has more than B content tokens. Fixed windows then number
// chunk.Params.Count(B); anchored windows hold at least one content token each (empty windows
// are never emitted), so B bounds them.
func MaxDocWindows(cfg *pipelines.Config) (int64, bool) {
	b := cfg.Source.MaxDocBytes
	if b <= 0 {
		return 0, false
	}
	if cfg.Chunking.Mode == "anchored" {
		return b, true
	}
	p := chunk.Params{K: cfg.Chunking.K, S: cfg.Chunking.S}
	l, step := int64(p.K-2), int64(p.S-2)
	if b <= l {
		return 1, true
	}
	return 1 + (b-l+step-1)/step, true
}

// ManifestMaxBytes is the largest manifest record the configuration allows: the worst-case
// window count (MaxDocWindows) at 8 bytes per window key, plus slack for the header. A manifest
// is one record on a compacted topic and cannot be fragmented, so <topics>.manifests must take
// records of this size. With the defaults (32 MiB, K = S = 512) it is 591,888 bytes.
func ManifestMaxBytes(cfg *pipelines.Config) (int64, error) {
	w, ok := MaxDocWindows(cfg)
	if !ok {
		d := pipelines.Defaults()
		dw, _ := MaxDocWindows(d)
		return 0, fmt.Errorf("source.max_doc_bytes: 0 (no bound) leaves the manifest of a document on %s unbounded, and a manifest is one record that cannot be split: set a bound (the default %d bounds a manifest to %d bytes at chunking.k = chunking.s = 512)",
			cfg.Transport.Kafka.ManifestsTopic(), d.Source.MaxDocBytes, manifestBytes(dw))
	}
	return manifestBytes(w), nil
}

func manifestBytes(windows int64) int64 { return windows*manifestBytesPerWindow + manifestSlack }

// MinInsyncReplicas is the min.insync.replicas reignpipe sets for a replication factor, 0 for
// none. A producer with acks=all (reignpipe's) then has a write acknowledged only once that many
// replicas hold it. RF 1: nothing to set. RF 2: 1, so a rolling restart of one broker does not
// stop every stage (2 would). RF >= 3: a majority (RF 3 -> 2, RF 5 -> 3), so an acknowledged
// write survives the loss of any minority of its replicas while a minority may be down.
func MinInsyncReplicas(rf int) int {
	switch {
	case rf <= 1:
		return 0
	case rf == 2:
		return 1
	default:
		return rf/2 + 1
	}
}

// topicSpecs are the topics a pipeline's stages use, each with the settings reignpipe creates it
// with. Every stage ensures all of them, so whichever stage starts first creates them alike.
func topicSpecs(cfg *pipelines.Config) ([]kafkaadmin.TopicSpec, error) {
	k := cfg.Transport.Kafka
	spec := func(name string, conf map[string]string) kafkaadmin.TopicSpec {
		if conf == nil {
			conf = map[string]string{}
		}
		if n := MinInsyncReplicas(k.ReplicationFactor); n > 0 {
			conf["min.insync.replicas"] = strconv.Itoa(n)
		}
		return kafkaadmin.TopicSpec{Name: name, Partitions: k.Partitions, ReplicationFactor: k.ReplicationFactor, Config: conf}
	}
	manifest, err := ManifestMaxBytes(cfg)
	if err != nil {
		return nil, err
	}
	windowsBatch, manifestsBatch, err := StoreMaxMessageBytes(cfg)
	if err != nil {
		return nil, err
	}
	// Compacted stores: a window key always maps to the same bytes and a newer manifest of a doc
	// id replaces the older, so the compactor may drop any superseded record at once
	// (min.compaction.lag.ms 0, the default, stated so a broker override cannot hold duplicates
	// back); readers that follow the topic see at least the newest record of every key.
	compacted := func(maxBytes int64) map[string]string {
		return map[string]string{
			"cleanup.policy":        "compact",
			"min.compaction.lag.ms": "0",
			"max.message.bytes":     strconv.FormatInt(maxBytes, 10),
		}
	}
	// A deletion is a tombstone on the compacted topics that hold documents (manifests,
	// vectors; windows are never deleted): the broker keeps it run.delete_retention after
	// compaction, so a reader that falls behind by less still sees the document go.
	deleteRetention := strconv.FormatInt(cfg.Run.DeleteRetention.Milliseconds(), 10)
	raw, err := retention(k.RawRetention)
	if err != nil {
		return nil, fmt.Errorf("transport.kafka.raw_retention: %w", err)
	}
	chunks, err := retention(k.ChunksRetention)
	if err != nil {
		return nil, fmt.Errorf("transport.kafka.chunks_retention: %w", err)
	}
	specs := []kafkaadmin.TopicSpec{
		spec(k.RawTopic(), raw),
		spec(k.ChunksTopic(), chunks),
		spec(k.DeadLetterTopic(), nil),
		spec(k.WindowsTopic(), compacted(windowsBatch)),
		spec(k.ManifestsTopic(), compacted(manifestsBatch)),
	}
	specs[4].Config["delete.retention.ms"] = deleteRetention
	// Settings without which the data is lost or cannot be written refuse an existing topic;
	// the rest (retention, delete.retention.ms, min.insync.replicas, partition counts) are the
	// operator's choice.
	specs[3].Require = []kafkaadmin.Requirement{
		{Key: "cleanup.policy", Equal: "compact", Why: "it is the cluster's store of window embeddings, which delete would empty after retention.ms"},
		{Key: "max.message.bytes", AtLeast: windowsBatch, Why: "the windows producer sends record batches up to that size (transport.kafka.max_record_bytes and room for more records)"},
	}
	specs[4].Require = []kafkaadmin.Requirement{
		{Key: "cleanup.policy", Equal: "compact", Why: "it is the cluster's store of document manifests, which delete would empty after retention.ms"},
		{Key: "max.message.bytes", AtLeast: manifestsBatch, Why: fmt.Sprintf("a manifest is one record, one of a document of source.max_doc_bytes=%d can reach %d bytes, and the manifests producer sends record batches up to that size", cfg.Source.MaxDocBytes, manifest)},
	}
	// The vector topic is compacted: it is keyed by document id, so it converges to the newest
	// vector of every document.
	for _, s := range cfg.Sinks {
		if s.Type == "kafka" {
			v := spec(vectorTopic(k, s), map[string]string{"cleanup.policy": "compact", "delete.retention.ms": deleteRetention})
			v.Require = []kafkaadmin.Requirement{{Key: "cleanup.policy", Equal: "compact",
				Why: "readers take it as the newest vector of every document, which delete would drop after retention.ms"}}
			specs = append(specs, v)
		}
	}
	return specs, nil
}

// retention is the delete-policy settings of a retention key. Forever sets retention.bytes -1
// too: a broker-wide log.retention.bytes would otherwise still delete from a topic meant to keep
// everything. A duration leaves the size bound to the broker.
func retention(r pipelines.Retention) (map[string]string, error) {
	ms, err := r.Millis()
	if err != nil {
		return nil, err
	}
	conf := map[string]string{"cleanup.policy": "delete", "retention.ms": strconv.FormatInt(ms, 10)}
	if ms < 0 {
		conf["retention.bytes"] = "-1"
	}
	return conf, nil
}

// EnsureTopics creates the pipeline's topics when missing, with the settings topicSpecs gives
// them, refuses existing ones whose settings would lose data, and checks that the cluster takes
// a manifest of the longest document the configuration allows.
func EnsureTopics(ctx context.Context, cfg *pipelines.Config, client kafkaclient.ClientConfig) error {
	specs, err := topicSpecs(cfg)
	if err != nil {
		return err
	}
	if err := kafkaadmin.EnsureTopics(ctx, client, specs...); err != nil {
		return explainKafka(cfg.Transport.Kafka, err)
	}
	return checkManifestFits(ctx, cfg, client)
}

// checkManifestFits compares the manifests producer's largest batch (sized from the manifest
// bound) with the broker's socket.request.max.bytes: a produce request carries a whole record
// batch, so nothing larger than that limit can be written whatever max.message.bytes the topic
// has, and the broker drops the connection of a client that sends one (a producer would retry
// it until it gave up).
func checkManifestFits(ctx context.Context, cfg *pipelines.Config, client kafkaclient.ClientConfig) error {
	bound, err := ManifestMaxBytes(cfg)
	if err != nil {
		return err
	}
	_, batch, err := StoreMaxMessageBytes(cfg)
	if err != nil {
		return err
	}
	if batch <= kafkaDefaultMaxMessageBytes {
		return nil // within what every broker takes by default
	}
	limit, err := kafkaadmin.BrokerSetting(ctx, client, "socket.request.max.bytes")
	if err != nil {
		return fmt.Errorf("checking that %s can take a manifest of %d bytes: %w", cfg.Transport.Kafka.ManifestsTopic(), bound, err)
	}
	// Room for the produce request's own framing (topic name, headers), generously.
	if limit -= 16 << 10; batch <= limit {
		return nil
	}
	windows, _ := MaxDocWindows(cfg)
	return fmt.Errorf("source.max_doc_bytes: a document of %d bytes can have %d windows (chunking.mode %s, k %d, s %d; one token per byte at worst), and its manifest on %s up to %d bytes, over what the brokers read in one request (socket.request.max.bytes %d): lower source.max_doc_bytes to %d or less, or raise socket.request.max.bytes on every broker",
		cfg.Source.MaxDocBytes, windows, cfg.Chunking.Mode, cfg.Chunking.K, cfg.Chunking.S, cfg.Transport.Kafka.ManifestsTopic(), bound, limit+16<<10,
		maxDocBytesFor(cfg, limit-int64(kafkaclient.DefaultBatchBytes(0))-batchFraming))
}

// maxDocBytesFor is the largest source.max_doc_bytes whose manifest bound stays within limit.
func maxDocBytesFor(cfg *pipelines.Config, limit int64) int64 {
	w := (limit - manifestSlack) / manifestBytesPerWindow
	if w < 1 {
		return 0
	}
	if cfg.Chunking.Mode == "anchored" {
		return w
	}
	return int64(cfg.Chunking.K-2) + (w-1)*int64(cfg.Chunking.S-2)
}
