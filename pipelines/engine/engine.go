// Package engine is the delivery engine every mode of reignpipe runs on: the one commit path
// (Ledger), the one publish step (chunk embeddings → DocVector → sinks, in Ledger.Deliver and
// Aggregation.Vector) and the one "embed these windows" step (Windows: cache lookup, the GN
// for the misses, cache add). The in-process runner (runner), the distributed stages
// (cluster), reaggregate (and so tune --apply) and the query side (serving/query) all stand on
// it, so the order in which work becomes durable and inputs are acked is written once:
//
//	chunk cache (rows, then manifests) → chunk records → vector sinks → acks → source commit → watermark
//
// An input is acked only after everything derived from it is durable; a bad input is
// dead-lettered (durable) before it is acked; an input in flight at a hard stop is neither,
// and is read again. Commits follow run.commit_every and run.commit_interval in every mode.
package engine

import (
	"fmt"
	"strings"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// Cache is the chunk cache as the engine uses it: the embed step looks windows up and adds the
// GN's, the ledger puts manifests and flushes. stages/shardcache.Cache implements it, and so
// does a distributed worker's replica publisher (pipelines/engine/replica).
type Cache interface {
	// Get fills dst with key's embedding and reports whether the cache holds it. A damaged
	// stored row is shardcache.ErrCorrupt: the window is embedded again and Add replaces it.
	Get(key uint64, dst []float32) (bool, error)
	// Add stores one embedded window (durable at the next Flush) and reports whether it was
	// new. A key already held is a no-op.
	Add(r shardcache.Row) (added bool, err error)
	// PutManifest records a document's manifest, durable at the next Flush.
	PutManifest(m shardcache.Manifest) error
	// DeleteManifest applies a deletion to the document's manifest, durable at the next Flush:
	// a manifest at a version the deletion supersedes goes, so that nothing that reads
	// manifests (reaggregate, tune, materialize, a worker's replica) brings the document back;
	// its windows stay (content-addressed, they may be shared). The deletion is remembered
	// for run.delete_retention.
	DeleteManifest(d schemas.Deletion) error
	// Superseded says whether a deletion the cache remembers supersedes version of docID: an
	// upsert at that version is kept out (not embedded, not written). shardcache.Cache's
	// PutManifest refuses such a manifest too (shardcache.ErrSuperseded).
	Superseded(docID, version string) (bool, error)
	// Flush makes every row added and manifest put before it durable: rows first.
	Flush() error
}

// Input is one input as the ledger tracks it from the moment it is read.
type Input struct {
	// Seq is the input's place in read order, counted from 0 over the whole source (resumed
	// inputs included): the watermark counts over it.
	Seq int64
	// Ack is the source's acknowledgement (nil: nothing to ack, as in reaggregate).
	Ack connectors.AckFunc
	// DocID, Source and Position name the input in dead letters and logs.
	DocID, Source, Position string
}

func (in Input) position() string {
	if in.Position != "" {
		return in.Position
	}
	return fmt.Sprintf("input %d", in.Seq)
}

// Doc is what a document's vector says about it beside the vector itself: filled in from the
// runner's document, a chunk record, a manifest or a query, in one place each (DocOf...), and
// turned into a DocVector in one place (Aggregation.Vector).
type Doc struct {
	ID, Title, Source, Version string
	ContentHash                uint64
	NTokens                    int // content tokens, without [CLS]/[SEP]
}

// DocOf is d's identity once tokenized: the content hash of its text and its token count.
func DocOf(d schemas.Document, contentHash uint64, nTokens int) Doc {
	return Doc{ID: d.ID, Title: d.Title, Source: d.Source, Version: d.Version, ContentHash: contentHash, NTokens: nTokens}
}

// DocOfChunks is the identity a chunk record carries.
func DocOfChunks(c *schemas.ChunkDoc) Doc {
	return Doc{ID: c.DocID, Title: c.Title, Source: c.Source, Version: c.Version, ContentHash: c.ContentHash, NTokens: c.NTokens}
}

// DocOfManifest is the identity a cache manifest records. Manifests written before the source
// was recorded name it by the doc id's prefix ("enwiki:12" → "enwiki").
func DocOfManifest(m *shardcache.Manifest) Doc {
	source := m.Source
	if source == "" {
		source, _, _ = strings.Cut(m.DocID, ":")
	}
	return Doc{ID: m.DocID, Title: m.Title, Source: source, Version: m.Version, ContentHash: m.ContentHash, NTokens: m.NTokens}
}

// Manifest is d's manifest in space sp over its window keys.
func Manifest(d Doc, sp schemas.Space, keys []uint64) shardcache.Manifest {
	return shardcache.Manifest{
		DocID: d.ID, Version: d.Version, ContentHash: d.ContentHash, Fingerprint: sp.Fingerprint, K: sp.K, S: sp.S,
		Keys: keys, Title: d.Title, Source: d.Source, NTokens: d.NTokens,
	}
}

// ChunkRecord is d's chunk record (the embed stage's output) in space sp. The embeddings are
// copied into one row-major slice.
func ChunkRecord(d Doc, sp schemas.Space, keys []uint64, chunks [][]float32) schemas.ChunkDoc {
	cd := schemas.ChunkDoc{
		DocID: d.ID, Source: d.Source, Version: d.Version, Title: d.Title, ContentHash: d.ContentHash, NTokens: d.NTokens,
		Fingerprint: sp.Fingerprint, K: sp.K, S: sp.S, Dim: sp.Dim, Keys: keys,
		Embeddings: make([]float32, 0, len(chunks)*sp.Dim),
	}
	for _, e := range chunks {
		cd.Embeddings = append(cd.Embeddings, e...)
	}
	return cd
}

// Chunks are the chunk embeddings of a chunk record, as views into it.
func Chunks(c *schemas.ChunkDoc) [][]float32 {
	out := make([][]float32, len(c.Keys))
	for i := range out {
		out[i] = c.Chunk(i)
	}
	return out
}

// CheckSpace refuses chunk embeddings of another space than sp, in the words of the
// pipeline file: they would be aggregated into confident nonsense.
func CheckSpace(got, sp schemas.Space) error {
	if got != sp {
		return fmt.Errorf("chunk embeddings are from GN %s (dim %d, K=%d, S=%d); this pipeline aggregates GN %s (dim %d, K=%d, S=%d)",
			got.Fingerprint, got.Dim, got.K, got.S, sp.Fingerprint, sp.Dim, sp.K, sp.S)
	}
	return nil
}

// SpaceOf is a chunk record's space.
func SpaceOf(c *schemas.ChunkDoc) schemas.Space {
	return schemas.Space{Fingerprint: c.Fingerprint, Dim: c.Dim, K: c.K, S: c.S}
}
