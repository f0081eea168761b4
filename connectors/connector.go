// Package connectors defines the two roles at the edges of a pipeline: a Source that yields
// documents and a Sink that makes document vectors durable. Concrete connectors live in
// subpackages and are registered explicitly by cmd/reignpipe.
//
// Delivery is at-least-once: a Source hands out an AckFunc with every document and moves its
// checkpoint (file position, Kafka offset) only when acks arrive, in source order, after the
// runner has seen everything derived from the document become durable in the sinks.
package connectors

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/reignpipe/reignpipe/schemas"
)

// AckFunc is called exactly once per document handed out by a Source, after everything derived
// from it is durable (err == nil) or has gone to the dead-letter output (err != nil, the run
// carries on). Acks may arrive out of order; a Source advances its checkpoint over the longest
// contiguous prefix of acked documents. It must be safe to call from any goroutine.
type AckFunc func(ctx context.Context, err error) error

// Source yields documents.
type Source interface {
	// Read blocks until the next document is available, ctx is done (returns ctx.Err()) or the
	// source is exhausted (returns io.EOF). A document with Deleted set is a deletion record
	// (the source of record no longer has that id); it is acked like any other. A *BadInputError is returned, together with a
	// non-nil AckFunc, for an input that was read but cannot become a Document: the runner
	// dead-letters it, acks it, and keeps reading. Any other error ends the run.
	// Read is called from one goroutine at a time.
	Read(ctx context.Context) (schemas.Document, AckFunc, error)
	// Stats reports what the source read and skipped so far (for the run summary).
	Stats() SourceStats
	// Close releases resources; documents not acked by then are re-read by the next run.
	Close(ctx context.Context) error
}

// SourceStats counts inputs; Skipped is keyed by reason ("redirect", "namespace", ...).
type SourceStats struct {
	Read    int64            `json:"read"`
	Skipped map[string]int64 `json:"skipped"`
	// Text counts what the text policy (connectors/textpolicy) changed in documents' text and
	// titles: "repaired_utf8", "stripped_control", "no_title".
	Text map[string]int64 `json:"text_repairs,omitempty"`
	// BytesRead and BytesTotal drive the progress ETA; BytesTotal is 0 when unknown.
	BytesRead  int64 `json:"bytes_read"`
	BytesTotal int64 `json:"bytes_total"`
}

// Add merges another source's counts into s (a folder of files reports their sum).
func (s *SourceStats) Add(o SourceStats) {
	s.Read += o.Read
	s.BytesRead += o.BytesRead
	s.BytesTotal += o.BytesTotal
	for k, v := range o.Skipped {
		if s.Skipped == nil {
			s.Skipped = map[string]int64{}
		}
		s.Skipped[k] += v
	}
	for k, v := range o.Text {
		if s.Text == nil {
			s.Text = map[string]int64{}
		}
		s.Text[k] += v
	}
}

// SelfCheckpointing is implemented by sources that keep their own position, advanced by acks
// (a directory watcher's per-file state, Kafka offsets). The runner then does not resume by
// skipping the first inputs it committed before: the source does not hand them out again.
type SelfCheckpointing interface {
	SelfCheckpointing() bool
}

// AckFlusher is implemented by sources whose acks are cheap in memory and expensive to persist
// (a state file to fsync). The runner calls FlushAcks after acking each committed batch, so
// the persisted position follows the outputs' durability batch by batch.
type AckFlusher interface {
	FlushAcks(ctx context.Context) error
}

// BadInputError is an input that could not be turned into a document.
type BadInputError struct {
	DocID    string // as far as known; may be empty
	Position string // where in the source, e.g. "dump.xml.bz2 page 1234"
	Reason   error
}

func (e *BadInputError) Error() string {
	id := e.DocID
	if id == "" {
		id = "(unknown id)"
	}
	return fmt.Sprintf("bad input %s at %s: %v", id, e.Position, e.Reason)
}

func (e *BadInputError) Unwrap() error { return e.Reason }

// Sink makes document vectors durable.
type Sink interface {
	// Write hands one vector to the sink. It may buffer; nothing is promised durable until
	// Flush returns. Writing the same DocID and Version twice must be harmless (readers keep the
	// newest Version of a DocID). Called from one goroutine at a time.
	//
	// A *BadInputError means the sink can never take this vector (a kafka sink with format
	// json: the record would exceed transport.kafka.max_record_bytes) and queued nothing of
	// it; the runner dead-letters the document under stage "sink", acks its input once the
	// dead letter is durable, and carries on (WriteVector). Any other error ends the run.
	Write(ctx context.Context, v schemas.DocVector) error
	// Delete hands one deletion to the sink; like Write it may buffer until Flush. The sink
	// applies the version rule of schemas.Deletion in every space it holds: what it stores of
	// d.DocID at a version <= d.Version goes (a database row is deleted; an append-only output
	// appends a tombstone: a vector file's row with deleted set, a null-value Kafka record keyed
	// by the id), and a later Write at a version <= d.Version does not bring it back for as long
	// as the deletion is remembered. Deleting an id the sink never held is not an error (it may
	// still record the deletion). Called from the goroutine that calls Write.
	Delete(ctx context.Context, d schemas.Deletion) error
	// Flush blocks until every vector written so far is durable and visible (fsynced and
	// renamed into place, or acknowledged by a broker). Only then are the inputs acked.
	Flush(ctx context.Context) error
	// Close flushes and releases resources.
	Close(ctx context.Context) error
}

