package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	kafka "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/internal/kafkatest"
)

// produce writes docs [from, to) keyed "doc-<i>" with the same value, and flushes.
func produce(t *testing.T, ctx context.Context, p *Producer, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		k := fmt.Sprintf("doc-%d", i)
		if err := p.Send(ctx, Message{Key: k, Value: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func newConsumer(t *testing.T, cfg ClientConfig, group, topic string) *Consumer {
	t.Helper()
	c, err := NewConsumer(cfg, ConsumerOptions{Group: group, Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("closing consumer: %v", err)
		}
	})
	return c
}

// collector records what a consumer loop received.
type collector struct {
	mu    sync.Mutex
	count map[string]int // value -> times delivered
	parts map[int]bool   // partitions delivered from
	last  map[int]int64  // per partition: last offset, to check order within a generation
	gen   map[int]int32
	dis   []string // order violations
}

func newCollector() *collector {
	return &collector{count: map[string]int{}, parts: map[int]bool{}, last: map[int]int64{}, gen: map[int]int32{}}
}

func (c *collector) add(d Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count[string(d.Value)]++
	c.parts[d.Partition] = true
	if g, ok := c.gen[d.Partition]; ok && g == d.Generation && d.FirstOffset <= c.last[d.Partition] {
		c.dis = append(c.dis, fmt.Sprintf("partition %d: offset %d after %d in generation %d", d.Partition, d.FirstOffset, c.last[d.Partition], g))
	}
	c.gen[d.Partition], c.last[d.Partition] = d.Generation, d.Offset
}

func (c *collector) distinct(prefixFrom, prefixTo int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for i := prefixFrom; i < prefixTo; i++ {
		if c.count[fmt.Sprintf("doc-%d", i)] > 0 {
			n++
		}
	}
	return n
}

// loop runs c the way a pipeline does: Next, Ack, and Commit every 50 deliveries and when idle.
// It returns when ctx ends or Next fails, and reports Commit errors.
func loop(t *testing.T, ctx context.Context, c *Consumer, col *collector) {
	acked := 0
	for {
		nctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		d, err := c.Next(nctx)
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			if err := c.Commit(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("commit: %v", err)
			}
			continue
		case err != nil:
			return
		}
		col.add(d)
		c.Ack(d)
		if acked++; acked%50 == 0 {
			if err := c.Commit(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("commit: %v", err)
			}
		}
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func murmurPartition(key string, n int) int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(key)}, parts...)
}

func TestConsumerGroupExactlyOnce(t *testing.T) {
	cfg := brokerConfig(t)
	topic := newTopic(t, cfg, 4)
	group := "g-" + topic
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := NewProducer(cfg, ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	produce(t, ctx, p, 0, 1000)

	c1 := newConsumer(t, cfg, group, topic)
	col := newCollector()
	for col.distinct(0, 1000) < 1000 {
		d, err := c1.Next(ctx)
		if err != nil {
			t.Fatalf("after %d messages: %v", col.distinct(0, 1000), err)
		}
		if want := murmurPartition(d.Key, 4); d.Partition != want || string(d.Value) != d.Key {
			t.Fatalf("%s on partition %d, value %q; murmur2 places it on %d", d.Key, d.Partition, d.Value, want)
		}
		col.add(d)
		c1.Ack(d)
	}
	if err := c1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for v, n := range col.count {
		if n != 1 {
			t.Fatalf("%s delivered %d times", v, n)
		}
	}
	if len(col.dis) > 0 || len(col.parts) != 4 {
		t.Fatalf("order violations %v; partitions %v", col.dis, col.parts)
	}
	var total int64
	for part := range 4 {
		total += committedOffset(t, cfg, group, topic, part)
	}
	if total != 1000 {
		t.Fatalf("committed offsets sum to %d, want 1000", total)
	}
	waitFor(t, "lag 0", 10*time.Second, func() bool { return c1.Lag() == 0 })
	if err := c1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A new member of the group resumes after the commit: nothing again, then only new records.
	c2 := newConsumer(t, cfg, group, topic)
	nctx, ncancel := context.WithTimeout(ctx, 5*time.Second)
	d, err := c2.Next(nctx)
	ncancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after a full commit the group re-delivered %q (%v)", d.Value, err)
	}
	produce(t, ctx, p, 1000, 1010)
	for range 10 {
		d, err := c2.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		col.add(d)
		c2.Ack(d)
	}
	for v, n := range col.count {
		if n != 1 {
			t.Fatalf("%s delivered %d times", v, n)
		}
	}
	if col.distinct(1000, 1010) != 10 {
		t.Fatal("the new records were not all delivered")
	}
}

