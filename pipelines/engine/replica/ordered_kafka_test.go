package replica

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/reignpipe/reignpipe/internal/kafkaadmin"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// producerOwnFlush is internal/kafkaclient's autoFlushRecords: past that many queued records, a
// producer's Send flushes by itself, acknowledging them whatever the caller's order.
const producerOwnFlush = 1000

// queueSink stands for a kafka sink's producer: it counts what is queued since its last flush
// and, whenever it is flushed, asks check whether the records queued may be acknowledged now.
type queueSink struct {
	t       *testing.T
	queued  []string // doc ids since the last flush
	maxSeen int
	flushes int
	check   func(queued []string)
}

func (s *queueSink) Delete(_ context.Context, d schemas.Deletion) error {
	return s.queue(d.DocID)
}

func (s *queueSink) Write(_ context.Context, v schemas.DocVector) error {
	return s.queue(v.DocID)
}

// queue is a vector record or a tombstone queued in the producer.
func (s *queueSink) queue(id string) error {
	s.queued = append(s.queued, id)
	if len(s.queued) >= producerOwnFlush {
		s.t.Fatalf("%d vector records queued: the producer would have flushed them by itself, before their windows", len(s.queued))
	}
	s.maxSeen = max(s.maxSeen, len(s.queued))
	return nil
}

func (s *queueSink) Flush(context.Context) error {
	s.check(s.queued)
	s.queued = s.queued[:0]
	s.flushes++
	return nil
}

func (s *queueSink) Close(ctx context.Context) error { return s.Flush(ctx) }

// storeTopics makes a store's two compacted topics on the test broker.
func storeTopics(t *testing.T, name string) (kafkaclient.ClientConfig, Topics) {
	t.Helper()
	cc := kafkaclient.ClientConfig{Brokers: []string{kafkatest.Brokers(t)}}
	prefix := kafkatest.Topic(t, name)
	topics := Topics{Windows: prefix + ".windows", Manifests: prefix + ".manifests"}
	compact := map[string]string{"cleanup.policy": "compact"}
	if err := kafkaadmin.EnsureTopics(context.Background(), cc,
		kafkaadmin.TopicSpec{Name: topics.Windows, Partitions: 2, ReplicationFactor: 1, Config: compact},
		kafkaadmin.TopicSpec{Name: topics.Manifests, Partitions: 2, ReplicationFactor: 1, Config: compact}); err != nil {
		t.Fatal(err)
	}
	return cc, topics
}

func endOffsetSum(t *testing.T, cc kafkaclient.ClientConfig, topic string) int64 {
	t.Helper()
	end, err := kafkaclient.EndOffsets(context.Background(), cc, topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range end {
		n += e
	}
	return n
}

// TestOrderedVectorSinkAcksAfterStore: stage process writes a vector per document through the
// kafka sink between commits, and some deletions' tombstones among them; its producer flushes
// by itself past 1000 queued records. The ordered sink flushes it first, and only after the
// windows, then the manifests, of every queued vector are acknowledged on the store's topics
// (what Publisher.Publish does): a tombstone counts into the queue like a vector record.
func TestOrderedVectorSinkAcksAfterStore(t *testing.T) {
	cc, topics := storeTopics(t, "ordered")
	sp := schemas.Space{Fingerprint: "fp-ordered", Dim: 4, K: 8, S: 8}
	cache, err := shardcache.Open(shardcache.Options{Dir: t.TempDir(), Fingerprint: sp.Fingerprint, Dim: sp.Dim, K: sp.K, S: sp.S})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	wp, err := kafkaclient.NewProducer(cc, kafkaclient.ProducerOptions{Topic: topics.Windows, NoFragment: true})
	if err != nil {
		t.Fatal(err)
	}
	defer wp.Close(context.Background())
	mp, err := kafkaclient.NewProducer(cc, kafkaclient.ProducerOptions{Topic: topics.Manifests, NoFragment: true})
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close(context.Background())
	pub := NewPublisher(cache, wp, mp, sp)

	written := map[string]int{}         // doc id -> its index; document i has two windows
	rng := rand.New(rand.NewPCG(7, 11)) // window keys are hashes: uniform over 64 bits
	inner := &queueSink{t: t}
	inner.check = func(queued []string) {
		if len(queued) == 0 {
			return
		}
		pub.mu.Lock()
		rows, mans := len(pub.rows), len(pub.mans)
		pub.mu.Unlock()
		last := written[queued[len(queued)-1]]
		w, m := endOffsetSum(t, cc, topics.Windows), endOffsetSum(t, cc, topics.Manifests)
		if rows != 0 || mans != 0 || w < int64(2*(last+1)) || m < int64(last+1) {
			t.Fatalf("vector records up to document %d flushed while %d windows and %d manifests were unpublished (on the broker: %d windows, %d manifests)",
				last, rows, mans, w, m)
		}
	}
	sink := &OrderedVectorSink{Inner: inner, Pub: func() *Publisher { return pub }, MaxRecordBytes: 900_000}
	ctx := context.Background()
	const docs = 2600 // over two of the producer's own flush thresholds, no commit in between
	for i := 0; i < docs; i++ {
		id := fmt.Sprintf("t:%05d", i)
		written[id] = i
		keys := []uint64{rng.Uint64(), rng.Uint64()}
		for j, k := range keys {
			if _, err := pub.Add(shardcache.Row{Key: k, DocID: id, ChunkIndex: int32(j), NTokens: 8, Embedding: []float32{float32(i), float32(j), 1, 0}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := pub.PutManifest(shardcache.Manifest{DocID: id, Version: "1", ContentHash: uint64(i), Keys: keys}); err != nil {
			t.Fatal(err)
		}
		if err := sink.Write(ctx, schemas.DocVector{DocID: id, Version: "1", Space: "gn-meanpool:fp-ordered", Vector: []float32{1, 0, 0, 0}}); err != nil {
			t.Fatal(err)
		}
		if i%4 == 3 {
			// A deletion of an earlier document (its manifest deletion is the cache's part).
			if err := sink.Delete(ctx, schemas.Deletion{DocID: fmt.Sprintf("t:%05d", i-1), Version: "1"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The commit: store first (the runner flushes the cache, the Publisher, before the sinks).
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if inner.flushes < docs/orderedRecords || inner.maxSeen > orderedRecords {
		t.Fatalf("%d flushes of the vector producer, at most %d records queued", inner.flushes, inner.maxSeen)
	}
	if w, m := endOffsetSum(t, cc, topics.Windows), endOffsetSum(t, cc, topics.Manifests); w != 2*docs || m != docs {
		t.Fatalf("%d window and %d manifest records on the broker, want %d and %d", w, m, 2*docs, docs)
	}
	t.Logf("%d vectors written, the producer flushed %d times with at most %d queued, each time after the store", docs, inner.flushes, inner.maxSeen)
}
