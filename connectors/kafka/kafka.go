// Package kafka holds the Kafka connectors: it binds the generic client (internal/kafkaclient:
// Producer, Consumer) to reignpipe's records (schemas/wire.go): raw documents in, chunk
// embeddings between the embed and aggregate stages, vectors and dead letters out. Every record
// is keyed by its document id.
package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/textpolicy"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/schemas"
)

// Headers on the records reignpipe writes, beside schemas.HeaderSchema. Consumers may filter
// on them without decoding the value.
const (
	HeaderDocVersion  = "rp-version"
	HeaderContentHash = "rp-content-hash" // 16 lowercase hex digits
	HeaderSpace       = "rp-space"
	HeaderStage       = "rp-stage"  // dead letters: the stage that failed
	HeaderError       = "rp-error"  // dead letters: the reason
	HeaderSource      = "rp-source" // dead letters: where the input was, "topic/partition@offset"
	// HeaderDocSource is a deletion record's source (the document's Source), beside
	// rp-version: a tombstone has no value to carry them (schemas/WIRE.md, "Deletions").
	HeaderDocSource = "rp-doc-source"
)

// Position names a delivery in dead letters and logs.
func Position(d kafkaclient.Delivery) string {
	return fmt.Sprintf("%s/%d@%d", d.Topic, d.Partition, d.Offset)
}

func header(k, v string) kafkago.Header { return kafkago.Header{Key: k, Value: []byte(v)} }

// DocSource reads raw documents (reignpipe's JSON, or another format through a Decoder, such
// as one patent XML document per record) from a topic as a member of a consumer group. It is a connectors.Source that keeps its own position: an ack marks the
// document's records done, and FlushAcks commits the contiguous done offsets of the partitions
// this member still owns.
type DocSource struct {
	c      *kafkaclient.Consumer
	format RawFormat
	lease  context.Context // of the delivery Read returned last
	read   atomic.Int64
	bytes  atomic.Int64
	mu     sync.Mutex
	skips  map[string]int64
	text   textpolicy.Counts // what the text policy changed, guarded by mu
	// keyedByRow: records are keyed by something other than the document id (KeyedByRow).
	keyedByRow bool
}

// KeyedByRow marks the records as keyed otherwise than by document id -- Debezium keys a
// change by the row's primary key, as JSON -- so the key is not checked against the document's
// id, and a null value is the decoder's to read (Debezium's tombstone after a delete, which it
// skips), not a deletion of the key. Call it before the first Read. A row's changes still share
// a partition: they share its key.
func (s *DocSource) KeyedByRow() *DocSource { s.keyedByRow = true; return s }

// Decoder turns a raw record value into a document. A non-empty skip reason drops the record
// (counted by reason, acked at once); an error dead-letters it, naming doc.ID when known.
type Decoder func(value []byte) (doc schemas.Document, skip string, err error)

// RawJSON decodes the reignpipe raw-document JSON (schemas/WIRE.md).
func RawJSON(value []byte) (schemas.Document, string, error) {
	d, err := schemas.DecodeRawDocument(value)
	return d, "", err
}

// NewDocSource reads raw documents through c in format f (its zero value: RawJSON, a null
// value a deletion); Close closes c.
func NewDocSource(c *kafkaclient.Consumer, f RawFormat) *DocSource {
	if f.Decode == nil {
		f.Decode = RawJSON
	}
	if f.Null == nil {
		f.Null = NullDeletes
	}
	return &DocSource{c: c, format: f, skips: map[string]int64{}, text: textpolicy.Counts{}}
}

// Read blocks until the next document, or ctx ends. A record that does not decode, or whose
// key is not its document id, comes back as a *connectors.BadInputError with an ack.
func (s *DocSource) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	for {
		d, err := s.c.Next(ctx)
		if err != nil {
			return schemas.Document{}, nil, err
		}
		s.read.Add(1)
		s.bytes.Add(int64(len(d.Value)))
		doc, skip, err := s.format.read(d)
		if skip != "" && err == nil {
			s.c.Ack(d)
			s.mu.Lock()
			s.skips[skip]++
			s.mu.Unlock()
			continue
		}
		return s.document(d, doc, err)
	}
}

