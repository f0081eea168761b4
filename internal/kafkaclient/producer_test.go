package kafkaclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	kafka "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/internal/kafkaclient/fragment"
)

func testProducer(t *testing.T, maxRecord int) *Producer {
	t.Helper()
	p, err := NewProducer(ClientConfig{Brokers: []string{"127.0.0.1:9"}},
		ProducerOptions{Topic: "t", MaxRecordBytes: maxRecord})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.tr.CloseIdleConnections() })
	return p
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestBalancer(t *testing.T) {
	parts := []int{0, 1, 2, 3, 4, 5, 6, 7}
	p := testProducer(t, 10)
	for i := range 200 {
		key := fmt.Sprintf("doc-%d", i)
		recs, err := p.toRecords(Message{Key: key, Value: bytes.Repeat([]byte("x"), 35)})
		if err != nil {
			t.Fatal(err)
		}
		want := kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(key)}, parts...)
		for _, r := range recs {
			if got := (fragmentBalancer{}).Balance(r, parts...); got != want {
				t.Fatalf("%s: fragment went to %d, murmur2 places the key on %d", key, got, want)
			}
		}
	}
	// Keyless fragments of one message stay together; different messages spread.
	used := map[int]bool{}
	for range 100 {
		recs, err := p.toRecords(Message{Value: bytes.Repeat([]byte("x"), 35)})
		if err != nil {
			t.Fatal(err)
		}
		first := (fragmentBalancer{}).Balance(recs[0], parts...)
		for _, r := range recs[1:] {
			if got := (fragmentBalancer{}).Balance(r, parts...); got != first {
				t.Fatalf("keyless fragments split over partitions %d and %d", first, got)
			}
		}
		used[first] = true
	}
	if len(used) < 4 {
		t.Fatalf("keyless fragmented messages used only partitions %v", used)
	}
}

// murmur2Reference is Kafka's Utils.murmur2 with toPositive, transcribed from the Java client,
// to check that the balancer places keys where Java and librdkafka-murmur2 clients do.
func murmur2Reference(data []byte) int32 {
	const seed, m, r = uint32(0x9747b28c), uint32(0x5bd1e995), 24
	h := seed ^ uint32(len(data))
	n := len(data) / 4 * 4
	for i := 0; i < n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(data) % 4 {
	case 3:
		h ^= uint32(data[n+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[n+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[n])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h & 0x7fffffff)
}

func TestBalancerMatchesJavaMurmur2(t *testing.T) {
	parts := []int{0, 1, 2, 3, 4, 5}
	for _, key := range []string{"a", "ab", "abc", "abcd", "doc-42", "https://en.wikipedia.org/wiki/Kafka", "ünïcödé"} {
		want := int(murmur2Reference([]byte(key)) % int32(len(parts)))
		if got := (fragmentBalancer{}).Balance(kafka.Message{Key: []byte(key)}, parts...); got != want {
			t.Errorf("key %q: partition %d, Java's murmur2 gives %d", key, got, want)
		}
	}
}

func TestFragmentRoundTrip(t *testing.T) {
	const max = 1000
	p := testProducer(t, max)
	r := rand.New(rand.NewPCG(1, 2))
	userHeaders := []kafka.Header{{Key: "content-type", Value: []byte("application/json")}}
	for _, size := range []int{0, 1, max - 1, max, max + 1, 2*max - 1, 2 * max, 2*max + 1, 5*max + 17} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			value := randomBytes(r, size)
			recs, err := p.toRecords(Message{Key: "doc-1", Value: value, Headers: userHeaders})
			if err != nil {
				t.Fatal(err)
			}
			wantN := 1
			if size > max {
				wantN = (size + max - 1) / max
			}
			if len(recs) != wantN {
				t.Fatalf("%d records, want %d", len(recs), wantN)
			}
			ids := map[string]bool{}
			for i, rec := range recs {
				if len(rec.Value) > max {
					t.Fatalf("record %d holds %d bytes, over %d", i, len(rec.Value), max)
				}
				if string(rec.Key) != "doc-1" {
					t.Fatalf("record %d key %q", i, rec.Key)
				}
				info := fragment.Inspect(rec.Headers)
				if wantN == 1 {
					if info.Kind != fragment.Plain {
						t.Fatal("an unfragmented record carries fragment headers")
					}
					continue
				}
				if info.Kind != fragment.Part || info.Index != i || info.Count != wantN {
					t.Fatalf("record %d: fragment info %+v", i, info)
				}
				ids[info.ID] = true
			}
			if wantN > 1 && len(ids) != 1 {
				t.Fatalf("fragments carry %d ids, want 1", len(ids))
			}
			a := fragment.NewAssembler(1<<20, &fragment.Counters{})
			var out []fragment.Message
			for i, rec := range recs {
				rec.Offset = 100 + int64(i)
				if d, ok := a.Add(rec); ok {
					out = append(out, d)
				}
			}
			if len(out) != 1 {
				t.Fatalf("%d messages reassembled, want 1", len(out))
			}
			d := out[0]
			if !bytes.Equal(d.Value, value) || d.First != 100 || d.Last != 100+int64(wantN-1) {
				t.Fatalf("reassembled [%d,%d] %d bytes, want [100,%d] %d bytes", d.First, d.Last, len(d.Value), 100+wantN-1, size)
			}
			if len(d.Headers) != 1 || d.Headers[0].Key != "content-type" {
				t.Fatalf("headers %v, want only the user header", d.Headers)
			}
			if a.PendingFrom() != -1 {
				t.Fatal("assembler still holds a sequence")
			}
		})
	}
}

