package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/internal/kafkaadmin"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/cluster"
	"github.com/reignpipe/reignpipe/pipelines/engine/replica"
	"github.com/reignpipe/reignpipe/pipelines/quality/tune"
	"github.com/reignpipe/reignpipe/schemas"
)

// TestStoreCompactMaterializeRestore shares one corpus, one embedded run and one first worker
// between the store's recovery paths, against the real broker:
//
//   - the raw topic exists beforehand with 5 partitions where the pipeline says 3, and the
//     corpus goes through it (first ingest, and a re-ingest with 0 GN windows at the end);
//   - the store topics exist beforehand with eager compaction (segment.ms 100, dirty ratio 0.01,
//     delete.retention.ms 100); every window and manifest record is produced twice more, and the
//     test waits until the broker's log cleaner removed records (offset gaps: fewer records
//     readable than the end offsets); `materialize` into an empty directory then equals the
//     embedded run's cache;
//   - `train` on a copy of the materialised store sends 0 windows to the GN, and `reaggregate
//     --checkpoint` with the checkpoint it made gives bit-identical vectors on the materialised
//     store and on the embedded cache, and `tune --checkpoint` scores it the same on both;
//   - a worker SIGKILLed half-way through its restore (a checkpoint every record) resumes from
//     its checkpoint, reads only what follows it, and ends equal to the embedded cache.
func TestStoreCompactMaterializeRestore(t *testing.T) {
	s := newStoreSetup(t)
	ctx := context.Background()
	first, copies := storeCorpus(16)
	all := append(append([]schemas.Document{}, first...), copies...)
	embCache := embeddedStore(t, s, all)
	ec := openStore(t, embCache)
	distinct := ec.Stats().Rows
	ec.Close()

	cfgPath := s.storeConfig(t, "dist", "kafka", filepath.Join(s.dir, "unused-cache"), "  - {type: kafka}")
	cfg, err := pipelines.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	k := cfg.Transport.Kafka
	cc := kafkaclient.ClientConfig{Brokers: []string{s.brokers}}
	wBatch, mBatch, err := cluster.StoreMaxMessageBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	eager := func(maxBytes int64) map[string]string {
		return map[string]string{"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
			"delete.retention.ms": "100", "min.compaction.lag.ms": "0", "max.message.bytes": strconv.FormatInt(maxBytes, 10)}
	}
	if k.Partitions == 5 {
		t.Fatal("the raw topic must differ from transport.kafka.partitions")
	}
	if err := kafkaadmin.EnsureTopics(ctx, cc,
		kafkaadmin.TopicSpec{Name: k.RawTopic(), Partitions: 5, ReplicationFactor: 1},
		kafkaadmin.TopicSpec{Name: k.WindowsTopic(), Partitions: k.Partitions, ReplicationFactor: 1, Config: eager(wBatch)},
		kafkaadmin.TopicSpec{Name: k.ManifestsTopic(), Partitions: k.Partitions, ReplicationFactor: 1, Config: eager(mBatch)}); err != nil {
		t.Fatal(err)
	}

	// One worker ingests the corpus through the 5-partition raw topic.
	wa := s.startWorker(t, "embed-a", cfgPath, filepath.Join(s.dir, "cache-a"))
	produceRaw(t, s, first)
	waitDocs(t, []*worker{wa}, 0, int64(len(first)))
	produceRaw(t, s, copies)
	waitDocs(t, []*worker{wa}, 0, int64(len(all)))
	if g := wa.metric(t, "reignpipe_gn_windows_total"); g != distinct {
		t.Fatalf("the worker embedded %d windows; the corpus has %d distinct", g, distinct)
	}
	stop(t, wa.label, wa.cmd)

	// Duplicated production, then forced compaction.
	readable := map[string]int64{}
	for _, topic := range []string{k.WindowsTopic(), k.ManifestsTopic()} {
		before := readStoreTopic(t, cc, topic)
		if before.records != before.end || before.keys != before.records {
			t.Fatalf("%s before duplication: %+v (want one record per key, no gaps)", topic, before)
		}
		for pass := 0; pass < 2; pass++ {
			reproduce(t, cc, topic, before.recs)
			time.Sleep(300 * time.Millisecond) // past segment.ms: the next record rolls a new segment
		}
		// One more copy of one record per partition rolls the segments holding the duplicates,
		// which the cleaner can then compact (it never touches a partition's active segment).
		var rollers []kafkaclient.Record
		seen := map[kafkaclient.TP]bool{}
		for _, r := range before.recs {
			if !seen[r.TP] {
				seen[r.TP] = true
				rollers = append(rollers, r)
			}
		}
		reproduce(t, cc, topic, rollers)
		var after storeTopicState
		waitFor(t, topic+" compacted by the broker", 3*time.Minute, func() (bool, string) {
			after = readStoreTopic(t, cc, topic)
			// 3 copies of every key were written; compaction leaves the newest of each in the
			// cleaned segments, plus the roller in each partition's active segment.
			return after.records <= after.keys+int64(len(rollers)) && after.keys == before.keys,
				fmt.Sprintf("%d records readable for %d keys, end offsets %d", after.records, after.keys, after.end)
		})
		readable[topic] = after.records
		t.Logf("%s: %d keys; %d records written (%d, 2 copies, 1 roller per partition); after the log cleaner %d records are readable (%d offsets compacted away)",
			topic, after.keys, after.end, before.records, after.records, after.end-after.records)
	}

	// materialize into an empty directory: the embedded run's cache, key for key, bit for bit.
	mat := filepath.Join(s.dir, "materialized")
	out, err := exec.Command(s.bin, "materialize", "--cache-dir", mat, cfgPath).Output()
	if err != nil {
		t.Fatalf("materialize: %v\n%s", err, out)
	}
	var ms cluster.MaterializeSummary
	if err := json.Unmarshal(out, &ms); err != nil || ms.Stopped != "completed" || ms.WindowsApplied != distinct || ms.WindowConflicts != 0 || ms.Bad != 0 {
		t.Fatalf("materialize summary (%v):\n%s", err, out)
	}
	assertSameStore(t, embCache, mat)

	// train on (a copy of) the materialised store: every window is served from it.
	trainPython(t)
	trainCache := filepath.Join(s.dir, "train-cache")
	if b, err := exec.Command("cp", "-a", mat, trainCache).CombinedOutput(); err != nil {
		t.Fatalf("copying the store: %v\n%s", err, b)
	}
	data := filepath.Join(s.dir, "beir")
	writeStoreBEIR(t, data, first, copies)
	trainOut := filepath.Join(s.dir, "train")
	tcfg := s.storeConfig(t, "train", "embedded", trainCache, fmt.Sprintf("  - {type: parquet, dir: %q}", filepath.Join(s.dir, "train-vectors")))
	if b, err := exec.Command(s.bin, "train", "--data", data, "--out", trainOut, "--size", "tiny-l1", "--epochs", "1", tcfg, "--", "--threads", "2").CombinedOutput(); err != nil {
		t.Fatalf("train on the materialised store: %v\n%s", err, b)
	}
	var ts struct {
		Encode struct {
			Windows   int64 `json:"windows"`
			GNWindows int64 `json:"gn_windows"`
			GNShared  int64 `json:"gn_windows_shared"`
			CacheHits int64 `json:"cache_hits"`
		} `json:"encode"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(trainOut, "train-summary.json"))), &ts); err != nil {
		t.Fatal(err)
	}
	if ts.Encode.Windows == 0 || ts.Encode.GNWindows != 0 || ts.Encode.GNShared != 0 || ts.Encode.CacheHits != ts.Encode.Windows {
		t.Fatalf("train on the materialised store: %+v (want every window from the store, 0 to the GN)", ts.Encode)
	}
	t.Logf("train on the materialised store: %d windows, %d to the GN", ts.Encode.Windows, ts.Encode.GNWindows)

	// reaggregate --checkpoint on the materialised store and on the embedded cache.
	ckpt := filepath.Join(trainOut, "best")
	reagg := func(label, cache string) map[string]schemas.DocVector {
		c := s.storeConfig(t, "reagg-"+label, "embedded", cache, fmt.Sprintf("  - {type: parquet, dir: %q}", filepath.Join(s.dir, "unused-"+label)))
		dir := filepath.Join(s.dir, "reagg-"+label)
		if b, err := exec.Command(s.bin, "reaggregate", "--checkpoint", ckpt, "--out", dir, c).CombinedOutput(); err != nil {
			t.Fatalf("reaggregate %s: %v\n%s", label, err, b)
		}
		vs, err := vectorfile.Latest(dir)
		if err != nil {
			t.Fatal(err)
		}
		return vs
	}
	want, got := reagg("embedded", embCache), reagg("materialized", mat)
	if len(want) != len(all) || len(got) != len(want) {
		t.Fatalf("reaggregate: %d vectors from the materialised store, %d from the embedded cache, %d documents", len(got), len(want), len(all))
	}
	for id, w := range want {
		g := got[id]
		if g.Space != w.Space || !strings.HasPrefix(w.Space, "reign:") || len(g.Vector) != len(w.Vector) || g.ContentHash != w.ContentHash {
			t.Fatalf("%s: materialised %+v, embedded %+v", id, g, w)
		}
		for i := range w.Vector {
			if math.Float32bits(g.Vector[i]) != math.Float32bits(w.Vector[i]) {
				t.Fatalf("%s: component %d is %v from the materialised store, %v from the embedded cache", id, i, g.Vector[i], w.Vector[i])
			}
		}
	}
	t.Logf("reaggregate --checkpoint %s: %d vectors bit-identical (space %s)", filepath.Base(ckpt), len(want), want[all[0].ID].Space)

	// tune scores the same checkpoint on the materialised store as on the embedded cache: the
	// same test halves, the same figures, query by query, and no window to the GN.
	tuneOn := func(label, cache string) tune.Summary {
		c := s.storeConfig(t, "tune-"+label, "embedded", cache, fmt.Sprintf("  - {type: parquet, dir: %q}", filepath.Join(s.dir, "unused-"+label)))
		dir := filepath.Join(s.dir, "tune-"+label)
		if b, err := exec.Command(s.bin, "tune", "--checkpoint", ckpt, "--test-pct", "50", "--out", dir, c).CombinedOutput(); err != nil {
			t.Fatalf("tune %s: %v\n%s", label, err, b)
		}
		var ts tune.Summary
		if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "tune-summary.json"))), &ts); err != nil {
			t.Fatal(err)
		}
		return ts
	}
	tw, tg := tuneOn("embedded", embCache), tuneOn("materialized", mat)
	if tg.Figures == nil || tw.Figures == nil || *tg.Figures != *tw.Figures || tg.TestQueries != tw.TestQueries || tg.GNWindows != 0 ||
		fmt.Sprint(tg.PerQuery) != fmt.Sprint(tw.PerQuery) {
		t.Fatalf("tune --checkpoint: materialised %+v, embedded %+v", tg, tw)
	}
	t.Logf("tune --checkpoint on the materialised store: %d test queries, REIGN − mean-pool %+.4f, as on the embedded cache", tg.TestQueries, tg.Figures.Diff)

	// A worker killed half-way through its restore.
	end, err := kafkaclient.EndOffsets(ctx, cc, k.WindowsTopic())
	if err != nil {
		t.Fatal(err)
	}
	total := sumOffsets(end)
	cacheB := filepath.Join(s.dir, "cache-b")
	b1 := s.start(t, "embed-b", "embed", "--cache-dir", cacheB, "--metrics-addr", freeAddr(t), "--replica-max-lag", "0", "--replica-checkpoint-every", "1", cfgPath)
	var at int64
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if c, ok := readReplicaCheckpoint(t, cacheB); ok {
			if at = sumOffsets(c[k.WindowsTopic()]); at >= total/4 {
				if at > 3*total/4 {
					t.Fatalf("the restore was at %d of %d window records before it could be killed half-way", at, total)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no replica checkpoint after 3 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = b1.Process.Signal(syscall.SIGKILL)
	_ = b1.Wait()
	c, _ := readReplicaCheckpoint(t, cacheB)
	at = sumOffsets(c[k.WindowsTopic()])
	if at == 0 || at >= total {
		t.Fatalf("after SIGKILL the checkpoint is at %d of %d window records", at, total)
	}
	wb := &worker{label: "embed-b2", addr: freeAddr(t), cache: cacheB}
	wb.cmd = s.start(t, wb.label, "embed", "--cache-dir", cacheB, "--metrics-addr", wb.addr, "--replica-max-lag", "0", cfgPath)
	waitFor(t, "the restarted worker's metrics", 2*time.Minute, func() (bool, string) {
		_, ok := wb.tryMetrics()
		return ok, "down"
	})
	reread := wb.metric(t, "reignpipe_replica_windows_applied_total") + wb.metric(t, "reignpipe_replica_windows_known_total") + wb.metric(t, "reignpipe_window_conflicts_total")
	if reread == 0 || reread > total-at || reread >= readable[k.WindowsTopic()] {
		t.Fatalf("the restarted replica read %d window records; its checkpoint was at offset %d of %d, and the topic holds %d records (want at most %d, from the checkpoint on)",
			reread, at, total, readable[k.WindowsTopic()], total-at)
	}
	if log := readFile(t, filepath.Join(s.dir, wb.label+".log")); !strings.Contains(log, "replica resuming from its checkpoint") {
		t.Fatalf("the restarted worker did not resume from its checkpoint:\n%s", tail(log, 4000))
	}
	t.Logf("killed at %d of %d window records; the restart read %d records after its checkpoint", at, total, reread)

	// Re-ingest through the 5-partition raw topic: 0 GN windows.
	produceRaw(t, s, all)
	waitDocs(t, []*worker{wb}, 0, int64(len(all)))
	if g := wb.metric(t, "reignpipe_gn_windows_total"); g != 0 {
		t.Fatalf("re-ingesting through a raw topic of 5 partitions (transport.kafka.partitions 3) embedded %d windows (want 0)", g)
	}
	stop(t, wb.label, wb.cmd)
	assertSameStore(t, embCache, cacheB)
}

// storeTopicState is what a store topic holds: records readable from its first offset to its
// end offsets (compaction leaves gaps), distinct keys, and the records themselves.
type storeTopicState struct {
	end, records, keys int64
	recs               []kafkaclient.Record
}

func readStoreTopic(t *testing.T, cc kafkaclient.ClientConfig, topic string) storeTopicState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	end, err := kafkaclient.EndOffsets(ctx, cc, topic)
	if err != nil {
		t.Fatal(err)
	}
	st := storeTopicState{end: sumOffsets(end)}
	tl, err := kafkaclient.NewTail(ctx, cc, kafkaclient.TailOptions{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	left := map[kafkaclient.TP]bool{}
	for tp, e := range end {
		if e > 0 {
			left[tp] = true
		}
	}
	keys := map[string]bool{}
	for len(left) > 0 {
		r, err := tl.Next(ctx)
		if err != nil {
			t.Fatalf("reading %s: %v", topic, err)
		}
		st.records++
		keys[string(r.Key)] = true
		st.recs = append(st.recs, r)
		if r.Offset+1 >= end[r.TP] {
			delete(left, r.TP)
		}
	}
	st.keys = int64(len(keys))
	return st
}

// reproduce writes records again, as a retrying or re-embedding producer would.
func reproduce(t *testing.T, cc kafkaclient.ClientConfig, topic string, recs []kafkaclient.Record) {
	t.Helper()
	p, err := kafkaclient.NewProducer(cc, kafkaclient.ProducerOptions{Topic: topic, NoFragment: true, MaxRecordBytes: 900_000})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	for _, r := range recs {
		if err := p.Send(context.Background(), kafkaclient.Message{Key: string(r.Key), Value: r.Value, Headers: r.Headers}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func sumOffsets[K comparable](m map[K]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// readReplicaCheckpoint reads a replica's checkpoint file: topic -> partition -> next offset.
func readReplicaCheckpoint(t *testing.T, cacheDir string) (map[string]map[string]int64, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cacheDir, replica.CheckpointName))
	if err != nil {
		return nil, false
	}
	var c struct {
		Offsets map[string]map[string]int64 `json:"offsets"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("replica checkpoint: %v\n%s", err, b)
	}
	return c.Offsets, true
}

