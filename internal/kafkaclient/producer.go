package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	kafka "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/internal/kafkaclient/fragment"
)

// Message is one logical message. Key is the document id: records with one key go to one
// partition (murmur2, as Java and librdkafka clients place them), which keeps a document's
// versions in order. An empty Key is sent as a null key.
type Message struct {
	Key     string
	Value   []byte
	Headers []kafka.Header
}

// ProducerOptions configures a Producer. Zero values take the documented defaults.
type ProducerOptions struct {
	Topic string
	// MaxRecordBytes is the largest record value sent; longer Values are fragmented. Default
	// 900 000, under the broker's 1 MB message.max.bytes with room for key, headers and batch
	// framing.
	MaxRecordBytes int
	// Compression is "zstd" (default), "lz4", "snappy", "gzip" or "none".
	Compression string
	// BatchBytes bounds one produce request per partition (uncompressed). Default
	// MaxRecordBytes + 100 000; it must hold one record of MaxRecordBytes plus its key and
	// headers (up to 64 KiB).
	BatchBytes int
	// RetryTimeout is how long Flush retries transient failures (broker down, leader moved)
	// before giving up with an error. Default 5 minutes.
	RetryTimeout time.Duration
	// NoFragment makes Send refuse a Value longer than MaxRecordBytes (a *TooLargeError)
	// instead of fragmenting it: for topics whose consumers are not reignpipe and could not
	// put fragments back together.
	NoFragment bool
	Logger     *slog.Logger
}

// DefaultBatchBytes is BatchBytes when left 0: room for one record of maxRecordBytes and more
// records beside it. A topic reignpipe creates for a producer takes batches of this size.
func DefaultBatchBytes(maxRecordBytes int) int { return maxRecordBytes + 100_000 }

// TooLargeError is Send's refusal, under NoFragment, of a value longer than MaxRecordBytes.
// Nothing of the message was queued.
type TooLargeError struct {
	Topic      string
	Bytes, Max int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("kafka producer: a value of %d bytes exceeds the %d-byte record limit of %s, and this producer does not fragment", e.Bytes, e.Max, e.Topic)
}

const (
	defaultMaxRecordBytes = 900_000
	defaultRetryTimeout   = 5 * time.Minute
	// maxRecordOverhead bounds a message's key plus headers, which every fragment repeats.
	maxRecordOverhead = 64 << 10
	// Send flushes on its own past these, so a caller that flushes rarely holds bounded memory.
	autoFlushBytes   = 16 << 20
	autoFlushRecords = 1000
)

var compressionCodecs = map[string]kafka.Compression{
	"zstd":   kafka.Zstd,
	"lz4":    kafka.Lz4,
	"snappy": kafka.Snappy,
	"gzip":   kafka.Gzip,
	"none":   0,
}

func (o *ProducerOptions) setDefaults() error {
	if err := ValidTopicName(o.Topic); err != nil {
		return err
	}
	if o.MaxRecordBytes < 0 || o.BatchBytes < 0 || o.RetryTimeout < 0 {
		return errors.New("kafka producer: MaxRecordBytes, BatchBytes and RetryTimeout must not be negative")
	}
	if o.MaxRecordBytes == 0 {
		o.MaxRecordBytes = defaultMaxRecordBytes
	}
	if o.BatchBytes == 0 {
		o.BatchBytes = DefaultBatchBytes(o.MaxRecordBytes)
	}
	if o.BatchBytes < o.MaxRecordBytes+maxRecordOverhead+1024 {
		return fmt.Errorf("kafka producer: BatchBytes %d cannot hold a record of MaxRecordBytes %d plus key and headers (%d)",
			o.BatchBytes, o.MaxRecordBytes, maxRecordOverhead+1024)
	}
	if o.Compression == "" {
		o.Compression = "zstd"
	}
	o.Compression = strings.ToLower(o.Compression)
	if _, ok := compressionCodecs[o.Compression]; !ok {
		return fmt.Errorf("kafka producer: unknown compression %q (want zstd, lz4, snappy, gzip or none)", o.Compression)
	}
	if o.RetryTimeout == 0 {
		o.RetryTimeout = defaultRetryTimeout
	}
	o.Logger = orDefault(o.Logger)
	return nil
}

// ProducerStats counts what the broker acknowledged (retried duplicates included), plus retries.
type ProducerStats struct {
	Messages  int64 // logical messages
	Records   int64 // Kafka records, fragments included
	Bytes     int64 // record value bytes
	Fragments int64 // records that are fragments of a larger message
	Retries   int64 // batch writes retried after a transient error
}