func (s *DocSource) document(d kafkaclient.Delivery, doc schemas.Document, err error) (schemas.Document, connectors.AckFunc, error) {
	ack := func(context.Context, error) error { s.c.Ack(d); return nil }
	s.lease = d.Lease
	pos := Position(d)
	if err == nil && !s.keyedByRow && d.Key != "" && d.Key != doc.ID {
		// A document keyed otherwise may sit in another partition than its other versions,
		// and then versions could overtake each other.
		err = fmt.Errorf("record key %q is not the document id %q", d.Key, doc.ID)
	}
	if err != nil {
		id := doc.ID
		if id == "" {
			id = d.Key
		}
		return schemas.Document{}, ack, &connectors.BadInputError{DocID: id, Position: pos, Reason: err}
	}
	// Records come from other producers too (kcat, other clients): the text policy every file
	// source applies holds here as well. A deletion has no text.
	if !doc.Deleted {
		s.mu.Lock()
		doc.Text, doc.Title = textpolicy.Clean(doc.Text, s.text), textpolicy.Clean(doc.Title, s.text)
		s.mu.Unlock()
	}
	doc.Position = pos
	return doc, ack, nil
}

// SelfCheckpointing: committed offsets are the position; nothing is skipped on resume.
func (s *DocSource) SelfCheckpointing() bool { return true }

// Lease ends when the document Read returned last stops being this member's: its partition's
// generation ended in a rebalance, so its ack is ignored and the partition's owner reads it
// again (connectors.Leased).
func (s *DocSource) Lease() context.Context { return s.lease }

// FlushAcks commits the offsets acked so far (called after the outputs are durable).
func (s *DocSource) FlushAcks(ctx context.Context) error { return s.c.Commit(ctx) }

// Stats counts records read; BytesTotal is unknown for a stream.
func (s *DocSource) Stats() connectors.SourceStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	skipped := make(map[string]int64, len(s.skips))
	for k, v := range s.skips {
		skipped[k] = v
	}
	return connectors.SourceStats{Read: s.read.Load(), BytesRead: s.bytes.Load(), Skipped: skipped, Text: maps.Clone(s.text)}
}

// Consumer is the underlying group member (lag, stats).
func (s *DocSource) Consumer() *kafkaclient.Consumer { return s.c }

// Close closes the consumer; unacked documents are read again by the group.
func (s *DocSource) Close(ctx context.Context) error { return s.c.Close(ctx) }

// ChunkSource reads the embed stage's chunk embeddings ("RPCE" records).
type ChunkSource struct{ c *kafkaclient.Consumer }

// NewChunkSource reads chunk embeddings through c.
func NewChunkSource(c *kafkaclient.Consumer) *ChunkSource { return &ChunkSource{c: c} }

// Read blocks until the next document's chunk embeddings, or ctx ends. ack marks the
// document's records done; FlushAcks then makes that the group's position. A record that does
// not decode comes back with a *connectors.BadInputError and an ack: the caller dead-letters
// it and acks it like any other.
func (s *ChunkSource) Read(ctx context.Context) (_ schemas.ChunkDoc, ack connectors.AckFunc, _ error) {
	d, err := s.c.Next(ctx)
	if err != nil {
		return schemas.ChunkDoc{}, nil, err
	}
	// Done or dead-lettered, the offset moves on: the record is not read again.
	ack = func(context.Context, error) error { s.c.Ack(d); return nil }
	c, err := readChunks(d)
	if err == nil && d.Key != c.DocID {
		err = fmt.Errorf("record key %q is not the document id %q", d.Key, c.DocID)
	}
	if err != nil {
		id := c.DocID
		if id == "" {
			id = d.Key
		}
		return schemas.ChunkDoc{}, ack, &connectors.BadInputError{DocID: id, Position: Position(d), Reason: err}
	}
	return c, ack, nil
}

// FlushAcks commits the offsets acked so far (after the outputs derived from them are durable).
func (s *ChunkSource) FlushAcks(ctx context.Context) error { return s.c.Commit(ctx) }

// Close closes the consumer; records not committed are read again by the group.
func (s *ChunkSource) Close(ctx context.Context) error { return s.c.Close(ctx) }

// Consumer is the underlying group member (lag, stats).
func (s *ChunkSource) Consumer() *kafkaclient.Consumer { return s.c }

// RawSink publishes raw documents (the ingest stage). Flush makes them durable.
type RawSink struct{ p *kafkaclient.Producer }

// NewRawSink writes through p; Close closes p.
func NewRawSink(p *kafkaclient.Producer) *RawSink { return &RawSink{p: p} }