func TestConsumerRereadsUncommitted(t *testing.T) {
	cfg := brokerConfig(t)
	topic := newTopic(t, cfg, 4)
	group := "g-" + topic
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := NewProducer(cfg, ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	produce(t, ctx, p, 0, 400)

	c1 := newConsumer(t, cfg, group, topic)
	byPart := map[int][]Delivery{}
	for n := 0; n < 400; n++ {
		d, err := c1.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byPart[d.Partition] = append(byPart[d.Partition], d)
	}
	// Ack the first half of every partition, newest first, and commit; then ack the rest
	// without committing, as a process that dies before its outputs are durable.
	want := map[string]bool{}
	var rest []Delivery
	for _, ds := range byPart {
		half := len(ds) / 2
		for i := half - 1; i >= 0; i-- {
			c1.Ack(ds[i])
		}
		for _, d := range ds[half:] {
			want[string(d.Value)] = true
			rest = append(rest, d)
		}
	}
	if err := c1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range rest {
		c1.Ack(d)
	}
	if err := c1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	c2 := newConsumer(t, cfg, group, topic)
	got := map[string]bool{}
	for len(got) < len(want) {
		d, err := c2.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d re-reads: %v", len(got), len(want), err)
		}
		if !want[string(d.Value)] {
			t.Fatalf("%s was committed but delivered again", d.Value)
		}
		if got[string(d.Value)] {
			t.Fatalf("%s delivered twice to the second consumer", d.Value)
		}
		got[string(d.Value)] = true
	}
	nctx, ncancel := context.WithTimeout(ctx, 3*time.Second)
	defer ncancel()
	if d, err := c2.Next(nctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unexpected delivery %q (%v)", d.Value, err)
	}
}