// writeStoreBEIR writes a BEIR directory over the store corpus: the corpus is the first half's
// documents, each query the text of its copy (so both sides' windows are in the store), its own
// document the positive; queries split 8/4/4 into train, val and test.
func writeStoreBEIR(t *testing.T, dir string, first, copies []schemas.Document) {
	t.Helper()
	var corpus, queries strings.Builder
	qrels := map[string]*strings.Builder{"train": {}, "val": {}, "test": {}}
	for i, d := range first {
		c, _ := json.Marshal(map[string]string{"_id": fmt.Sprintf("d%02d", i), "title": "", "text": d.Text})
		q, _ := json.Marshal(map[string]string{"_id": fmt.Sprintf("q%02d", i), "text": copies[i].Text})
		corpus.Write(append(c, '\n'))
		queries.Write(append(q, '\n'))
		split := "train"
		if i >= len(first)/2 {
			split = "val"
		}
		if i >= 3*len(first)/4 {
			split = "test"
		}
		fmt.Fprintf(qrels[split], "q%02d\td%02d\t2\n", i, i)
	}
	if err := os.MkdirAll(filepath.Join(dir, "qrels"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"corpus.jsonl": corpus.String(), "queries.jsonl": queries.String()}
	for s, b := range qrels {
		files["qrels/"+s+".tsv"] = "query-id\tcorpus-id\tscore\n" + b.String()
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