// TestFragmentValueCopied checks that Send's records do not alias the caller's buffer.
func TestFragmentValueCopied(t *testing.T) {
	p := testProducer(t, 1000)
	v := bytes.Repeat([]byte("a"), 2500)
	recs, err := p.toRecords(Message{Value: v})
	if err != nil {
		t.Fatal(err)
	}
	v[0], v[2499] = 'X', 'X'
	if recs[0].Value[0] != 'a' || recs[2].Value[len(recs[2].Value)-1] != 'a' {
		t.Fatal("records share memory with the caller's Value")
	}
}

func TestSendRejects(t *testing.T) {
	p := testProducer(t, 1000)
	ctx := context.Background()
	for _, h := range []string{fragment.HeaderIndex, fragment.HeaderID} {
		err := p.Send(ctx, Message{Key: "k", Value: []byte("v"), Headers: []kafka.Header{{Key: h, Value: []byte("0/2")}}})
		if err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("header %s: %v, want a reserved-header error", h, err)
		}
	}
	err := p.Send(ctx, Message{Key: strings.Repeat("k", maxRecordOverhead+1), Value: []byte("v")})
	if err == nil || !strings.Contains(err.Error(), "key and headers") {
		t.Errorf("oversized key: %v", err)
	}
	if n := len(p.pending); n != 0 {
		t.Fatalf("%d rejected messages were queued", n)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("closing an empty producer: %v", err)
	}
	if err := p.Send(ctx, Message{Value: []byte("v")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v, want ErrClosed", err)
	}
}

// Under NoFragment an oversize value is refused whole, with its size and the limit, and
// nothing is queued; a value at the limit still goes as one record.
func TestSendNoFragment(t *testing.T) {
	p, err := NewProducer(ClientConfig{Brokers: []string{"127.0.0.1:9"}},
		ProducerOptions{Topic: "t", MaxRecordBytes: 1000, NoFragment: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.tr.CloseIdleConnections() })
	ctx := context.Background()
	err = p.Send(ctx, Message{Key: "k", Value: make([]byte, 1001)})
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Bytes != 1001 || tl.Max != 1000 || tl.Topic != "t" {
		t.Fatalf("oversize value: %v, want a TooLargeError of 1001 > 1000 bytes", err)
	}
	if n := len(p.pending); n != 0 {
		t.Fatalf("%d refused messages were queued", n)
	}
	if err := p.Send(ctx, Message{Key: "k", Value: make([]byte, 1000)}); err != nil {
		t.Fatal(err)
	}
	if n := len(p.pending); n != 1 || len(p.pending[0].records) != 1 {
		t.Fatalf("a value at the limit must be queued as one record: %+v", p.pending)
	}
}