// WriteDocument queues one document, keyed by its id; a deletion record as a tombstone (a
// null value with its version and source in headers), which DocSource reads back as the same
// deletion.
func (s *RawSink) WriteDocument(ctx context.Context, d schemas.Document) error {
	if d.Deleted {
		return s.p.Send(ctx, Tombstone(schemas.SchemaRawDocument, schemas.Deletion{DocID: d.ID, Source: d.Source, Version: d.Version}))
	}
	b, err := schemas.EncodeRawDocument(d)
	if err != nil {
		return fmt.Errorf("raw document %s: %w", d.ID, err)
	}
	return s.p.Send(ctx, kafkaclient.Message{Key: d.ID, Value: b, Headers: []kafkago.Header{
		header(schemas.HeaderSchema, schemas.SchemaRawDocument),
		header(HeaderDocVersion, d.Version),
		header(HeaderContentHash, fmt.Sprintf("%016x", d.ContentHash())),
	}})
}

func (s *RawSink) Flush(ctx context.Context) error { return s.p.Flush(ctx) }
func (s *RawSink) Close(ctx context.Context) error { return s.p.Close(ctx) }

// ChunkSink publishes documents' chunk embeddings for the aggregate stage.
type ChunkSink struct{ p *kafkaclient.Producer }

// NewChunkSink writes through p; Close closes p.
func NewChunkSink(p *kafkaclient.Producer) *ChunkSink { return &ChunkSink{p: p} }

// WriteChunks queues one document's chunk embeddings (fragmented by the producer when larger
// than a record may be); a deletion's record as a tombstone that also names the GN space.
func (s *ChunkSink) WriteChunks(ctx context.Context, c schemas.ChunkDoc) error {
	if c.Deleted {
		m := Tombstone(schemas.SchemaChunkDoc, schemas.Deletion{DocID: c.DocID, Source: c.Source, Version: c.Version})
		m.Headers = append(m.Headers, header(HeaderSpace, "gn:"+c.Fingerprint))
		return s.p.Send(ctx, m)
	}
	b, err := schemas.EncodeChunkDoc(nil, c)
	if err != nil {
		return err
	}
	return s.p.Send(ctx, kafkaclient.Message{Key: c.DocID, Value: b, Headers: []kafkago.Header{
		header(schemas.HeaderSchema, schemas.SchemaChunkDoc),
		header(HeaderDocVersion, c.Version),
		header(HeaderContentHash, fmt.Sprintf("%016x", c.ContentHash)),
		header(HeaderSpace, "gn:"+c.Fingerprint),
	}})
}

func (s *ChunkSink) Flush(ctx context.Context) error { return s.p.Flush(ctx) }
func (s *ChunkSink) Close(ctx context.Context) error { return s.p.Close(ctx) }

// Vector record formats (sinks[].format).
const (
	FormatRPDV        = "rpdv"         // binary "RPDV", fragmented when long: reignpipe's own readers
	FormatJSON        = "json"         // one plain JSON object: any JSON consumer
	FormatConnectJSON = "connect-json" // Kafka Connect's JsonConverter envelope (schemas.enable=true)
)

// VectorFormats are the formats a kafka sink writes, default first.
var VectorFormats = []string{FormatRPDV, FormatJSON, FormatConnectJSON}

// VectorSink publishes document vectors keyed by document id: a compacted topic keeps the
// newest vector of every document. It is a connectors.Sink.
type VectorSink struct {
	p      *kafkaclient.Producer
	format string
	schema string // the rp-schema header
	encode func(dst []byte, v schemas.DocVector) ([]byte, error)
	buf    []byte // the last value, reused: Send copies it
	counts connectors.FlushCounts
}

// NewVectorSink writes RPDV records through p; Close closes p.
func NewVectorSink(p *kafkaclient.Producer) *VectorSink {
	s, _ := NewVectorSinkFormat(p, FormatRPDV)
	return s
}

// NewVectorSinkFormat writes records of the given format through p; Close closes p. A JSON
// format needs a producer with NoFragment: its consumers are not reignpipe and could not put
// fragments back together, so a vector too large for one record is refused (Write).
func NewVectorSinkFormat(p *kafkaclient.Producer, format string) (*VectorSink, error) {
	s := &VectorSink{p: p, format: format}
	switch format {
	case FormatRPDV, "":
		s.format, s.schema, s.encode = FormatRPDV, schemas.SchemaDocVector, schemas.EncodeDocVector
		return s, nil
	case FormatJSON:
		s.schema, s.encode = schemas.SchemaDocVectorJSON, schemas.EncodeDocVectorJSON
	case FormatConnectJSON:
		s.schema, s.encode = schemas.SchemaDocVectorConnectJSON, schemas.EncodeDocVectorConnectJSON
	default:
		return nil, fmt.Errorf("vector format %q is not %s", format, strings.Join(VectorFormats, ", "))
	}
	if !p.Options().NoFragment {
		return nil, fmt.Errorf("vector format %s needs a producer that never fragments", format)
	}
	return s, nil
}

