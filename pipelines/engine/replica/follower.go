// Package replica makes a local chunk cache (stages/shardcache) a replica of the cluster's
// chunk store on Kafka: P.windows (one compacted record per window embedding, keyed by window
// key) and P.manifests (one compacted record per document version, keyed by doc id), the
// Kafka Streams global-table pattern with Kafka as the store of record.
//
// Follower applies both topics to the cache and checkpoints the offsets it applied; Publisher
// is the cache an embed worker's runner writes through, which puts a new window into the
// local cache only once the broker acknowledged it on P.windows, and a manifest only after its
// windows. Materialize and the replica stage (pipelines/engine/cluster) are a Follower without a
// runner.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// Topics names the store's two topics.
type Topics struct{ Windows, Manifests string }

// Options configure a Follower.
type Options struct {
	Client kafkaclient.ClientConfig
	Topics Topics
	Cache  *shardcache.Cache
	Space  schemas.Space
	// Dir is the cache directory, where the checkpoint file lives.
	Dir string
	// FlushInterval bounds how long applied records wait before the cache is flushed and the
	// checkpoint written (default 2 s); FlushRecords bounds how many (DefaultFlushRecords).
	FlushInterval time.Duration
	FlushRecords  int
	// MaxPendingManifests bounds the manifests read but held until the windows they name are
	// applied (default 4096): past it the manifest topic is not read, so memory stays bounded
	// while a fresh replica's window topic is far behind.
	MaxPendingManifests int
	Logger              *slog.Logger
}

// Stats are a follower's counters.
type Stats struct {
	WindowsApplied   int64 `json:"windows_applied"`   // new windows added to the store
	WindowsKnown     int64 `json:"windows_known"`     // already held, same bytes
	WindowConflicts  int64 `json:"window_conflicts"`  // already held with other bytes: the first is kept
	ManifestsApplied int64 `json:"manifests_applied"` // put (newest version of their doc so far)
	ManifestsOlder   int64 `json:"manifests_older"`   // older than the store's version, or than a deletion it remembers: skipped
	ManifestsDeleted int64 `json:"manifests_deleted"` // tombstones applied (the deletion of a document)
	Foreign          int64 `json:"records_foreign"`   // another space or schema: skipped
	Bad              int64 `json:"records_bad"`       // undecodable: skipped
	Flushes          int64 `json:"flushes"`
	Lag              int64 `json:"lag"` // records behind the end offsets last asked for
}

// DefaultFlushRecords is Options.FlushRecords when left 0.
const DefaultFlushRecords = 100_000

type pendingManifest struct {
	tp  kafkaclient.TP
	off int64
	m   shardcache.Manifest
	// del: a tombstone, the deletion of a document; held in order with the manifests.
	del *schemas.Deletion
	// skip: a record not applied (undecodable, foreign); queued so offsets advance in order.
	skip bool
}

// Follower keeps a cache in step with the two topics. Its goroutine is owned by the Follower:
// Stop ends it, flushes and checkpoints, and waits.
type Follower struct {
	o       Options
	log     *slog.Logger
	windows *kafkaclient.Tail
	mans    *kafkaclient.Tail

	stop   context.CancelFunc
	done   chan struct{}
	runErr error

	mu  sync.Mutex
	pos map[kafkaclient.TP]int64 // next offset to apply (applied in the cache, maybe not flushed)

	c struct {
		windows, known, conflicts, mans, older, deleted, foreign, bad, flushes, lag atomic.Int64
	}
}

