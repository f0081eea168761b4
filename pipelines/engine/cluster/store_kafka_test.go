package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkaadmin"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/pipelines/engine/replica"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// TestManifestBatchesFitTheTopic: with a manifest bound over the broker default, large
// manifests flushed together (one partition, so they share record batches) are all accepted by
// the manifests topic reignpipe creates: the producer's batches are bounded by BatchBytes (the
// largest manifest plus 100 000 bytes), and the topic's max.message.bytes is that plus the
// batch framing, not the largest manifest alone, which two manifests of half a batch exceed
// together. Keys are random, so zstd cannot shrink a batch below what the producer counted.
func TestManifestBatchesFitTheTopic(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	client := kafkaclient.ClientConfig{Brokers: strings.Split(brokers, ",")}
	cfg := kafkaConfig(t)
	k := &cfg.Transport.Kafka
	k.Brokers, k.Topics, k.Partitions = client.Brokers, kafkatest.Topic(t, "manifests"), 1
	cfg.Source.MaxDocBytes = 96 << 20
	bound, err := ManifestMaxBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if bound <= kafkaDefaultMaxMessageBytes {
		t.Fatalf("manifest bound %d is not over the broker default", bound)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := EnsureTopics(ctx, cfg, client); err != nil {
		t.Fatal(err)
	}
	e := &stageEnv{cfg: cfg, client: client, log: slog.Default()}
	wp, mp, err := e.storeProducers()
	if err != nil {
		t.Fatal(err)
	}
	defer wp.Close(context.Background())
	defer mp.Close(context.Background())
	got, err := kafkaadmin.TopicSettings(ctx, client, k.ManifestsTopic(), "max.message.bytes")
	if err != nil {
		t.Fatal(err)
	}
	limit, _ := strconv.ParseInt(got["max.message.bytes"], 10, 64)
	o := mp.Options()
	if int64(o.MaxRecordBytes) < bound || int64(o.BatchBytes)+batchFraming > limit {
		t.Fatalf("manifests producer: records up to %d bytes, batches up to %d; bound %d, topic max.message.bytes %d", o.MaxRecordBytes, o.BatchBytes, bound, limit)
	}

	sp := schemas.Space{Fingerprint: "fp-batches", Dim: 384, K: cfg.Chunking.K, S: cfg.Chunking.S}
	hs := replica.SpaceHeaders(sp)
	r := rand.New(rand.NewPCG(3, 5))
	// Two manifests of the largest size, then four of just under half a batch, which the
	// producer packs two to a batch: each such batch is larger than any one manifest can be.
	targets := []int{o.MaxRecordBytes, o.MaxRecordBytes, o.BatchBytes / 2, o.BatchBytes / 2, o.BatchBytes / 2, o.BatchBytes / 2}
	n := int64(len(targets))
	var sizes []int
	for i, size := range targets {
		m := shardcache.Manifest{DocID: fmt.Sprintf("t:%d", i), Version: "1", ContentHash: r.Uint64(), Fingerprint: sp.Fingerprint, K: sp.K, S: sp.S}
		for len(m.Keys)*8+4096 < size {
			m.Keys = append(m.Keys, r.Uint64())
		}
		msg, err := replica.ManifestMessage(m, sp, hs)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(msg.Value))
		if err := mp.Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := mp.Flush(ctx); err != nil {
		t.Fatalf("%d manifests of %v bytes in one flush (batches up to %d, topic max.message.bytes %d): %v", n, sizes, o.BatchBytes, limit, err)
	}
	end, err := kafkaclient.EndOffsets(ctx, client, k.ManifestsTopic())
	if err != nil {
		t.Fatal(err)
	}
	if e := end[kafkaclient.TP{Topic: k.ManifestsTopic(), Partition: 0}]; e != n {
		t.Fatalf("%d manifest records on the broker, want %d", e, n)
	}
	t.Logf("%d manifests of %v bytes acknowledged together; batches up to %d bytes, topic max.message.bytes %d", n, sizes, o.BatchBytes, limit)
}
