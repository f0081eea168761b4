package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// Publisher is the chunk cache an embed worker's runner uses (runner.ChunkCache) when the
// store of record is on Kafka. The runner's writer calls Add for the windows the GN embedded
// and PutManifest for each document; Publisher sends the windows to P.windows at once, holds the
// manifests, and at the writer's commit (Flush, before the chunk sinks are flushed and the
// inputs acked) makes them durable in this order:
//
//  1. the new windows are acknowledged by the broker, and only then enter the local cache;
//  2. the manifests (and the deletions' tombstones, in order with them) are sent and
//     acknowledged, and only then enter the local cache;
//  3. the local cache is flushed.
//
// So no manifest, on the topic or in any replica, names a window that exists nowhere else, and
// a raw offset is acked only after its windows and manifest are durable on the broker. Windows
// sent but not yet acknowledged are served to Get from memory, so the worker does not embed
// them twice (the runner's in-flight sharing covers windows still at the GN).
type Publisher struct {
	cache              *shardcache.Cache
	windows, manifests *kafkaclient.Producer
	space              schemas.Space
	spaceHeaders       []kafkago.Header

	mu      sync.Mutex
	pending map[uint64][]float32 // sent to P.windows, not yet acknowledged
	rows    []shardcache.Row     // the same, in order, for the local cache
	mans    []manifestOp

	windowsSent, manifestsSent, manifestsKnown, tombstonesSent atomic.Int64
	unflushed                                                  atomic.Bool // windows sent since the last flush of P.windows
}

var _ engine.Cache = (*Publisher)(nil)

// NewPublisher writes through the producers of P.windows (which must not fragment) and
// P.manifests into cache.
func NewPublisher(cache *shardcache.Cache, windows, manifests *kafkaclient.Producer, sp schemas.Space) *Publisher {
	return &Publisher{cache: cache, windows: windows, manifests: manifests, space: sp, spaceHeaders: SpaceHeaders(sp), pending: map[uint64][]float32{}}
}

// Linger flushes P.windows every interval while windows wait in its queue, until stop is
// called (which waits for the goroutine). A window is then on the broker, and in the other
// workers' replicas, within about interval of its GN pass rather than at the next commit:
// another worker that queued the same window finds it when its GN batch forms (the embed
// step's second lookup) instead of embedding it again. Windows durable early are always safe:
// no manifest names them before Publish. A failed flush is logged; the commit's Publish
// retries and fails the run if the broker stays away.
func (p *Publisher) Linger(interval time.Duration, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if !p.unflushed.Swap(false) {
					continue
				}
				if err := p.windows.Flush(ctx); err != nil && ctx.Err() == nil {
					p.unflushed.Store(true)
					log.Warn("publishing windows early failed; the next commit publishes them", "err", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// SpaceHeaders are the headers naming a record's space.
func SpaceHeaders(sp schemas.Space) []kafkago.Header {
	h := func(k, v string) kafkago.Header { return kafkago.Header{Key: k, Value: []byte(v)} }
	return []kafkago.Header{
		h(schemas.HeaderGNFingerprint, sp.Fingerprint), h(schemas.HeaderK, strconv.Itoa(sp.K)),
		h(schemas.HeaderS, strconv.Itoa(sp.S)), h(schemas.HeaderDim, strconv.Itoa(sp.Dim)),
	}
}

// WindowMessage is the P.windows record of one window.
func WindowMessage(r shardcache.Row, spaceHeaders []kafkago.Header) kafkaclient.Message {
	hs := make([]kafkago.Header, 0, len(spaceHeaders)+4)
	hs = append(hs, kafkago.Header{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaWindow)})
	hs = append(hs, spaceHeaders...)
	hs = append(hs,
		kafkago.Header{Key: schemas.HeaderDocID, Value: []byte(r.DocID)},
		kafkago.Header{Key: schemas.HeaderChunkIndex, Value: []byte(strconv.Itoa(int(r.ChunkIndex)))},
		kafkago.Header{Key: schemas.HeaderNTokens, Value: []byte(strconv.Itoa(int(r.NTokens)))})
	return kafkaclient.Message{Key: schemas.WindowKeyString(r.Key), Value: schemas.AppendWindowValue(nil, r.Embedding), Headers: hs}
}

// ManifestMessage is the P.manifests record of one manifest.
func ManifestMessage(m shardcache.Manifest, sp schemas.Space, spaceHeaders []kafkago.Header) (kafkaclient.Message, error) {
	v, err := schemas.EncodeManifest(nil, ToStore(m, sp.Dim))
	if err != nil {
		return kafkaclient.Message{}, err
	}
	hs := append([]kafkago.Header{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaManifest)}}, spaceHeaders...)
	return kafkaclient.Message{Key: m.DocID, Value: v, Headers: hs}, nil
}