// WriteVector writes v to every sink. A sink's refusal (a *BadInputError from Write) does not
// stop the others, which may keep the vector; the first refusal's reason is returned as refused
// for the caller to dead-letter. err is the first other failure, which is fatal.
func WriteVector(ctx context.Context, sinks []Sink, v schemas.DocVector) (refused, err error) {
	for _, s := range sinks {
		werr := s.Write(ctx, v)
		var bad *BadInputError
		switch {
		case werr == nil:
		case errors.As(werr, &bad):
			if refused == nil {
				refused = bad.Reason
			}
			if refused == nil {
				refused = bad
			}
		default:
			return refused, werr
		}
	}
	return refused, nil
}

// SinkCounter is implemented by sinks that know what became of the vectors they committed (a
// database sink's rows inserted, updated, or skipped as older or unchanged: the upsert's
// outcomes, which only the store can tell). The run summary reports them per sink. Counts is
// called after the run, and counts committed vectors only.
type SinkCounter interface {
	Counts() map[string]int64
}

// DeadLetterSink receives inputs that failed. Write is durable on return.
type DeadLetterSink interface {
	WriteDeadLetter(ctx context.Context, d schemas.DeadLetter) error
	Close(ctx context.Context) error
}

// DocumentSink makes raw documents durable: the ingest stage's raw topic, from which the embed
// workers read (connectors/kafka.RawSink).
type DocumentSink interface {
	// WriteDocument hands over one document, keyed by its id; it may buffer. A deletion
	// record (d.Deleted) is written as the transport's tombstone (a null value keyed by the id). Called from one
	// goroutine at a time.
	WriteDocument(ctx context.Context, d schemas.Document) error
	// Flush blocks until every document written so far is durable; only then are the inputs
	// acked.
	Flush(ctx context.Context) error
	// Close flushes and releases resources.
	Close(ctx context.Context) error
}

// ChunkSink makes documents' chunk embeddings durable (the embed stage's chunk topic, read by
// a separate aggregate stage), as Sink does for vectors.
type ChunkSink interface {
	// WriteChunks hands over one document's chunk record; it may buffer. A deletion's record
	// (c.Deleted) is written as the transport's tombstone, keyed by the id. The ChunkDoc's
	// slices are not retained past the call's return unless copied. Called from one goroutine
	// at a time.
	WriteChunks(ctx context.Context, c schemas.ChunkDoc) error
	// Flush blocks until everything written so far is durable; only then are inputs acked.
	Flush(ctx context.Context) error
	// Close flushes and releases resources.
	Close(ctx context.Context) error
}

// ChunkSource yields documents' chunk records (the aggregate stage's input,
// connectors/kafka.ChunkSource).
type ChunkSource interface {
	// Read blocks until the next document's chunk record, ctx is done (returns ctx's error) or
	// the source ends (io.EOF). A *BadInputError comes with its AckFunc, as Source.Read's does.
	// Called from one goroutine at a time.
	Read(ctx context.Context) (schemas.ChunkDoc, AckFunc, error)
	// FlushAcks makes everything acked so far the source's committed position (AckFlusher).
	FlushAcks(ctx context.Context) error
	// Close releases resources; records not committed by then are read again.
	Close(ctx context.Context) error
}

// Leased is implemented by sources whose inputs can stop being this reader's to process before
// they are acked: a Kafka partition that a rebalance moves to another member of the consumer
// group. Lease returns a context that ends when the input Read returned last is no longer this
// reader's; its ack is then ignored and the partition's new owner reads the input again, so the
// runner drops the work still queued for it. Called right after Read, from the same goroutine.
type Leased interface {
	Lease() context.Context
}

// VectorStore answers queries over the vectors a sink stored (a pgvector sink's tables, the
// vector files' parts): what `search` and `serve` rank documents with.
type VectorStore interface {
	// Name says which store answers, for the output ("pgvector table prefix reignpipe",
	// "files out/vectors").
	Name() string
	// Search ranks the newest vector of every document in space against q and returns the k
	// best, best first, ties by ascending doc id, leaving out what ex excludes. exact asks an
	// indexed store for a full scan (a scan is always exact). It is safe for concurrent use.
	Search(ctx context.Context, space string, q []float32, k int, ex schemas.Exclude, exact bool) (*schemas.Answer, error)
	// Lookup returns the stored newest vector of docID in space (Space and Vector set to it,
	// no companion). A doc id the store does not hold is a *NotFoundError.
	Lookup(ctx context.Context, space, docID string) (*schemas.DocVector, error)
	Close() error
}

// NotFoundError is a doc id a store does not hold. Near lists up to three stored ids that end
// in ":"+ID: sources prefix ids with their file or corpus name (corpus:bread), and users type
// the bare id.
type NotFoundError struct {
	ID, Where string
	Near      []string
}

func (e *NotFoundError) Error() string {
	if len(e.Near) > 0 {
		return fmt.Sprintf("no document %q in %s; ids are prefixed with their source: did you mean %s?", e.ID, e.Where, strings.Join(e.Near, " or "))
	}
	return fmt.Sprintf("no document %q in %s", e.ID, e.Where)
}