func TestConsumerGroupSplitAndRebalance(t *testing.T) {
	cfg := brokerConfig(t)
	topic := newTopic(t, cfg, 4)
	group := "g-" + topic
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p, err := NewProducer(cfg, ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)

	a := newConsumer(t, cfg, group, topic)
	waitFor(t, "the first member to get all partitions", time.Minute, func() bool { return len(a.Assignment()[topic]) == 4 })
	b := newConsumer(t, cfg, group, topic)
	waitFor(t, "the partitions to split", time.Minute, func() bool {
		pa, pb := a.Assignment()[topic], b.Assignment()[topic]
		return len(pa) == 2 && len(pb) == 2 && !slices.ContainsFunc(pa, func(x int) bool { return slices.Contains(pb, x) })
	})
	pa, pb := a.Assignment()[topic], b.Assignment()[topic]
	t.Logf("split: a %v, b %v", pa, pb)

	colA, colB := newCollector(), newCollector()
	actx, acancel := context.WithCancel(ctx)
	bctx, bcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); loop(t, actx, a, colA) }()
	go func() { defer wg.Done(); loop(t, bctx, b, colB) }()
	defer func() { acancel(); bcancel(); wg.Wait() }()

	produce(t, ctx, p, 0, 1000)
	waitFor(t, "all 1000 messages", 2*time.Minute, func() bool {
		return colA.distinct(0, 1000)+colB.distinct(0, 1000) == 1000
	})
	colA.mu.Lock()
	for part := range colA.parts {
		if !slices.Contains(pa, part) {
			t.Errorf("a read partition %d, assigned %v", part, pa)
		}
	}
	colA.mu.Unlock()
	colB.mu.Lock()
	for part := range colB.parts {
		if !slices.Contains(pb, part) {
			t.Errorf("b read partition %d, assigned %v", part, pb)
		}
	}
	colB.mu.Unlock()
	colA.mu.Lock()
	colB.mu.Lock()
	for i := range 1000 {
		v := fmt.Sprintf("doc-%d", i)
		if n := colA.count[v] + colB.count[v]; n != 1 {
			t.Errorf("%s delivered %d times without a rebalance", v, n)
		}
	}
	colB.mu.Unlock()
	colA.mu.Unlock()
	if t.Failed() {
		t.FailNow()
	}

	// Phase 2: a leaves while records keep coming; b takes over its partitions from a's last
	// commit and nothing is lost.
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for i := 1000; i < 2000; i += 50 {
			if ctx.Err() != nil {
				return
			}
			for j := i; j < i+50; j++ {
				k := fmt.Sprintf("doc-%d", j)
				if err := p.Send(ctx, Message{Key: k, Value: []byte(k)}); err != nil {
					t.Errorf("send: %v", err)
					return
				}
			}
			if err := p.Flush(ctx); err != nil {
				t.Errorf("flush: %v", err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	waitFor(t, "a to read from the second phase", time.Minute, func() bool { return colA.distinct(1000, 2000) >= 50 })
	acancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	<-prodDone
	waitFor(t, "b to hold every partition", time.Minute, func() bool { return len(b.Assignment()[topic]) == 4 })
	waitFor(t, "every second-phase message", 2*time.Minute, func() bool {
		colA.mu.Lock()
		defer colA.mu.Unlock()
		colB.mu.Lock()
		defer colB.mu.Unlock()
		for i := 1000; i < 2000; i++ {
			v := fmt.Sprintf("doc-%d", i)
			if colA.count[v]+colB.count[v] == 0 {
				return false
			}
		}
		return true
	})
	dupes := 0
	colA.mu.Lock()
	colB.mu.Lock()
	for i := 1000; i < 2000; i++ {
		v := fmt.Sprintf("doc-%d", i)
		dupes += colA.count[v] + colB.count[v] - 1
	}
	dis := append(colA.dis, colB.dis...)
	colB.mu.Unlock()
	colA.mu.Unlock()
	if len(dis) > 0 {
		t.Fatalf("order violations: %v", dis)
	}
	t.Logf("second phase: %d duplicates (re-read after a's last commit); a stats %+v; b stats %+v", dupes, a.Stats(), b.Stats())
}

func TestConsumerStartLatest(t *testing.T) {
	cfg := brokerConfig(t)
	topic := newTopic(t, cfg, 2)
	group := "g-" + topic
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := NewProducer(cfg, ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	produce(t, ctx, p, 0, 20)
	c, err := NewConsumer(cfg, ConsumerOptions{Group: group, Topics: []string{topic}, StartOffset: "latest"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	// The first commit pins the resolved end of each partition.
	waitFor(t, "the start offsets to be committed", time.Minute, func() bool {
		if err := c.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return committedOffset(t, cfg, group, topic, 0) >= 0 && committedOffset(t, cfg, group, topic, 1) >= 0
	})
	if sum := committedOffset(t, cfg, group, topic, 0) + committedOffset(t, cfg, group, topic, 1); sum != 20 {
		t.Fatalf("latest start committed at offsets summing to %d, want 20", sum)
	}
	produce(t, ctx, p, 20, 25)
	for range 5 {
		d, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var i int
		if _, err := fmt.Sscanf(string(d.Value), "doc-%d", &i); err != nil || i < 20 {
			t.Fatalf("latest consumer read %q", d.Value)
		}
	}
}

// TestBrokerRestart keeps producing and consuming while the broker restarts: the producer
// retries its batches, the consumer rejoins, and every message arrives.
func TestBrokerRestart(t *testing.T) {
	cfg := brokerConfig(t)
	topic := newTopic(t, cfg, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := NewProducer(cfg, ProducerOptions{Topic: topic, RetryTimeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	c := newConsumer(t, cfg, "g-"+topic, topic)
	col := newCollector()
	lctx, lcancel := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); loop(t, lctx, c, col) }()
	defer func() { lcancel(); <-loopDone }()

	produce(t, ctx, p, 0, 100)
	waitFor(t, "the first 100", time.Minute, func() bool { return col.distinct(0, 100) == 100 })

	// Produce in small flushed batches until the restart is over and a little beyond, so that
	// some Flush meets the broker down.
	restarted := make(chan struct{})
	type result struct {
		n   int
		err error
	}
	prodDone := make(chan result, 1)
	go func() {
		i, after := 100, 0
		for after < 10 {
			select {
			case <-restarted:
				after++
			default:
			}
			for j := i; j < i+20; j++ {
				k := fmt.Sprintf("doc-%d", j)
				if err := p.Send(ctx, Message{Key: k, Value: []byte(k)}); err != nil {
					prodDone <- result{i, err}
					return
				}
			}
			i += 20
			if err := p.Flush(ctx); err != nil {
				prodDone <- result{i, err}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		prodDone <- result{i, nil}
	}()
	kafkatest.Restart(t)
	close(restarted)
	res := <-prodDone
	if res.err != nil {
		t.Fatalf("producing across the restart: %v", res.err)
	}
	if p.Stats().Retries == 0 {
		t.Fatal("no Flush met the broker down; the test did not exercise the restart")
	}
	waitFor(t, "every message after the restart", 2*time.Minute, func() bool { return col.distinct(0, res.n) == res.n })
	t.Logf("%d messages; producer %+v; consumer %+v", res.n, p.Stats(), c.Stats())
}