// Producer writes logical messages to one topic with acks from all in-sync replicas. It is safe
// for concurrent use; Sends are kept in order and written in that order.
type Producer struct {
	opts ProducerOptions
	log  *slog.Logger
	w    *kafka.Writer
	tr   *kafka.Transport

	flushMu sync.Mutex // held while a batch is written, so batches reach the broker in order

	mu       sync.Mutex // guards the fields below
	pending  []pendingMsg
	pendRecs int
	pendSize int
	closed   bool // no more Sends
	wclosed  bool // writer closed; set holding flushMu too, so no write is in flight

	messages, records, bytes, fragments, retries atomic.Int64
}

type pendingMsg struct {
	records []kafka.Message
	bytes   int // value bytes
	size    int // value plus key and headers of every record, for the memory bound
}

// NewProducer checks cfg and o and sets up the writer; it does not connect until data flows.
func NewProducer(cfg ClientConfig, o ProducerOptions) (*Producer, error) {
	rc, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	tr := rc.Transport()
	w := &kafka.Writer{
		Addr:         kafka.TCP(rc.brokers...),
		Topic:        o.Topic,
		Balancer:     fragmentBalancer{},
		RequiredAcks: kafka.RequireAll,
		Compression:  compressionCodecs[o.Compression],
		BatchBytes:   int64(o.BatchBytes),
		// Batching happens in Send; a write is one call per Flush, so the writer should send
		// what it has at once instead of waiting to fill batches.
		BatchSize:    autoFlushRecords * 4,
		BatchTimeout: time.Millisecond,
		// A few quick retries inside the writer absorb a leader moving; Flush's own loop covers
		// longer outages with the whole batch, which keeps each key's records in order.
		MaxAttempts:     3,
		WriteBackoffMin: 100 * time.Millisecond,
		WriteBackoffMax: time.Second,
		Transport:       tr,
		Logger:          kafkaLogger(o.Logger, "kafka-writer"),
		ErrorLogger:     kafkaLogger(o.Logger, "kafka-writer"),
	}
	return &Producer{opts: o, log: o.Logger, w: w, tr: tr}, nil
}

// Send queues one logical message, split into fragments when its Value exceeds
// MaxRecordBytes (refused with a *TooLargeError instead under NoFragment). Value and Headers
// are copied, so the caller may reuse them. Nothing is durable until a later Flush returns nil.
// Send blocks, flushing, when the queue holds more than 16 MiB or 1000 records; ctx bounds
// that flush, and an error from it leaves m and everything before it queued for the next Flush.
func (p *Producer) Send(ctx context.Context, m Message) error {
	overhead := len(m.Key)
	for _, h := range m.Headers {
		if fragment.Reserved(h.Key) {
			return fmt.Errorf("kafka producer: header %q is reserved for fragmentation", h.Key)
		}
		overhead += len(h.Key) + len(h.Value)
	}
	if overhead > maxRecordOverhead {
		return fmt.Errorf("kafka producer: key and headers take %d bytes, more than %d", overhead, maxRecordOverhead)
	}
	recs, err := p.toRecords(m)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	pm := pendingMsg{records: recs, bytes: len(m.Value), size: len(m.Value) + overhead*len(recs)}
	p.pending = append(p.pending, pm)
	p.pendRecs += len(recs)
	p.pendSize += pm.size
	full := p.pendSize >= autoFlushBytes || p.pendRecs >= autoFlushRecords
	p.mu.Unlock()
	if full {
		return p.Flush(ctx)
	}
	return nil
}

func (p *Producer) toRecords(m Message) ([]kafka.Message, error) {
	var key []byte
	if m.Key != "" {
		key = []byte(m.Key)
	}
	var value []byte
	if m.Value != nil {
		value = append(make([]byte, 0, len(m.Value)), m.Value...)
	}
	var headers []kafka.Header
	for _, h := range m.Headers {
		headers = append(headers, kafka.Header{Key: h.Key, Value: append([]byte(nil), h.Value...)})
	}
	if p.opts.NoFragment && len(value) > p.opts.MaxRecordBytes {
		return nil, &TooLargeError{Topic: p.opts.Topic, Bytes: len(value), Max: p.opts.MaxRecordBytes}
	}
	pieces := fragment.Split(value, p.opts.MaxRecordBytes)
	if len(pieces) == 1 {
		return []kafka.Message{{Key: key, Value: value, Headers: headers}}, nil
	}
	if len(pieces) > fragment.Max {
		return nil, fmt.Errorf("kafka producer: value of %d bytes needs more than %d fragments", len(m.Value), fragment.Max)
	}
	id, err := fragment.NewID()
	if err != nil {
		return nil, err
	}
	out := make([]kafka.Message, len(pieces))
	for i, piece := range pieces {
		h := make([]kafka.Header, 0, len(headers)+2)
		h = append(h, headers...)
		h = append(h, kafka.Header{Key: fragment.HeaderIndex, Value: []byte(fragment.Format(i, len(pieces)))},
			kafka.Header{Key: fragment.HeaderID, Value: []byte(id)})
		out[i] = kafka.Message{Key: key, Value: piece, Headers: h}
	}
	return out, nil
}

