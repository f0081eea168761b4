package kafka

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/schemas"
)

// Deletions on the topics reignpipe writes are tombstones: a record with a null value keyed by
// the document id, its version in rp-version and its source in rp-doc-source (schemas/WIRE.md,
// "Deletions"). On a compacted topic (the vectors) the broker then removes the document's
// records, and a Kafka Connect sink with delete.enabled deletes its row. The raw and chunk
// topics carry them so that a deletion reaches the stages after them, in order with the
// document's other records (the same key, so the same partition).

// RawFormat is one transport.kafka.raw_format: how the raw topic's record values read, and
// what a record with a null value means in that format.
type RawFormat struct {
	Decode Decoder
	// Null reads a record whose value is null (or empty: Kafka clients do not all tell the two
	// apart, and no format has an empty document). nil means NullDeletes.
	Null NullValue
}

// NullValue reads a raw record without a value from its key and headers: a deletion (Document
// with Deleted set), a skip reason, or an error (dead-lettered), as a Decoder does.
type NullValue func(key string, headers []kafkago.Header) (doc schemas.Document, skip string, err error)

// NullDeletes is reignpipe's own raw formats' meaning of a null value: the document the key
// names is gone, as of the rp-version header (absent: whatever version is stored).
func NullDeletes(key string, headers []kafkago.Header) (schemas.Document, string, error) {
	d, err := DeletionOf(key, headers)
	return schemas.Document{ID: d.DocID, Source: d.Source, Version: d.Version, Deleted: true}, "", err
}

// NullSkips is the NullValue of a format whose null values are no documents (Debezium sends
// a tombstone after each delete event, for compaction; the delete event said it already): the
// record is skipped, counted under reason.
func NullSkips(reason string) NullValue {
	return func(string, []kafkago.Header) (schemas.Document, string, error) {
		return schemas.Document{}, reason, nil
	}
}

func (f RawFormat) read(d kafkaclient.Delivery) (schemas.Document, string, error) {
	if len(d.Value) == 0 {
		return f.Null(d.Key, d.Headers)
	}
	return f.Decode(d.Value)
}

// DeletionOf reads the deletion a tombstone says: the key is the document id; the version and
// the source are headers, the source defaulting to the id's prefix ("enwiki:12" → "enwiki") as
// for manifests that do not record it.
func DeletionOf(key string, headers []kafkago.Header) (schemas.Deletion, error) {
	d := schemas.Deletion{DocID: key, Version: HeaderValue(headers, HeaderDocVersion), Source: HeaderValue(headers, HeaderDocSource)}
	if err := schemas.CheckID(key); err != nil {
		return schemas.Deletion{}, fmt.Errorf("a record without a value is a deletion of the document its key names: key %w", err)
	}
	if !utf8.ValidString(d.Version) || !utf8.ValidString(d.Source) {
		return d, fmt.Errorf("deletion of %q: the %s or %s header is not UTF-8", key, HeaderDocVersion, HeaderDocSource)
	}
	if d.Source == "" {
		d.Source, _, _ = strings.Cut(key, ":")
	}
	return d, nil
}

// Tombstone is the record of deletion d on a topic of the given rp-schema.
func Tombstone(schema string, d schemas.Deletion) kafkaclient.Message {
	hs := []kafkago.Header{header(schemas.HeaderSchema, schema), header(HeaderDocVersion, d.Version)}
	if d.Source != "" {
		hs = append(hs, header(HeaderDocSource, d.Source))
	}
	return kafkaclient.Message{Key: d.DocID, Headers: hs}
}

// readChunks reads a chunk-topic record: a tombstone is the deletion's chunk record, its space
// the fingerprint in rp-space (K, S and the dimension are not carried: a deletion is of every
// space).
func readChunks(d kafkaclient.Delivery) (schemas.ChunkDoc, error) {
	if len(d.Value) != 0 {
		return schemas.DecodeChunkDoc(d.Value)
	}
	del, err := DeletionOf(d.Key, d.Headers)
	if err != nil {
		return schemas.ChunkDoc{DocID: d.Key}, err
	}
	fp, _ := strings.CutPrefix(HeaderValue(d.Headers, HeaderSpace), "gn:")
	return schemas.ChunkDoc{DocID: del.DocID, Source: del.Source, Version: del.Version, Fingerprint: fp, Deleted: true}, nil
}

// Delete queues the deletion's tombstone, in every format: a null value keyed by the doc id,
// with the format's rp-schema and the deletion's version (and source). Compaction then drops
// the document's vectors, and a Kafka Connect sink with delete.enabled deletes its row. It is
// in order with the document's vectors (same key, same partition): a later Write of a newer
// version brings the document back. Keeping an older late version out is the stage's guard,
// upstream of the sink: a topic cannot refuse a record.
func (s *VectorSink) Delete(ctx context.Context, d schemas.Deletion) error {
	err := s.p.Send(ctx, Tombstone(s.schema, d))
	if err == nil {
		s.counts.Add(connectors.CountDeleted)
	}
	return err
}
