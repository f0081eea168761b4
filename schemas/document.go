// Package schemas holds the records that flow between reignpipe's connectors and stages, and
// the on-disk schemas (Arrow/Parquet) that other tools read. Types here carry no behaviour
// beyond identity helpers: every stage and connector agrees on them, so they change rarely and
// only with a version bump of the on-disk schemas.
package schemas

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// Document is one input document as a source connector produced it.
type Document struct {
	// ID is source-qualified and stable across versions, e.g. "enwiki:12" or
	// "uspto:US07272630B2". Outputs are keyed by it.
	ID string
	// Source names the corpus the document came from, e.g. "enwiki".
	Source string
	// Version orders versions of the same ID (revision id, publication date + kind, ...).
	Version string
	Title   string
	// Text is exactly what gets tokenized.
	Text string
	// Meta carries source-specific fields (dates, classes, namespace...). May be nil.
	Meta map[string]string
	// Position says where the source read it (e.g. "topic/partition@offset"), for dead letters
	// of later stages; "" when the source has no better name than the read order.
	Position string
	// Deleted marks a deletion record: the source says document ID is gone as of Version
	// (a JSONL deletion line, a null value on the raw topic, a database change stream's
	// delete, a page a newer Wikipedia dump no longer has). Title, Text and Meta are empty. It
	// travels and is acked like any document; the outputs apply it as a Deletion.
	Deleted bool
}

// Deletion is a document's removal as the outputs apply it. The version rule extends the
// upserts': a deletion at Version v removes the document stored at a version <= v (by
// CompareVersions); an upsert at a version > v brings it back; an upsert at a version <= v
// that arrives after the deletion (re-delivery, a late partition) does not, for as long as
// the deletion is remembered (run.delete_retention). An empty Version is a deletion of
// whatever version is stored: it is not remembered against later upserts.
type Deletion struct {
	DocID, Source, Version string
}

// DeletionOf is the deletion a deletion record says.
func DeletionOf(d Document) Deletion {
	return Deletion{DocID: d.ID, Source: d.Source, Version: d.Version}
}

// Supersedes says whether a deletion at version del removes (or, remembered, keeps out) a
// document at version v.
func Supersedes(del, v string) bool {
	return del == "" || CompareVersions(v, del) <= 0
}

// ContentHash is xxhash64 of the exact text that is tokenized. Together with ID and Version it
// tells a consumer whether a vector is still current.
func (d *Document) ContentHash() uint64 { return xxhash.Sum64String(d.Text) }

// DocVector is the published result for one document.
type DocVector struct {
	DocID       string
	Title       string
	Source      string
	Version     string
	ContentHash uint64
	NChunks     int
	NTokens     int // content tokens, without [CLS]/[SEP]
	// Space labels the vector space: "gn-meanpool:<GN fingerprint>" for the chunked mean-pool
	// baseline, "reign:<checkpoint id>" for REIGN. Vectors of two spaces are never comparable.
	Space  string
	Vector []float32
	// GNSpace and GNVector carry the chunked mean-pool GN vector beside a REIGN vector: it
	// comes free from the same chunks and is the stronger baseline on some tasks. Empty when the
	// pipeline aggregates by mean-pool alone (Vector is then that vector).
	GNSpace  string
	GNVector []float32
}

// DeadLetter records an input that could not be processed. It names the document (as far as it
// is known) and the reason; the run continues.
type DeadLetter struct {
	DocID  string
	Source string
	// Position says where the input was (file and byte offset, page index, Kafka offset...).
	Position string
	Stage    string
	Err      string
}

// DeadLetterRecord is a dead letter as it is written, the one JSON shape of the dead-letter file
// and the dead-letter topic, so one reader serves both.
type DeadLetterRecord struct {
	Time     string `json:"time"` // when it was written, RFC 3339 UTC
	DocID    string `json:"doc_id"`
	Source   string `json:"source,omitempty"`
	Position string `json:"position,omitempty"`
	Stage    string `json:"stage"`
	Error    string `json:"error"`
}

// Record is d as written at t.
func (d DeadLetter) Record(t time.Time) DeadLetterRecord {
	return DeadLetterRecord{Time: t.UTC().Format(time.RFC3339), DocID: d.DocID, Source: d.Source,
		Position: d.Position, Stage: d.Stage, Error: d.Err}
}

// CheckID is the one rule every reader applies to a document id it is handed (a JSONL line, a
// raw topic record or a tombstone's key, a service's request): not empty, valid UTF-8, and no
// NUL, CR or LF, which would break the line-oriented outputs (dead letters, manifests) and the
// keys that embed the id.
func CheckID(id string) error {
	if id == "" || !utf8.ValidString(id) || strings.ContainsAny(id, "\n\r\x00") {
		return fmt.Errorf("id %q is empty or holds control characters", id)
	}
	return nil
}
