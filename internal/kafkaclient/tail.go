package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	kafka "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/internal/kafkaclient/offsets"
)

// TP names one partition of a topic, printed "topic/partition". It is the offset tracker's
// key, so the consumer and the tail name partitions with one type.
type TP = offsets.TopicPartition

// Record is one record as a Tail reads it: no fragment reassembly (the topics a Tail reads are
// written whole), no group, no commit.
type Record struct {
	TP
	Offset  int64
	Key     []byte
	Value   []byte
	Headers []kafka.Header
}

// TailOptions configures a Tail.
type TailOptions struct {
	Topics []string
	// Start is the next offset to read per partition; a partition absent here starts at its
	// first offset (the whole log, what a compacted topic still holds).
	Start map[TP]int64
	// MaxFetchBytes bounds one fetch response per partition; default 10 MiB.
	MaxFetchBytes int
	Logger        *slog.Logger
}

// tailQueue is how many records each partition reader prefetches, and how many wait for Next:
// a catch-up reads the whole log, so the queues are deeper than a consumer group member's.
const tailQueue = 4096

// Tail reads every partition of some topics directly, as Kafka Streams' global-table consumer
// does: partitions are assigned, not balanced by a group, so every Tail sees every record. Its
// goroutines (one per partition) are owned by the Tail: Close stops them and waits.
// Partitions added to a topic after NewTail are not read until the next NewTail.
type Tail struct {
	out    chan Record
	errc   chan error
	cancel context.CancelFunc
	wg     sync.WaitGroup
	parts  []TP
}

// NewTail looks up the topics' partitions and starts reading them.
func NewTail(ctx context.Context, cfg ClientConfig, o TailOptions) (*Tail, error) {
	rc, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	if o.MaxFetchBytes <= 0 {
		o.MaxFetchBytes = defaultMaxFetchBytes
	}
	log := orDefault(o.Logger)
	parts, err := listPartitions(ctx, cfg, o.Topics...)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	t := &Tail{out: make(chan Record, tailQueue), errc: make(chan error, 1), cancel: cancel, parts: parts}
	dialer := rc.dialer()
	for _, tp := range parts {
		start, ok := o.Start[tp]
		if !ok {
			start = kafka.FirstOffset
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.read(rctx, rc, dialer, tp, start, o.MaxFetchBytes, log)
		}()
	}
	return t, nil
}

// listPartitions lists the partitions of the topics, sorted.
func listPartitions(ctx context.Context, cfg ClientConfig, topics ...string) ([]TP, error) {
	rc, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	tr := rc.Transport()
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(rc.Brokers()...), Transport: tr, Timeout: 30 * time.Second}
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("kafka: metadata of %v: %w", topics, err)
	}
	var out []TP
	for _, t := range meta.Topics {
		if t.Error != nil {
			return nil, fmt.Errorf("kafka: topic %s: %w", t.Name, t.Error)
		}
		for _, p := range t.Partitions {
			out = append(out, TP{Topic: t.Name, Partition: p.ID})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, nil
}

// EndOffsets returns the high watermark (the offset the next record will get) of every
// partition of the topics: what "caught up" means at the moment it is asked.
func EndOffsets(ctx context.Context, cfg ClientConfig, topics ...string) (map[TP]int64, error) {
	rc, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	parts, err := listPartitions(ctx, cfg, topics...)
	if err != nil {
		return nil, err
	}
	tr := rc.Transport()
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(rc.Brokers()...), Transport: tr, Timeout: 30 * time.Second}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, tp := range parts {
		req.Topics[tp.Topic] = append(req.Topics[tp.Topic], kafka.LastOffsetOf(tp.Partition))
	}
	resp, err := client.ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("kafka: end offsets of %v: %w", topics, err)
	}
	out := make(map[TP]int64, len(parts))
	for topic, ps := range resp.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return nil, fmt.Errorf("kafka: end offset of %s/%d: %w", topic, p.Partition, p.Error)
			}
			out[TP{Topic: topic, Partition: p.Partition}] = p.LastOffset
		}
	}
	return out, nil
}

// Parts are the partitions this Tail reads.
func (t *Tail) Parts() []TP { return t.parts }

// Next returns the next record of any partition (records of one partition in offset order),
// or ctx's error, or a fatal error (authentication), or ErrClosed.
func (t *Tail) Next(ctx context.Context) (Record, error) {
	select {
	case r := <-t.out:
		return r, nil
	case err := <-t.errc:
		t.errc <- err
		return Record{}, err
	case <-ctx.Done():
		return Record{}, ctx.Err()
	}
}

// Records is the channel Next reads, for a caller that selects over several Tails (and stops
// reading one of them to push back on it).
func (t *Tail) Records() <-chan Record { return t.out }

// Err delivers a fatal error (authentication, an offset that cannot be set) once.
func (t *Tail) Err() <-chan error { return t.errc }

// Close stops the partition readers and waits for them.
func (t *Tail) Close() {
	t.cancel()
	t.wg.Wait()
}

func (t *Tail) read(ctx context.Context, rc Resolved, dialer *kafka.Dialer, tp TP, start int64, maxBytes int, log *slog.Logger) {
	log = log.With("topic", tp.Topic, "partition", tp.Partition)
	r := partitionReader(rc, dialer, tp.Topic, tp.Partition, maxBytes, tailQueue, log, "kafka-tail")
	defer r.Close()
	if err := r.SetOffset(start); err != nil {
		t.fail(fmt.Errorf("kafka: %s: setting the start offset %d: %w", tp, start, err))
		return
	}
	next := start
	for {
		m, err := fetchNext(ctx, r, &next, log, "kafka tail", func(err error) (bool, error) {
			if !errors.Is(err, kafka.OffsetOutOfRange) {
				return false, nil
			}
			// The checkpointed offset is past the log (the topic was recreated) or before what
			// compaction and retention left: read what the partition holds.
			log.Warn("kafka tail: start offset out of range; reading the partition from its first offset", "offset", next)
			if err := r.SetOffset(kafka.FirstOffset); err != nil {
				return true, fmt.Errorf("setting the first offset: %w", err)
			}
			next = -1
			return true, nil
		})
		if err != nil {
			if ctx.Err() == nil {
				t.fail(fmt.Errorf("kafka: reading %s: %w", tp, err))
			}
			return
		}
		select {
		case t.out <- Record{TP: tp, Offset: m.Offset, Key: m.Key, Value: m.Value, Headers: m.Headers}:
		case <-ctx.Done():
			return
		}
	}
}

func (t *Tail) fail(err error) {
	select {
	case t.errc <- err:
	default:
	}
}