// Format is the sink's record format.
func (s *VectorSink) Format() string { return s.format }

// Write queues one vector; durable after Flush. In a JSON format, a vector that cannot be one
// record (larger than transport.kafka.max_record_bytes, or with a NaN JSON cannot write) comes
// back as a *connectors.BadInputError, nothing queued: the stage dead-letters that document and
// goes on (connectors.Sink).
func (s *VectorSink) Write(ctx context.Context, v schemas.DocVector) error {
	b, err := s.encode(s.buf[:0], v)
	if err != nil {
		if s.format == FormatRPDV {
			return err
		}
		return &connectors.BadInputError{DocID: v.DocID, Reason: err}
	}
	s.buf = b
	err = s.p.Send(ctx, kafkaclient.Message{Key: v.DocID, Value: b, Headers: []kafkago.Header{
		header(schemas.HeaderSchema, s.schema),
		header(HeaderDocVersion, v.Version),
		header(HeaderContentHash, fmt.Sprintf("%016x", v.ContentHash)),
		header(HeaderSpace, v.Space),
	}})
	var tooLarge *kafkaclient.TooLargeError
	if errors.As(err, &tooLarge) {
		return &connectors.BadInputError{DocID: v.DocID, Reason: fmt.Errorf(
			"vector record of %d bytes exceeds transport.kafka.max_record_bytes=%d; format %s is never fragmented",
			tooLarge.Bytes, tooLarge.Max, s.format)}
	}
	if err == nil {
		s.counts.Add(connectors.CountWritten)
	}
	return err
}

// Flush blocks until every vector written is acknowledged by the broker.
func (s *VectorSink) Flush(ctx context.Context) error { return s.committed(s.p.Flush(ctx)) }

// Close flushes what is queued and closes the producer.
func (s *VectorSink) Close(ctx context.Context) error { return s.committed(s.p.Close(ctx)) }

func (s *VectorSink) committed(err error) error {
	if err == nil {
		s.counts.Commit()
	}
	return err
}

// Counts is the vector records (written) and tombstones (deleted) the broker acknowledged
// (connectors.SinkCounter).
func (s *VectorSink) Counts() map[string]int64 {
	return s.counts.Counts(connectors.CountWritten, connectors.CountDeleted)
}

// DeadLetterTopic is a connectors.DeadLetterSink on a topic: the value is the dead letter as
// JSON, the headers give stage, error and source position so an operator can filter with any
// client and fetch the original record from its topic by offset.
type DeadLetterTopic struct {
	p *kafkaclient.Producer
	n atomic.Int64
}

// NewDeadLetterTopic writes through p; Close closes p.
func NewDeadLetterTopic(p *kafkaclient.Producer) *DeadLetterTopic { return &DeadLetterTopic{p: p} }

// WriteDeadLetter is durable on return (it flushes).
func (s *DeadLetterTopic) WriteDeadLetter(ctx context.Context, d schemas.DeadLetter) error {
	b, err := json.Marshal(d.Record(time.Now()))
	if err != nil {
		return err
	}
	if err := s.p.Send(ctx, kafkaclient.Message{Key: d.DocID, Value: b, Headers: []kafkago.Header{
		header(schemas.HeaderSchema, schemas.SchemaDeadLetter),
		header(HeaderStage, d.Stage), header(HeaderError, d.Err), header(HeaderSource, d.Position),
	}}); err != nil {
		return err
	}
	if err := s.p.Flush(ctx); err != nil {
		return err
	}
	s.n.Add(1)
	return nil
}

// Count is the number of dead letters written.
func (s *DeadLetterTopic) Count() int64 { return s.n.Load() }

func (s *DeadLetterTopic) Close(ctx context.Context) error { return s.p.Close(ctx) }

// HeaderValue returns the value of the last header named key, "" if absent.
func HeaderValue(hs []kafkago.Header, key string) string {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return string(hs[i].Value)
		}
	}
	return ""
}

var (
	_ connectors.Sink         = (*VectorSink)(nil)
	_ connectors.Leased       = (*DocSource)(nil)
	_ connectors.ChunkSource  = (*ChunkSource)(nil)
	_ connectors.ChunkSink    = (*ChunkSink)(nil)
	_ connectors.DocumentSink = (*RawSink)(nil)
)