// Start loads the checkpoint and starts following from it.
func Start(ctx context.Context, o Options) (*Follower, error) {
	if o.FlushInterval <= 0 {
		o.FlushInterval = 2 * time.Second
	}
	if o.FlushRecords <= 0 {
		o.FlushRecords = DefaultFlushRecords
	}
	if o.MaxPendingManifests <= 0 {
		o.MaxPendingManifests = 4096
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	start, err := loadCheckpoint(o.Dir)
	if err != nil {
		return nil, err
	}
	f := &Follower{o: o, log: o.Logger.With("replica", o.Dir), pos: map[kafkaclient.TP]int64{}, done: make(chan struct{})}
	if f.windows, err = kafkaclient.NewTail(ctx, o.Client, kafkaclient.TailOptions{Topics: []string{o.Topics.Windows}, Start: start, Logger: o.Logger}); err != nil {
		return nil, err
	}
	if f.mans, err = kafkaclient.NewTail(ctx, o.Client, kafkaclient.TailOptions{Topics: []string{o.Topics.Manifests}, Start: start, Logger: o.Logger}); err != nil {
		f.windows.Close()
		return nil, err
	}
	for _, tp := range append(f.windows.Parts(), f.mans.Parts()...) {
		f.pos[tp] = start[tp] // 0 when not in the checkpoint: the start of the log
	}
	if len(start) > 0 {
		f.log.Info("replica resuming from its checkpoint", "partitions", len(start))
	}
	rctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	go func() {
		defer close(f.done)
		f.runErr = f.run(rctx)
	}()
	return f, nil
}

// Stats returns the counters.
func (f *Follower) Stats() Stats {
	return Stats{
		WindowsApplied: f.c.windows.Load(), WindowsKnown: f.c.known.Load(), WindowConflicts: f.c.conflicts.Load(),
		ManifestsApplied: f.c.mans.Load(), ManifestsOlder: f.c.older.Load(), ManifestsDeleted: f.c.deleted.Load(), Foreign: f.c.foreign.Load(), Bad: f.c.bad.Load(),
		Flushes: f.c.flushes.Load(), Lag: f.c.lag.Load(),
	}
}

// Done is closed when the follower stopped (Stop, or a fatal error: see Err).
func (f *Follower) Done() <-chan struct{} { return f.done }

// Err is the fatal error that ended the follower, after Done.
func (f *Follower) Err() error { return f.runErr }

// Stop ends following, flushes the store and writes the checkpoint, and waits.
func (f *Follower) Stop() error {
	f.stop()
	<-f.done
	f.windows.Close()
	f.mans.Close()
	if errors.Is(f.runErr, context.Canceled) {
		return nil
	}
	return f.runErr
}

// CatchUp takes the topics' end offsets now and waits until the store has applied all but
// maxLag records of them (summed over the partitions), or ctx ends, or the follower fails.
// Manifests count as applied only once the windows they name are.
func (f *Follower) CatchUp(ctx context.Context, maxLag int64) error {
	end, err := kafkaclient.EndOffsets(ctx, f.o.Client, f.o.Topics.Windows, f.o.Topics.Manifests)
	if err != nil {
		return err
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	logged := time.Now()
	for {
		lag := f.lagTo(end)
		f.c.lag.Store(lag)
		if lag <= maxLag {
			return nil
		}
		if time.Since(logged) > 10*time.Second {
			logged = time.Now()
			f.log.Info("replica catching up", "records_behind", lag, "windows_applied", f.c.windows.Load(), "manifests_applied", f.c.mans.Load())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.done:
			if f.runErr != nil {
				return f.runErr
			}
			return errors.New("replica stopped")
		case <-t.C:
		}
	}
}

func (f *Follower) lagTo(end map[kafkaclient.TP]int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var lag int64
	for tp, e := range end {
		if p := f.pos[tp]; p < e {
			lag += e - p
		}
	}
	return lag
}

// Flushed makes everything applied so far durable and checkpoints it (what Stop does last).
func (f *Follower) flush() error {
	if err := f.o.Cache.Flush(); err != nil {
		return fmt.Errorf("replica: cache flush: %w", err)
	}
	f.mu.Lock()
	pos := make(map[kafkaclient.TP]int64, len(f.pos))
	for tp, p := range f.pos {
		pos[tp] = p
	}
	f.mu.Unlock()
	// Only after the flush: an offset in the checkpoint is a promise that everything before
	// it is in the store on disk.
	if err := saveCheckpoint(f.o.Dir, pos); err != nil {
		return fmt.Errorf("replica: checkpoint: %w", err)
	}
	f.c.flushes.Add(1)
	return nil
}

// run is the apply loop. Windows are applied as they come. A manifest is held until the
// windows it names are applied: its producer had them acknowledged on P.windows before it sent
// the manifest, so once this replica has applied P.windows up to the end offsets taken after
// the manifest was read (a fence), they are here. A manifest never names a window the replica
// lacks.
func (f *Follower) run(ctx context.Context) (err error) {
	var pending []pendingManifest
	var fence map[kafkaclient.TP]int64 // windows end offsets covering pending[:fenceN]
	fenceN := 0
	dirty, lastFlush := 0, time.Now()
	buf, held := make([]float32, f.o.Space.Dim), make([]float32, f.o.Space.Dim)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	defer func() {
		// Whatever was applied is made durable and checkpointed, also on a stop.
		if ferr := f.flush(); err == nil || errors.Is(err, context.Canceled) {
			if ferr != nil {
				err = ferr
			}
		}
	}()
	for {
		var mansC <-chan kafkaclient.Record
		if len(pending) < f.o.MaxPendingManifests {
			mansC = f.mans.Records()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-f.windows.Err():
			return err
		case err := <-f.mans.Err():
			return err
		case r := <-f.windows.Records():
			if err := f.applyWindow(r, buf, held); err != nil {
				return err
			}
			dirty++
		case r := <-mansC:
			// A skipped record queues too: its offset must not pass held manifests before it.
			p := f.decodeManifest(r)
			pending = append(pending, p)
			dirty++
		case <-tick.C:
			if fence == nil && len(pending) > 0 {
				end, err := kafkaclient.EndOffsets(ctx, f.o.Client, f.o.Topics.Windows)
				if err != nil {
					f.log.Warn("replica: reading the window topic's end offsets failed; manifests wait", "err", err)
				} else {
					fence, fenceN = end, len(pending)
				}
			}
			if fence != nil && f.lagTo(fence) == 0 {
				for _, p := range pending[:fenceN] {
					if err := f.applyManifest(p); err != nil {
						return err
					}
				}
				pending = append(pending[:0], pending[fenceN:]...)
				fence, fenceN = nil, 0
			}
			if dirty > 0 && time.Since(lastFlush) >= f.o.FlushInterval {
				if err := f.flush(); err != nil {
					return err
				}
				dirty, lastFlush = 0, time.Now()
			}
		}
		if dirty >= f.o.FlushRecords {
			if err := f.flush(); err != nil {
				return err
			}
			dirty, lastFlush = 0, time.Now()
		}
	}
}

func (f *Follower) setPos(tp kafkaclient.TP, next int64) {
	f.mu.Lock()
	f.pos[tp] = next
	f.mu.Unlock()
}

func header(hs []kafkago.Header, k string) string {
	for _, h := range hs {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// sameSpace checks a record's space headers against the store's.
func (f *Follower) sameSpace(hs []kafkago.Header, schema string) bool {
	sp := f.o.Space
	return header(hs, schemas.HeaderSchema) == schema && header(hs, schemas.HeaderGNFingerprint) == sp.Fingerprint &&
		header(hs, schemas.HeaderK) == strconv.Itoa(sp.K) && header(hs, schemas.HeaderS) == strconv.Itoa(sp.S) &&
		header(hs, schemas.HeaderDim) == strconv.Itoa(sp.Dim)
}

func (f *Follower) foreign(r kafkaclient.Record, why string) {
	if f.c.foreign.Add(1) <= 10 {
		f.log.Warn("replica: record skipped", "at", fmt.Sprintf("%s@%d", r.TP, r.Offset), "why", why)
	}
}

func (f *Follower) bad(r kafkaclient.Record, err error) {
	if f.c.bad.Add(1) <= 10 {
		f.log.Warn("replica: undecodable record skipped", "at", fmt.Sprintf("%s@%d", r.TP, r.Offset), "err", err)
	}
}

// applyWindow adds one window to the store; a key it already holds keeps its first bytes (a
// second GN pass gave other bits: another machine's kernels), and the difference is counted.
func (f *Follower) applyWindow(r kafkaclient.Record, buf, held []float32) error {
	defer f.setPos(r.TP, r.Offset+1)
	if r.Value == nil {
		f.foreign(r, "a tombstone: windows are never deleted from the store")
		return nil
	}
	if !f.sameSpace(r.Headers, schemas.SchemaWindow) {
		f.foreign(r, "not a window of this pipeline's GN space (schema, gn fingerprint, k, s, dim headers)")
		return nil
	}
	key, err := schemas.ParseWindowKey(string(r.Key))
	if err == nil {
		err = schemas.DecodeWindowValue(r.Value, buf)
	}
	if err != nil {
		f.bad(r, err)
		return nil
	}
	ci, _ := strconv.Atoi(header(r.Headers, schemas.HeaderChunkIndex))
	nt, _ := strconv.Atoi(header(r.Headers, schemas.HeaderNTokens))
	added, err := f.o.Cache.Add(shardcache.Row{Key: key, DocID: header(r.Headers, schemas.HeaderDocID), ChunkIndex: int32(ci), NTokens: int32(nt), Embedding: buf})
	if err != nil {
		return fmt.Errorf("replica: adding window %016x: %w", key, err)
	}
	if added {
		f.c.windows.Add(1)
		return nil
	}
	if hit, err := f.o.Cache.Get(key, held); err != nil || !hit || !sameBits(buf, held) {
		if f.c.conflicts.Add(1) <= 10 {
			f.log.Warn("replica: a window key arrived with other bytes than the store holds; the first is kept",
				"key", schemas.WindowKeyString(key), "at", fmt.Sprintf("%s@%d", r.TP, r.Offset), "read_err", err)
		}
		return nil
	}
	f.c.known.Add(1)
	return nil
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// decodeManifest reads a P.manifests record into what the replica applies in its turn: a
// manifest, a deletion (a tombstone), or a skip.
func (f *Follower) decodeManifest(r kafkaclient.Record) pendingManifest {
	p := pendingManifest{tp: r.TP, off: r.Offset, skip: true}
	if len(r.Value) == 0 {
		// A deletion is of the document whatever its space; one reignpipe wrote names the
		// space of its manifests, and one of another space is not this store's.
		if len(r.Headers) > 0 && !f.sameSpace(r.Headers, schemas.SchemaManifest) {
			f.foreign(r, "a tombstone of another GN space (schema, gn fingerprint, k, s, dim headers)")
			return p
		}
		d, err := kafka.DeletionOf(string(r.Key), r.Headers)
		if err != nil {
			f.bad(r, err)
			return p
		}
		p.del, p.skip = &d, false
		return p
	}
	if !f.sameSpace(r.Headers, schemas.SchemaManifest) {
		f.foreign(r, "not a manifest of this pipeline's GN space (schema, gn fingerprint, k, s, dim headers)")
		return p
	}
	sm, err := schemas.DecodeManifest(r.Value)
	if err == nil && sm.DocID != string(r.Key) {
		err = fmt.Errorf("record key %q is not the manifest's doc id %q", r.Key, sm.DocID)
	}
	if err != nil {
		f.bad(r, err)
		return p
	}
	p.m, p.skip = FromStore(sm), false
	return p
}

// applyManifest applies a tombstone (shardcache: the manifest goes unless newer, the deletion
// is remembered), or puts a manifest unless the store holds a newer version of its document
// (compaction keeps a doc id's last record, which a late re-delivery may have made an older
// version; replicas converge on the newest anyway).
func (f *Follower) applyManifest(p pendingManifest) error {
	defer f.setPos(p.tp, p.off+1)
	if p.skip {
		return nil
	}
	if p.del != nil {
		if err := f.o.Cache.DeleteManifest(*p.del); err != nil {
			return fmt.Errorf("replica: deleting the manifest of %s: %w", p.del.DocID, err)
		}
		f.c.deleted.Add(1)
		return nil
	}
	put, err := PutNewest(f.o.Cache, p.m)
	if err != nil {
		return fmt.Errorf("replica: manifest of %s: %w", p.m.DocID, err)
	}
	if put {
		f.c.mans.Add(1)
	} else {
		f.c.older.Add(1)
	}
	return nil
}

// PutNewest puts m unless the cache holds a newer version of its document, or remembers a
// deletion that supersedes m's version (an older manifest arriving after the tombstone).
func PutNewest(c *shardcache.Cache, m shardcache.Manifest) (bool, error) {
	old, ok, err := c.Manifest(m.DocID)
	if err != nil {
		return false, err
	}
	if ok && schemas.CompareVersions(m.Version, old.Version) < 0 {
		return false, nil
	}
	if err := c.PutManifest(m); errors.Is(err, shardcache.ErrSuperseded) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, nil
}

// FromStore and ToStore convert between the manifest record and the cache's manifest.
func FromStore(m schemas.StoreManifest) shardcache.Manifest {
	return shardcache.Manifest{DocID: m.DocID, Version: m.Version, ContentHash: m.ContentHash, Fingerprint: m.Fingerprint,
		K: m.K, S: m.S, Keys: m.Keys, Title: m.Title, Source: m.Source, NTokens: m.NTokens}
}

func ToStore(m shardcache.Manifest, dim int) schemas.StoreManifest {
	return schemas.StoreManifest{DocID: m.DocID, Version: m.Version, ContentHash: m.ContentHash, Fingerprint: m.Fingerprint,
		K: m.K, S: m.S, Dim: dim, Keys: m.Keys, Title: m.Title, Source: m.Source, NTokens: m.NTokens}
}