// Flush blocks until every message sent before it is acknowledged by all in-sync replicas.
// Transient failures are retried, re-sending the whole batch with exponential backoff (100 ms
// to 5 s), until RetryTimeout passes or ctx ends; so records may be duplicated, never dropped
// in silence. On error the unwritten messages stay queued, ahead of later ones, for the next
// Flush. Fragments of one message go, in order, to one partition.
func (p *Producer) Flush(ctx context.Context) error {
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	p.mu.Lock()
	if p.wclosed {
		n := len(p.pending)
		p.mu.Unlock()
		if n > 0 {
			return ErrClosed
		}
		return nil
	}
	batch := p.pending
	p.pending, p.pendRecs, p.pendSize = nil, 0, 0
	p.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	if err := p.write(ctx, batch); err != nil {
		p.mu.Lock()
		p.pending = append(batch, p.pending...)
		p.pendRecs, p.pendSize = 0, 0
		for _, m := range p.pending {
			p.pendRecs += len(m.records)
			p.pendSize += m.size
		}
		p.mu.Unlock()
		return err
	}
	return nil
}

func (p *Producer) write(ctx context.Context, batch []pendingMsg) error {
	var recs []kafka.Message
	var bytes, frags int64
	for _, m := range batch {
		recs = append(recs, m.records...)
		bytes += int64(m.bytes)
		if len(m.records) > 1 {
			frags += int64(len(m.records))
		}
	}
	deadline := time.Now().Add(p.opts.RetryTimeout)
	var missingSince time.Time
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := p.w.WriteMessages(ctx, recs...)
		if err == nil {
			p.messages.Add(int64(len(batch)))
			p.records.Add(int64(len(recs)))
			p.bytes.Add(bytes)
			p.fragments.Add(frags)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !Transient(err) {
			return fmt.Errorf("kafka producer: writing %d records to %s: %w", len(recs), p.opts.Topic, err)
		}
		// A topic that was just created can be unknown to a broker for a moment; one that stays
		// unknown was never created, and waiting the whole RetryTimeout would only hide that.
		if errors.Is(firstError(err), kafka.UnknownTopicOrPartition) {
			if missingSince.IsZero() {
				missingSince = time.Now()
			} else if time.Since(missingSince) > topicWait {
				return fmt.Errorf("kafka producer: topic %s does not exist (create it with EnsureTopics): %w", p.opts.Topic, err)
			}
		} else {
			missingSince = time.Time{}
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return fmt.Errorf("kafka producer: writing %d records to %s: still failing after %s: %w",
				len(recs), p.opts.Topic, p.opts.RetryTimeout, err)
		}
		wait := min(backoff(attempt), remaining)
		p.retries.Add(1)
		p.log.Warn("kafka producer: write failed; retrying the batch", "topic", p.opts.Topic,
			"records", len(recs), "attempt", attempt, "wait", wait, "err", firstError(err))
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// firstError unwraps kafka.WriteErrors, which repeats one error per record, for logging.
func firstError(err error) error {
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) {
		for _, e := range werrs {
			if e != nil {
				return e
			}
		}
	}
	return err
}

// Close flushes what is queued, bounded by ctx, then releases the writer and its
// connections. Messages that could not be flushed are lost, and the flush error is returned.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.Flush(ctx)
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	p.mu.Lock()
	p.wclosed = true
	p.mu.Unlock()
	if cerr := p.w.Close(); cerr != nil && err == nil {
		err = cerr
	}
	p.tr.CloseIdleConnections()
	return err
}

// Options are the producer's options, defaults filled in.
func (p *Producer) Options() ProducerOptions { return p.opts }

// Stats returns counters since the producer was created; it does not block on the network.
func (p *Producer) Stats() ProducerStats {
	return ProducerStats{
		Messages:  p.messages.Load(),
		Records:   p.records.Load(),
		Bytes:     p.bytes.Load(),
		Fragments: p.fragments.Load(),
		Retries:   p.retries.Load(),
	}
}

// fragmentBalancer places keyed records by murmur2 of the key. A keyless fragmented message
// is placed by its fragment id instead, because murmur2 would scatter its null-key fragments
// at random; keyless whole messages go to a random partition as usual.
type fragmentBalancer struct{}

func (fragmentBalancer) Balance(m kafka.Message, partitions ...int) int {
	if m.Key == nil {
		for _, h := range m.Headers {
			if h.Key == fragment.HeaderID {
				return kafka.Murmur2Balancer{Consistent: true}.Balance(kafka.Message{Key: h.Value}, partitions...)
			}
		}
	}
	return kafka.Murmur2Balancer{}.Balance(m, partitions...)
}