// Get serves a window from the windows awaiting their acknowledgement, then from the cache.
func (p *Publisher) Get(key uint64, dst []float32) (bool, error) {
	p.mu.Lock()
	if e, ok := p.pending[key]; ok {
		copy(dst, e)
		p.mu.Unlock()
		return true, nil
	}
	p.mu.Unlock()
	return p.cache.Get(key, dst)
}

// Add sends a window the GN embedded to P.windows; it enters the local cache at the next Flush,
// once acknowledged. A window another worker's record brought in meanwhile is not sent again.
func (p *Publisher) Add(r shardcache.Row) (bool, error) {
	p.mu.Lock()
	_, dup := p.pending[r.Key]
	p.mu.Unlock()
	if dup {
		return false, nil
	}
	if has, err := p.cache.Contains(r.Key); err != nil || has {
		return false, err
	}
	// Send may flush on its own (a full queue): windows durable early is always safe.
	if err := p.windows.Send(context.Background(), WindowMessage(r, p.spaceHeaders)); err != nil {
		return false, fmt.Errorf("publishing window %016x to the store's window topic: %w", r.Key, err)
	}
	p.unflushed.Store(true)
	emb := append([]float32(nil), r.Embedding...)
	r.Embedding = emb
	p.mu.Lock()
	p.pending[r.Key] = emb
	p.rows = append(p.rows, r)
	p.mu.Unlock()
	p.windowsSent.Add(1)
	return true, nil
}

// manifestOp is a change to a document's manifest held until Publish: a manifest to put or,
// with del set, a deletion. One list keeps them in the order the ledger made them.
type manifestOp struct {
	m   shardcache.Manifest
	del *schemas.Deletion
}

func (o manifestOp) docID() string {
	if o.del != nil {
		return o.del.DocID
	}
	return o.m.DocID
}

// PutManifest holds m until its windows are acknowledged (Flush).
func (p *Publisher) PutManifest(m shardcache.Manifest) error {
	m.Keys = append([]uint64(nil), m.Keys...)
	p.mu.Lock()
	p.mans = append(p.mans, manifestOp{m: m})
	p.mu.Unlock()
	return nil
}

// DeleteManifest holds a deletion until Publish, in order with the manifests put before and
// after it: its tombstone then goes to P.manifests (so every replica, and materialize, drops
// the document) and the local cache applies it (shardcache: the manifest goes, the deletion is
// remembered for run.delete_retention).
func (p *Publisher) DeleteManifest(d schemas.Deletion) error {
	p.mu.Lock()
	p.mans = append(p.mans, manifestOp{del: &d})
	p.mu.Unlock()
	return nil
}

// ManifestTombstone is the P.manifests record of a deletion: a null value keyed by the doc id
// with its version, and the space headers of the manifests (schemas/WIRE.md, "Deletions").
func ManifestTombstone(d schemas.Deletion, spaceHeaders []kafkago.Header) kafkaclient.Message {
	m := kafka.Tombstone(schemas.SchemaManifest, d)
	m.Headers = append(m.Headers, spaceHeaders...)
	return m
}

// Flush is the commit: windows acknowledged → local; manifests sent and acknowledged → local;
// local cache flushed. On an error nothing is acked by the runner, which ends the run.
func (p *Publisher) Flush() error {
	if err := p.Publish(context.Background()); err != nil {
		return err
	}
	return p.cache.Flush()
}

// Publish makes the windows, then the manifests, added so far durable on the broker and puts
// them into the local cache (not flushed). The chunk sink calls it before its own producer
// could flush on its own, so a chunk record is never acknowledged before its windows.
func (p *Publisher) Publish(ctx context.Context) error {
	// What is taken here was sent before the flush below, so the flush covers it. Windows are
	// added from the embed step's goroutine while a commit runs: one sent after this point
	// waits for the next Publish, which keeps it out of the local cache until it is
	// acknowledged.
	p.mu.Lock()
	rows, mans := p.rows, p.mans
	p.rows, p.mans = nil, nil
	p.mu.Unlock()
	if err := p.windows.Flush(ctx); err != nil {
		p.mu.Lock()
		p.rows, p.mans = append(rows, p.rows...), append(mans, p.mans...)
		p.mu.Unlock()
		return fmt.Errorf("store window topic: %w", err)
	}
	for _, r := range rows {
		if _, err := p.cache.Add(r); err != nil {
			return err
		}
	}
	p.mu.Lock()
	for _, r := range rows {
		delete(p.pending, r.Key)
	}
	p.mu.Unlock()
	sent, err := p.sendManifests(ctx, mans)
	if err != nil {
		return err
	}
	if err := p.manifests.Flush(ctx); err != nil {
		return fmt.Errorf("store manifest topic: %w", err)
	}
	for _, op := range sent {
		if op.del != nil {
			if err := p.cache.DeleteManifest(*op.del); err != nil {
				return fmt.Errorf("deleting the manifest of %s: %w", op.del.DocID, err)
			}
			p.tombstonesSent.Add(1)
			continue
		}
		if _, err := PutNewest(p.cache, op.m); err != nil {
			return err
		}
		p.manifestsSent.Add(1)
	}
	return nil
}