// closedPort returns a local address nothing listens on, so dialing it is refused at once.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestFlushKeepsMessagesWhenBrokerIsDown checks that an unreachable cluster is retried until
// RetryTimeout, that the messages are still queued afterwards, and that ctx cuts retries short.
func TestFlushKeepsMessagesWhenBrokerIsDown(t *testing.T) {
	p, err := NewProducer(ClientConfig{Brokers: []string{closedPort(t)}},
		ProducerOptions{Topic: "t", RetryTimeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		if err := p.Send(ctx, Message{Key: fmt.Sprint(i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	err = p.Flush(ctx)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "still failing") {
		t.Fatalf("Flush to a closed port: %v", err)
	}
	if took < time.Second || took > 30*time.Second {
		t.Fatalf("Flush gave up after %v, RetryTimeout is 1.5s", took)
	}
	if s := p.Stats(); s.Retries == 0 || s.Records != 0 {
		t.Fatalf("stats %+v: want retries and nothing acknowledged", s)
	}
	if err := p.Send(ctx, Message{Key: "3", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	keys := ""
	for _, m := range p.pending {
		keys += string(m.records[0].Key)
	}
	p.mu.Unlock()
	if keys != "0123" {
		t.Fatalf("queued after the failed Flush: %q, want the failed batch first, then the new message", keys)
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	if err := p.Flush(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with a short ctx: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("ctx did not stop the retries: %v", time.Since(start))
	}
	cctx2, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	if err := p.Close(cctx2); err == nil {
		t.Fatal("Close reported success with 4 messages undelivered")
	}
	if err := p.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close with messages left: %v, want ErrClosed", err)
	}
}

func TestLargeMessageFragmented(t *testing.T) {
	cfg := brokerConfig(t)
	topic := newTopic(t, cfg, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	big := make([]byte, 5_000_000)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range big {
		big[i] = byte(r.Uint32()) // incompressible, so compression cannot hide the size
	}
	// The broker's default limit is in force: the same value as one record is refused.
	// Its own transport: the default one is shared and may hold metadata older than the topic.
	rawTr := &kafka.Transport{}
	raw := &kafka.Writer{Addr: kafka.TCP(cfg.Brokers...), Topic: topic, BatchBytes: 10 << 20,
		RequiredAcks: kafka.RequireAll, MaxAttempts: 5, Transport: rawTr}
	err := raw.WriteMessages(ctx, kafka.Message{Value: big})
	raw.Close()
	rawTr.CloseIdleConnections()
	if !errors.Is(firstError(err), kafka.MessageSizeTooLarge) {
		t.Fatalf("a 5 MB record was not refused by the broker as too large: %v", err)
	}

	p, err := NewProducer(cfg, ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	hdr := []kafka.Header{{Key: "content-type", Value: []byte("application/octet-stream")}}
	if err := p.Send(ctx, Message{Key: "big-doc", Value: big, Headers: hdr}); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(ctx, Message{Key: "small-doc", Value: []byte("small")}); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Messages != 2 || s.Records != 7 || s.Fragments != 6 || s.Bytes != 5_000_005 {
		t.Fatalf("producer stats %+v, want 2 messages in 7 records, 6 of them fragments", s)
	}

	// The records as any client sees them: six fragments under the limit, then a plain one.
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: cfg.Brokers, Topic: topic, Partition: 0, MaxBytes: 10 << 20,
		MaxWait: 500 * time.Millisecond})
	defer rd.Close()
	var id string
	for i := range 7 {
		m, err := rd.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		info := fragment.Inspect(m.Headers)
		if i == 6 {
			if info.Kind != fragment.Plain || string(m.Value) != "small" {
				t.Fatalf("last record: %+v %q", info, m.Value)
			}
			break
		}
		if info.Kind != fragment.Part || info.Index != i || info.Count != 6 || len(m.Value) > defaultMaxRecordBytes || string(m.Key) != "big-doc" {
			t.Fatalf("record %d: %+v, %d bytes, key %q", i, info, len(m.Value), m.Key)
		}
		if id != "" && info.ID != id {
			t.Fatalf("fragment %d has id %s, fragment 0 had %s", i, info.ID, id)
		}
		id = info.ID
	}

	c, err := NewConsumer(cfg, ConsumerOptions{Group: "g-" + topic, Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	d, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(d.Value, big) || d.Key != "big-doc" || d.FirstOffset != 0 || d.Offset != 5 {
		t.Fatalf("reassembled %q [%d,%d] %d bytes, want big-doc [0,5] %d bytes", d.Key, d.FirstOffset, d.Offset, len(d.Value), len(big))
	}
	if len(d.Headers) != 1 || d.Headers[0].Key != "content-type" {
		t.Fatalf("headers %v, want only content-type", d.Headers)
	}
	d2, err := c.Next(ctx)
	if err != nil || string(d2.Value) != "small" || d2.FirstOffset != 6 || d2.Offset != 6 {
		t.Fatalf("second delivery %+v, %v", d2, err)
	}
	c.Ack(d2)
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := committedOffset(t, cfg, "g-"+topic, topic, 0); got != 0 {
		t.Fatalf("committed %d with the big message unacked, want 0", got)
	}
	c.Ack(d)
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := committedOffset(t, cfg, "g-"+topic, topic, 0); got != 7 {
		t.Fatalf("committed %d after acking both, want 7", got)
	}
	if s := c.Stats(); s.Deliveries != 2 || s.Records != 7 || s.Abandoned != 0 || s.Orphans != 0 {
		t.Fatalf("consumer stats %+v", s)
	}
}

// committedOffset asks the broker for the group's committed offset (-1 when none).
func committedOffset(t *testing.T, cfg ClientConfig, group, topic string, partition int) int64 {
	t.Helper()
	rc, _ := cfg.Resolve()
	tr := rc.Transport()
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(rc.brokers...), Transport: tr}
	resp, err := client.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{
		GroupID: group, Topics: map[string][]int{topic: {partition}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range resp.Topics[topic] {
		if p.Partition == partition {
			if p.Error != nil {
				t.Fatal(p.Error)
			}
			return p.CommittedOffset
		}
	}
	return -1
}

// TestKcatInterop reads records produced by kcat (librdkafka, murmur2 partitioner) and checks
// that they arrive as plain deliveries on the partitions this package's producer would choose.
func TestKcatInterop(t *testing.T) {
	cfg := brokerConfig(t)
	bin, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed")
	}
	topic := newTopic(t, cfg, 4)
	var in strings.Builder
	for i := range 50 {
		fmt.Fprintf(&in, "doc-%d:value-%d\n", i, i)
	}
	cmd := exec.Command(bin, "-b", strings.Join(cfg.Brokers, ","), "-t", topic, "-P", "-K:",
		"-X", "partitioner=murmur2_random")
	cmd.Stdin = strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newConsumer(t, cfg, "g-"+topic, topic)
	seen := map[string]bool{}
	for len(seen) < 50 {
		d, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := (fragmentBalancer{}).Balance(kafka.Message{Key: []byte(d.Key)}, 0, 1, 2, 3); d.Partition != want {
			t.Fatalf("kcat put %s on partition %d, this producer would use %d", d.Key, d.Partition, want)
		}
		if "value-"+strings.TrimPrefix(d.Key, "doc-") != string(d.Value) || d.FirstOffset != d.Offset {
			t.Fatalf("delivery %+v", d)
		}
		seen[d.Key] = true
	}
}

// TestProducerConcurrentAndCodecs sends from several goroutines at once, with each codec, a mix
// of fragmented incompressible values and small records in the same batches, and checks that
// the broker takes every batch (none over its 1 MB limit) and every message arrives whole.
func TestProducerConcurrentAndCodecs(t *testing.T) {
	cfg := brokerConfig(t)
	for _, codec := range []string{"zstd", "lz4", "snappy", "gzip", "none"} {
		t.Run(codec, func(t *testing.T) {
			topic := newTopic(t, cfg, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p, err := NewProducer(cfg, ProducerOptions{Topic: topic, Compression: codec})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]byte{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(w), 9))
					for i := range 60 {
						key := fmt.Sprintf("w%d-%d", w, i)
						size := 100 + r.IntN(2000)
						if i%20 == 0 {
							size = 1_500_000 + r.IntN(1_000_000)
						}
						v := randomBytes(r, size)
						mu.Lock()
						want[key] = v
						mu.Unlock()
						if err := p.Send(ctx, Message{Key: key, Value: v}); err != nil {
							t.Error(err)
							return
						}
						if i%25 == 24 {
							if err := p.Flush(ctx); err != nil {
								t.Error(err)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if t.Failed() {
				return
			}
			c := newConsumer(t, cfg, "g-"+topic, topic)
			got := 0
			for got < len(want) {
				d, err := c.Next(ctx)
				if err != nil {
					t.Fatalf("after %d of %d: %v", got, len(want), err)
				}
				if !bytes.Equal(d.Value, want[d.Key]) {
					t.Fatalf("%s: %d bytes differ from the %d sent", d.Key, len(d.Value), len(want[d.Key]))
				}
				delete(want, d.Key)
				got++
			}
			if s := c.Stats(); s.Abandoned != 0 || s.Orphans != 0 {
				t.Fatalf("consumer stats %+v", s)
			}
		})
	}
}
