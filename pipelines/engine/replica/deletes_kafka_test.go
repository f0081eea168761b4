package replica

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// TestStoreDeletions: deletions through the cluster store on the real broker. The publisher
// sends a tombstone only where the deletion removes what the store holds, in order with the
// manifests of one batch; a replica made from the topics afterwards holds exactly the live
// manifests, and keeps an older manifest that arrives after the tombstone out. The topic as
// compaction leaves it (last record per doc id) says the same.
func TestStoreDeletions(t *testing.T) {
	cc, topics := storeTopics(t, "store-del")
	sp := schemas.Space{Fingerprint: "fp-del", Dim: 2, K: 8, S: 8}
	open := func() *shardcache.Cache {
		c, err := shardcache.Open(shardcache.Options{Dir: t.TempDir(), Fingerprint: sp.Fingerprint, Dim: sp.Dim, K: sp.K, S: sp.S})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	producer := func(topic string) *kafkaclient.Producer {
		p, err := kafkaclient.NewProducer(cc, kafkaclient.ProducerOptions{Topic: topic, NoFragment: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close(context.Background()) })
		return p
	}
	cache := open()
	mp := producer(topics.Manifests)
	pub := NewPublisher(cache, producer(topics.Windows), mp, sp)
	man := func(id, version string) shardcache.Manifest {
		return shardcache.Manifest{DocID: id, Version: version, ContentHash: 7, Fingerprint: sp.Fingerprint, K: sp.K, S: sp.S, Keys: []uint64{1}, NTokens: 3}
	}
	del := func(id, version string) schemas.Deletion {
		return schemas.Deletion{DocID: id, Source: "t", Version: version}
	}
	if _, err := pub.Add(shardcache.Row{Key: 1, DocID: "t:1", NTokens: 3, Embedding: []float32{1, 0}}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []shardcache.Manifest{man("t:1", "1"), man("t:2", "1"), man("t:3", "5")} {
		if err := pub.PutManifest(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	// The second batch, in this order.
	for _, op := range []func() error{
		func() error { return pub.DeleteManifest(del("t:1", "1")) }, // removes v1: a tombstone
		func() error { return pub.DeleteManifest(del("t:3", "2")) }, // older than v5: nothing
		func() error { return pub.DeleteManifest(del("t:4", "1")) }, // never held: a tombstone
		func() error { return pub.DeleteManifest(del("t:2", "3")) }, // a tombstone...
		func() error { return pub.PutManifest(man("t:2", "2")) },    // ...that keeps v2 out
		func() error { return pub.PutManifest(man("t:5", "1")) },    // a manifest...
		func() error { return pub.DeleteManifest(del("t:5", "")) },  // ...and its deletion
	} {
		if err := op(); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	if st := pub.Stats(); st.ManifestsPublished != 4 || st.TombstonesPublished != 4 || st.ManifestsKnown != 2 {
		t.Fatalf("publisher stats %+v, want 4 manifests, 4 tombstones, 2 known", st)
	}
	live := map[string]string{"t:3": "5"}
	if got := manifests(t, cache, "t:1", "t:2", "t:3", "t:4", "t:5"); !reflect.DeepEqual(got, live) {
		t.Fatalf("the publisher's cache holds %v, want %v", got, live)
	}
	if got := compacted(t, cc, topics.Manifests); !reflect.DeepEqual(got, live) {
		t.Fatalf("the manifests topic as compaction leaves it holds %v, want %v", got, live)
	}

	// A late older manifest of a deleted document, written after the tombstone (a re-delivery
	// from a worker that had not seen the deletion): the replica keeps it out.
	late, err := ManifestMessage(man("t:1", "1"), sp, SpaceHeaders(sp))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := mp.Send(ctx, late); err != nil {
		t.Fatal(err)
	}
	if err := mp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	replicaCache := open()
	f, err := Start(ctx, Options{Client: cc, Topics: topics, Cache: replicaCache, Space: sp, Dir: t.TempDir(), FlushInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := f.CatchUp(cctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Stop(); err != nil {
		t.Fatal(err)
	}
	st := f.Stats()
	if got := manifests(t, replicaCache, "t:1", "t:2", "t:3", "t:4", "t:5"); !reflect.DeepEqual(got, live) {
		t.Fatalf("the replica holds %v, want %v (stats %+v)", got, live, st)
	}
	if st.ManifestsDeleted != 4 || st.ManifestsOlder != 1 || st.ManifestsApplied != 4 || st.Bad != 0 || st.Foreign != 0 {
		t.Fatalf("follower stats %+v: want 4 tombstones applied, the late manifest skipped, 4 manifests applied", st)
	}
}

// manifests is doc id → version of the manifests the cache holds among ids.
func manifests(t *testing.T, c *shardcache.Cache, ids ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, id := range ids {
		m, ok, err := c.Manifest(id)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			out[id] = m.Version
		}
	}
	return out
}

// compacted reads a manifests topic to its end as compaction leaves it: the last record of
// every doc id, none where that is a tombstone.
func compacted(t *testing.T, cc kafkaclient.ClientConfig, topic string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	end, err := kafkaclient.EndOffsets(ctx, cc, topic)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := kafkaclient.NewTail(ctx, cc, kafkaclient.TailOptions{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	left := 0
	for _, e := range end {
		left += int(e)
	}
	out := map[string]string{}
	for ; left > 0; left-- {
		r, err := tail.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Value == nil {
			if _, err := kafka.DeletionOf(string(r.Key), r.Headers); err != nil {
				t.Fatalf("tombstone %s: %v", r.Key, err)
			}
			delete(out, string(r.Key))
			continue
		}
		m, err := schemas.DecodeManifest(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		out[m.DocID] = m.Version
	}
	return out
}