// heldManifest is what the store holds of a doc id while a batch is sent: a manifest (has), or
// the deletion the batch sent.
type heldManifest struct {
	m   shardcache.Manifest
	has bool
	del *schemas.Deletion
}

// sendManifests sends the batch's manifests and tombstones that change what the store holds,
// and returns them in order. One record per (doc id, version): a version the store already
// holds with the same content and windows (a re-ingest) is not sent again, and neither is an
// older version than the store's, because compaction keeps a doc id's last record, not its
// newest version. For the same reason a tombstone is sent only when the deletion removes what
// the store holds (or it holds nothing), and a manifest that a deletion earlier in the batch
// removes is not sent after it. What the store holds is the cache, then what the batch sent.
func (p *Publisher) sendManifests(ctx context.Context, ops []manifestOp) ([]manifestOp, error) {
	var sent []manifestOp
	batch := map[string]heldManifest{}
	for _, op := range ops {
		h, ok := batch[op.docID()]
		if !ok {
			old, has, err := p.cache.Manifest(op.docID())
			if err != nil {
				return nil, err
			}
			h = heldManifest{m: old, has: has}
		}
		if op.del == nil && h.del == nil {
			// A deletion the store remembers keeps an older manifest off the topic too.
			sup, err := p.cache.Superseded(op.m.DocID, op.m.Version)
			if err != nil {
				return nil, err
			}
			if sup {
				p.manifestsKnown.Add(1)
				continue
			}
		}
		var msg kafkaclient.Message
		if d := op.del; d != nil {
			if h.has && !schemas.Supersedes(d.Version, h.m.Version) {
				p.manifestsKnown.Add(1) // a newer version than the deletion's stays
				continue
			}
			msg = ManifestTombstone(*d, p.spaceHeaders)
			batch[d.DocID] = heldManifest{del: d}
		} else {
			m := op.m
			if h.has && (olderThan(m, h.m) || sameManifest(m, h.m)) || h.del != nil && schemas.Supersedes(h.del.Version, m.Version) {
				p.manifestsKnown.Add(1)
				continue
			}
			var err error
			if msg, err = ManifestMessage(m, p.space, p.spaceHeaders); err != nil {
				return nil, fmt.Errorf("publishing the manifest of %s to the store's manifest topic: %w", m.DocID, err)
			}
			batch[m.DocID] = heldManifest{m: m, has: true}
		}
		if err := p.manifests.Send(ctx, msg); err != nil {
			return nil, fmt.Errorf("publishing the manifest of %s to the store's manifest topic: %w", op.docID(), err)
		}
		sent = append(sent, op)
	}
	return sent, nil
}

// PublisherStats count what this worker wrote to the store's topics.
type PublisherStats struct {
	WindowsPublished   int64 `json:"windows_published"`
	ManifestsPublished int64 `json:"manifests_published"`
	ManifestsKnown     int64 `json:"manifests_known"` // already in the store (same version and windows, or newer), or deleted
	// TombstonesPublished counts the deletions sent to the manifest topic.
	TombstonesPublished int64 `json:"manifest_tombstones_published"`
}

func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{WindowsPublished: p.windowsSent.Load(), ManifestsPublished: p.manifestsSent.Load(), ManifestsKnown: p.manifestsKnown.Load(),
		TombstonesPublished: p.tombstonesSent.Load()}
}

func olderThan(m, old shardcache.Manifest) bool {
	return schemas.CompareVersions(m.Version, old.Version) < 0
}

func sameManifest(a, b shardcache.Manifest) bool {
	if a.Version != b.Version || a.ContentHash != b.ContentHash || a.Title != b.Title || a.Source != b.Source || a.NTokens != b.NTokens || len(a.Keys) != len(b.Keys) {
		return false
	}
	for i := range a.Keys {
		if a.Keys[i] != b.Keys[i] {
			return false
		}
	}
	return true
}

// Records a sink's producer sends are acknowledged when that producer flushes, which it also
// does by itself when its queue fills (internal/kafkaclient: 1000 records or 16 MiB). A chunk or vector
// record must never be acknowledged before the windows and manifest of its document, so the
// ordered sinks below count what their producer has queued since its last flush and, before the
// queue could reach the producer's own threshold, publish the store's windows and manifests
// (Publisher.Publish) and then flush the producer themselves.

// Bounds under the producer's own flush thresholds (internal/kafkaclient: 1000 records, 16 MiB).
const (
	orderedRecords = 500
	orderedBytes   = 8 << 20
)

