package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
)

// dlWatch records, for each dead letter, how many inputs were acked when it was written.
type dlWatch struct {
	connectors.DeadLetterSink
	in          *fakeChunks
	ackedAtDead []int
}

func (w *dlWatch) WriteDeadLetter(ctx context.Context, d schemas.DeadLetter) error {
	if err := w.DeadLetterSink.WriteDeadLetter(ctx, d); err != nil {
		return err
	}
	w.ackedAtDead = append(w.ackedAtDead, w.in.acked)
	return nil
}

// A vector too large for one JSON record goes, on the real broker, to the dead-letter topic
// with the reason and stage "sink", is counted, its input is acked only after the dead letter is
// durable, and the stage carries on with the next document.
func TestAggregateOversizeJSONVectorIsDeadLettered(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	vectors, dead := kafkatest.Topic(t, "agg-vectors"), kafkatest.Topic(t, "agg-deadletter")
	kafkatest.CreateTopic(t, vectors, 2)
	kafkatest.CreateTopic(t, dead, 1)
	cfg := kafkaclient.ClientConfig{Brokers: []string{brokers}}
	vp, err := kafkaclient.NewProducer(cfg, kafkaclient.ProducerOptions{Topic: vectors, MaxRecordBytes: 64 << 10, NoFragment: true})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := kafka.NewVectorSinkFormat(vp, kafka.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	dp, err := kafkaclient.NewProducer(cfg, kafkaclient.ProducerOptions{Topic: dead})
	if err != nil {
		t.Fatal(err)
	}
	dlTopic := kafka.NewDeadLetterTopic(dp)
	defer dlTopic.Close(context.Background())

	doc := func(id, title string) schemas.ChunkDoc {
		return schemas.ChunkDoc{DocID: id, Title: title, Version: "1", Fingerprint: "fp", Dim: 2, K: 8, S: 8, Keys: []uint64{1, 2}, Embeddings: []float32{1, 0, 0, 1}}
	}
	in := &fakeChunks{docs: []schemas.ChunkDoc{doc("a", "small"), doc("b", strings.Repeat("long title ", 7000)), doc("c", "small")}}
	dl := &dlWatch{DeadLetterSink: dlTopic, in: in}
	mp, _ := aggregate.NewMeanPool(2, "fp")
	ctx, cancel := context.WithCancel(context.Background())
	var c engine.Counters
	done := make(chan error, 1)
	go func() {
		done <- Aggregate(ctx, AggregateParts{Input: in, Space: schemas.Space{Fingerprint: "fp", Dim: 2, K: 8, S: 8}, Aggregation: engine.Aggregation{Aggregator: mp},
			Sinks: []connectors.Sink{sink}, DeadLetter: dl}, LoopOptions{CommitEvery: 1}, &c)
	}()
	deadline := time.Now().Add(time.Minute)
	for c.Commits.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.InputsRead.Load() != 3 || c.DocsWritten.Load() != 2 || c.DeadLetters.Load() != 1 || dlTopic.Count() != 1 {
		t.Fatalf("inputs %d written %d dead letters %d (topic %d)", c.InputsRead.Load(), c.DocsWritten.Load(), c.DeadLetters.Load(), dlTopic.Count())
	}
	if in.acked != 3 || in.ackErrs != 1 || len(dl.ackedAtDead) != 1 || dl.ackedAtDead[0] != 1 {
		t.Fatalf("acked %d (%d with an error); inputs acked when the dead letter was durable: %v, want [1]", in.acked, in.ackErrs, dl.ackedAtDead)
	}

	kcat := testenv.Tool(t, "kcat", "kafkacat")
	read := func(topic string, n int) []string {
		out, err := exec.Command(kcat, "-C", "-b", brokers, "-t", topic, "-e", "-q", "-c", fmt.Sprint(n), "-f", "%k\x1e%h\x1e%s\n").Output()
		if err != nil {
			t.Fatalf("kcat %s: %v", topic, err)
		}
		return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	}
	var keys []string
	for _, line := range read(vectors, 2) {
		keys = append(keys, strings.SplitN(line, "\x1e", 2)[0])
	}
	if strings.Join(keys, ",") != "a,c" && strings.Join(keys, ",") != "c,a" {
		t.Fatalf("vector topic holds %v, want a and c", keys)
	}
	f := strings.SplitN(read(dead, 1)[0], "\x1e", 3)
	var rec schemas.DeadLetterRecord
	if err := json.Unmarshal([]byte(f[2]), &rec); err != nil {
		t.Fatal(err)
	}
	want := "exceeds transport.kafka.max_record_bytes=65536; format json is never fragmented"
	if f[0] != "b" || rec.DocID != "b" || rec.Stage != "sink" || !strings.HasPrefix(rec.Error, "vector record of ") || !strings.HasSuffix(rec.Error, want) ||
		!strings.Contains(f[1], "rp-stage=sink") {
		t.Fatalf("dead letter key %q headers %q value %+v", f[0], f[1], rec)
	}
	t.Logf("dead letter: %s", rec.Error)
}