// ordered is what one sink's producer holds since its last flush.
type ordered struct {
	records, bytes int
}

// before is called before a record of about size bytes is queued in the producer that flush
// flushes: the store first, then the queued records, whenever this record could make the
// producer flush by itself.
func (o *ordered) before(ctx context.Context, pub *Publisher, maxRecordBytes, size int, flush func(context.Context) error) error {
	if pub == nil {
		return errors.New("ordered sink: no store publisher attached (internal error)")
	}
	recs := 1
	if maxRecordBytes > 0 {
		recs += size / maxRecordBytes // fragments
	}
	if o.records > 0 && (o.records+recs > orderedRecords || o.bytes+size > orderedBytes) {
		// Windows and manifests of every queued record first, then those records: the queue
		// is empty again, far from the producer's own threshold.
		if err := pub.Publish(ctx); err != nil {
			return err
		}
		if err := flush(ctx); err != nil {
			return err
		}
		o.records, o.bytes = 0, 0
	}
	if size > orderedBytes {
		// One document past the bound by itself: its Send may flush at once, so its own
		// windows and manifest go first.
		if err := pub.Publish(ctx); err != nil {
			return err
		}
	}
	o.records += recs
	o.bytes += size
	return nil
}

// OrderedChunkSink keeps a chunk record (embed stage) from being acknowledged before the
// windows and manifest of its document.
type OrderedChunkSink struct {
	Inner connectors.ChunkSink
	// Pub is set before the first write (the worker's store is attached after the sinks are
	// made).
	Pub            *Publisher
	MaxRecordBytes int
	q              ordered
}

func (s *OrderedChunkSink) WriteChunks(ctx context.Context, c schemas.ChunkDoc) error {
	size := 256 + len(c.Keys)*8 + len(c.Embeddings)*4 + len(c.Title) + len(c.DocID) + len(c.Source)
	if err := s.q.before(ctx, s.Pub, s.MaxRecordBytes, size, s.Inner.Flush); err != nil {
		return err
	}
	return s.Inner.WriteChunks(ctx, c)
}

// Flush is called by the ledger after the cache's (the Publisher's) Flush.
func (s *OrderedChunkSink) Flush(ctx context.Context) error {
	if err := s.Inner.Flush(ctx); err != nil {
		return err
	}
	s.q = ordered{}
	return nil
}

// Close closes the inner sink; the ledger has committed or abandoned what it wrote.
func (s *OrderedChunkSink) Close(ctx context.Context) error { return s.Inner.Close(ctx) }

// OrderedVectorSink keeps a vector record (the kafka sink of stage process) from being
// acknowledged before the windows and manifest of its document, as OrderedChunkSink does for
// chunk records.
type OrderedVectorSink struct {
	Inner connectors.Sink
	// Pub returns the worker's publisher; it is attached before the sinks are opened.
	Pub            func() *Publisher
	MaxRecordBytes int
	q              ordered
}

var _ connectors.Sink = (*OrderedVectorSink)(nil)

// vectorRecordBytes bounds a vector record's size in any format: a float32 is 4 bytes in RPDV
// and at most 15 characters in JSON ("-1.17549435e-38" plus a comma), a string at most 6 times
// its bytes once escaped.
func vectorRecordBytes(v schemas.DocVector) int {
	return 512 + 16*(len(v.Vector)+len(v.GNVector)) + 6*(len(v.DocID)+len(v.Title)+len(v.Source)+len(v.Version)+len(v.Space))
}

func (s *OrderedVectorSink) pub() *Publisher {
	if s.Pub == nil {
		return nil
	}
	return s.Pub()
}

func (s *OrderedVectorSink) Write(ctx context.Context, v schemas.DocVector) error {
	if err := s.q.before(ctx, s.pub(), s.MaxRecordBytes, vectorRecordBytes(v), s.Inner.Flush); err != nil {
		return err
	}
	return s.Inner.Write(ctx, v)
}

// Flush is called by the ledger after the cache's (the Publisher's) Flush.
// Delete queues the deletion's tombstone like a vector record: counted into what the
// producer holds, so that the vector records queued before it are still never acknowledged
// before their windows and manifests.
func (s *OrderedVectorSink) Delete(ctx context.Context, d schemas.Deletion) error {
	if err := s.q.before(ctx, s.pub(), s.MaxRecordBytes, 512+len(d.DocID)+len(d.Source)+len(d.Version), s.Inner.Flush); err != nil {
		return err
	}
	return s.Inner.Delete(ctx, d)
}

func (s *OrderedVectorSink) Flush(ctx context.Context) error {
	if err := s.Inner.Flush(ctx); err != nil {
		return err
	}
	s.q = ordered{}
	return nil
}

func (s *OrderedVectorSink) Close(ctx context.Context) error { return s.Inner.Close(ctx) }
