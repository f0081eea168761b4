package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	kafka "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/internal/kafkaclient/fragment"
	"github.com/reignpipe/reignpipe/internal/kafkaclient/offsets"
)

// ConsumerOptions configures a Consumer. Zero values take the documented defaults.
type ConsumerOptions struct {
	// Group is the consumer group id (required).
	Group string
	// Topics are read by the group (required).
	Topics []string
	// StartOffset is where a partition without a committed offset starts: "earliest"
	// (default) or "latest".
	StartOffset string
	// MaxFetchBytes bounds one fetch response per partition; default 10 MiB.
	MaxFetchBytes int
	// MaxMessageBytes bounds a reassembled logical message; a longer fragment sequence is
	// abandoned and counted. Default 256 MiB.
	MaxMessageBytes int
	// SessionTimeout is how long the group waits for a member that stopped heartbeating (a
	// crashed process, a broker restart that lost its session) before moving its partitions.
	// Default 10 s; the broker bounds it (group.min/max.session.timeout.ms, 6 s to 30 min by
	// default).
	SessionTimeout time.Duration
	Logger         *slog.Logger
}

const (
	// defaultMaxFetchBytes bounds one fetch response per partition, for the consumer and the
	// tail alike, unless their options set their own.
	defaultMaxFetchBytes   = 10 << 20
	defaultMaxMessageBytes = 256 << 20
	defaultSessionTimeout  = 10 * time.Second
	// fetchMaxWait bounds a fetch that waits for data; a partition reader notices the end of
	// its generation no later than this, and a rebalance waits for every reader to stop.
	fetchMaxWait = 500 * time.Millisecond
	// readerQueue is how many records a partition reader prefetches.
	readerQueue = 16
	// deliveryQueue is how many reassembled messages wait for Next across all partitions.
	deliveryQueue = 32
)

func (o *ConsumerOptions) setDefaults() error {
	if o.Group == "" {
		return errors.New("kafka consumer: Group is required")
	}
	if len(o.Topics) == 0 {
		return errors.New("kafka consumer: Topics is required")
	}
	seen := make(map[string]bool, len(o.Topics))
	for _, t := range o.Topics {
		if err := ValidTopicName(t); err != nil {
			return err
		}
		if seen[t] {
			return fmt.Errorf("kafka consumer: topic %s listed twice", t)
		}
		seen[t] = true
	}
	switch o.StartOffset {
	case "":
		o.StartOffset = "earliest"
	case "earliest", "latest":
	default:
		return fmt.Errorf("kafka consumer: StartOffset %q: want \"earliest\" or \"latest\"", o.StartOffset)
	}
	if o.MaxFetchBytes < 0 || o.MaxMessageBytes < 0 || o.SessionTimeout < 0 {
		return errors.New("kafka consumer: MaxFetchBytes, MaxMessageBytes and SessionTimeout must not be negative")
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = defaultSessionTimeout
	}
	if o.SessionTimeout < 2*time.Second {
		return fmt.Errorf("kafka consumer: SessionTimeout %s is shorter than 2s", o.SessionTimeout)
	}
	if o.MaxFetchBytes == 0 {
		o.MaxFetchBytes = defaultMaxFetchBytes
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = defaultMaxMessageBytes
	}
	o.Logger = orDefault(o.Logger)
	return nil
}

// Delivery is one logical message: its fragments reassembled, or the one record it was.
type Delivery struct {
	Topic       string
	Partition   int
	FirstOffset int64 // offset of its first record
	Offset      int64 // offset of its last record
	Key         string
	Value       []byte
	// Headers are those of the last record, without the fragment headers.
	Headers []kafka.Header
	// Generation is the consumer-group generation the delivery was read in.
	Generation int32
	// Lease ends when that generation does: the partition may then belong to another member,
	// which reads the delivery again from the last commit, and an ack of it is ignored.
	Lease context.Context

	part *offsets.Partition
}

// ConsumerStats counts since the consumer was created.
type ConsumerStats struct {
	Records    int64 // records fetched
	Deliveries int64 // logical messages returned by Next
	Abandoned  int64 // fragment sequences given up (cut off, interleaved, over MaxMessageBytes)
	Orphans    int64 // fragments read without the start of their sequence
	Restarts   int64 // sequences begun again from fragment 0 (a producer retry)
	Malformed  int64 // records with unparseable fragment headers, delivered as they are
	Stale      int64 // deliveries dropped, or acks ignored, because their generation ended (or acked twice)
	LostCommit int64 // commits refused because the generation had ended
}

// Consumer reads topics as a member of a consumer group, one reader per assigned partition.
type Consumer struct {
	opts   ConsumerOptions
	log    *slog.Logger
	rc     Resolved
	dialer *kafka.Dialer
	gcfg   kafka.ConsumerGroupConfig
	tr     offsets.Tracker
	asm    fragment.Counters
	out    chan Delivery

	ctx     context.Context // ends at Close; stops the group loop
	cancel  context.CancelFunc
	done    chan struct{} // closed by Close
	stopped chan struct{} // closed when the group loop and every reader have exited
	readers sync.WaitGroup
	once    sync.Once

	fatalOnce sync.Once
	fatalCh   chan struct{}
	fatal     error // set before fatalCh closes

	records, deliveries, stale, lostCommits atomic.Int64
}

// NewConsumer checks cfg and o and starts joining the group in the background; Next returns
// what the group's partitions hold once an assignment arrives. The group is joined only once
// every topic exists: a member that joined without a topic would not be assigned its
// partitions when the topic appears. A topic still missing after a minute makes Next fail.
//
// Partitions added to a topic while the group runs are read from the next rebalance on.
func NewConsumer(cfg ClientConfig, o ConsumerOptions) (*Consumer, error) {
	rc, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	start := kafka.FirstOffset
	if o.StartOffset == "latest" {
		start = kafka.LastOffset
	}
	dialer := rc.dialer()
	gcfg := kafka.ConsumerGroupConfig{
		ID:          o.Group,
		Brokers:     rc.brokers,
		Dialer:      dialer,
		Topics:      append([]string(nil), o.Topics...),
		StartOffset: start,
		// A third of the session, as Java clients do, so one lost heartbeat is not fatal.
		HeartbeatInterval: o.SessionTimeout / 3,
		SessionTimeout:    o.SessionTimeout,
		// Members rejoin as soon as their readers stop (within fetchMaxWait) and an in-flight
		// commit answers (within Timeout); the rest is margin for a loaded broker.
		RebalanceTimeout: 30 * time.Second,
		Timeout:          10 * time.Second,
		Logger:           kafkaLogger(o.Logger, "kafka-group"),
		ErrorLogger:      kafkaLogger(o.Logger, "kafka-group"),
	}
	// Validate fills in defaults, so it runs on a copy: the group is built later, in run.
	check := gcfg
	if err := check.Validate(); err != nil {
		return nil, fmt.Errorf("kafka consumer: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Consumer{
		opts: o, log: o.Logger, rc: rc, dialer: dialer, gcfg: gcfg,
		out: make(chan Delivery, deliveryQueue), ctx: ctx, cancel: cancel,
		done: make(chan struct{}), stopped: make(chan struct{}), fatalCh: make(chan struct{}),
	}
	go c.run()
	return c, nil
}

// run follows the group from generation to generation until Close or a fatal error. On exit
// it closes the group, which ends the last generation and leaves the group, and waits for the
// partition readers.
func (c *Consumer) run() {
	defer close(c.stopped)
	if err := awaitTopics(c.ctx, c.rc, c.opts.Topics, c.log); err != nil {
		if c.ctx.Err() == nil {
			c.setFatal(err)
		}
		return
	}
	group, err := kafka.NewConsumerGroup(c.gcfg)
	if err != nil {
		c.setFatal(fmt.Errorf("kafka consumer: %w", err))
		return
	}
	defer func() {
		_ = group.Close()
		c.readers.Wait()
	}()
	for {
		gen, err := group.Next(c.ctx)
		if err != nil {
			if c.ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			if fatalAuth(err) {
				c.setFatal(fmt.Errorf("kafka consumer: group %s: %w", c.opts.Group, err))
				return
			}
			level := slog.LevelWarn
			if errors.Is(err, kafka.RebalanceInProgress) {
				level = slog.LevelDebug
			}
			c.log.Log(c.ctx, level, "kafka consumer: joining the group failed; retrying",
				"group", c.opts.Group, "err", err)
			continue
		}
		c.startGeneration(gen)
	}
}

func (c *Consumer) setFatal(err error) {
	c.fatalOnce.Do(func() {
		c.fatal = err
		close(c.fatalCh)
	})
}

// startGeneration starts a reader per assigned partition, and a watcher that marks the
// generation stale when it ends. kafka-go ends a generation as soon as any function started on
// it returns, so these return only when the generation's context is done.
func (c *Consumer) startGeneration(gen *kafka.Generation) {
	assigned := make(map[TP]int64)
	var names []string
	for topic, as := range gen.Assignments {
		for _, a := range as {
			assigned[TP{Topic: topic, Partition: a.ID}] = a.Offset
			names = append(names, fmt.Sprintf("%s/%d", topic, a.ID))
		}
	}
	sort.Strings(names)
	g := c.tr.Begin(gen.ID, assigned, gen.CommitOffsets)
	c.log.Info("kafka consumer: joined generation", "group", c.opts.Group, "generation", gen.ID,
		"member", gen.MemberID, "partitions", names)
	// The deliveries' lease: it ends with the generation, once the tracker stops taking its
	// acks, so whoever holds a delivery can stop spending work on it.
	lease, endLease := context.WithCancel(context.Background())
	c.readers.Add(1)
	gen.Start(func(ctx context.Context) {
		defer c.readers.Done()
		<-ctx.Done()
		c.tr.End(g)
		endLease()
	})
	for tp, p := range g.Parts {
		off := assigned[tp]
		c.readers.Add(1)
		gen.Start(func(ctx context.Context) {
			defer c.readers.Done()
			c.readPartition(ctx, lease, p, off)
		})
	}
}

// readPartition reads one assigned partition from off (a committed offset, or
// kafka.FirstOffset/LastOffset when the group has none) until the generation ends.
func (c *Consumer) readPartition(ctx, lease context.Context, p *offsets.Partition, off int64) {
	log := c.log.With("topic", p.TP.Topic, "partition", p.TP.Partition, "generation", p.Gen.ID)
	start, ok := c.resolveStart(ctx, p.TP, off, log)
	if !ok || !c.tr.Start(p, start) {
		return
	}
	r := partitionReader(c.rc, c.dialer, p.TP.Topic, p.TP.Partition, c.opts.MaxFetchBytes, readerQueue, c.log, "kafka-reader")
	defer r.Close()
	if err := r.SetOffset(start); err != nil {
		c.setFatal(fmt.Errorf("kafka consumer: %s/%d: setting the start offset %d: %w", p.TP.Topic, p.TP.Partition, start, err))
		<-ctx.Done() // returning early would end the generation for the other partitions too
		return
	}
	asm := fragment.NewAssembler(c.opts.MaxMessageBytes, &c.asm)
	next := start
	for {
		m, err := fetchNext(ctx, r, &next, log, "kafka consumer", nil)
		if err != nil {
			if ctx.Err() == nil {
				c.setFatal(fmt.Errorf("kafka consumer: reading %s/%d: %w", p.TP.Topic, p.TP.Partition, err))
				<-ctx.Done()
			}
			return
		}
		p.Fetched.Store(next)
		p.High.Store(m.HighWaterMark)
		c.records.Add(1)
		a, whole := asm.Add(m)
		if !c.tr.Record(p, m.Offset, a, whole, asm.PendingFrom()) {
			return
		}
		if !whole {
			continue
		}
		d := Delivery{
			Topic: p.TP.Topic, Partition: p.TP.Partition, FirstOffset: a.First, Offset: a.Last,
			Key: string(a.Key), Value: a.Value, Headers: a.Headers, Generation: p.Gen.ID, Lease: lease, part: p,
		}
		select {
		case c.out <- d:
		case <-ctx.Done():
			return
		}
	}
}

// resolveStart turns kafka.FirstOffset/LastOffset into the partition's current first or last
// offset, so the watermark has a base and the first commit pins where reading began.
func (c *Consumer) resolveStart(ctx context.Context, tp TP, off int64, log *slog.Logger) (int64, bool) {
	if off >= 0 {
		return off, true
	}
	for attempt := 1; ; attempt++ {
		first, last, err := c.readOffsets(ctx, tp)
		if err == nil {
			if off == kafka.LastOffset {
				return last, true
			}
			return first, true
		}
		if fatalAuth(err) {
			c.setFatal(fmt.Errorf("kafka consumer: reading the offsets of %s/%d: %w", tp.Topic, tp.Partition, err))
			<-ctx.Done()
			return 0, false
		}
		log.Warn("kafka consumer: reading the partition's offsets failed; retrying", "attempt", attempt, "err", err)
		if !WaitRetry(ctx, attempt) {
			return 0, false
		}
	}
}

func (c *Consumer) readOffsets(ctx context.Context, tp TP) (first, last int64, err error) {
	for _, b := range c.rc.brokers {
		var conn *kafka.Conn
		conn, err = c.dialer.DialLeader(ctx, "tcp", b, tp.Topic, tp.Partition)
		if err != nil {
			continue
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		first, last, err = conn.ReadOffsets()
		_ = conn.Close()
		if err == nil {
			return first, last, nil
		}
	}
	return 0, 0, err
}

// Next blocks until a logical message is available, ctx ends (ctx.Err()), the consumer is
// closed (ErrClosed) or the group failed for good (authentication or authorization). It is
// called from one goroutine. Messages of a partition come in offset order; after a rebalance
// those after the last commit come again.
func (c *Consumer) Next(ctx context.Context) (Delivery, error) {
	for {
		// Checked first: select picks at random among ready cases, and buffered deliveries
		// must not come out after Close.
		select {
		case <-c.done:
			return Delivery{}, ErrClosed
		default:
		}
		select {
		case <-ctx.Done():
			return Delivery{}, ctx.Err()
		case <-c.done:
			return Delivery{}, ErrClosed
		case <-c.fatalCh:
			return Delivery{}, c.fatal
		case d := <-c.out:
			if !c.tr.Current(d.part) {
				c.stale.Add(1)
				continue
			}
			c.deliveries.Add(1)
			return d, nil
		}
	}
}

// Ack marks the records of d done; it does not block on the network and may be called from
// any goroutine, in any order. Nothing is committed until Commit. An ack of a generation that
// has ended is ignored: the partition's new owner re-reads from the last commit.
func (c *Consumer) Ack(d Delivery) {
	if d.part != nil && !c.tr.Ack(d.part, d.FirstOffset, d.Offset) {
		c.stale.Add(1)
	}
}

// generationOver recognises commit errors that mean the generation is no longer current.
func generationOver(err error) bool {
	return errors.Is(err, kafka.RebalanceInProgress) || errors.Is(err, kafka.IllegalGeneration) ||
		errors.Is(err, kafka.UnknownMemberId) || errors.Is(err, kafka.FencedInstanceID)
}

// Commit commits, for each partition of the current generation, the offset after its longest
// prefix of acked records, where that moved since the last commit. The owner calls it once the
// outputs derived from the acked deliveries are durable. It blocks until the group coordinator
// answers (each request is bounded by a 10 s network timeout that ctx cannot shorten),
// retrying transient failures until ctx ends. It returns nil, committing nothing, when the
// generation has ended: those records are re-read by the partitions' new owners.
func (c *Consumer) Commit(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		g, offs := c.tr.Pending()
		if g == nil {
			return nil
		}
		err := g.Commit(offs)
		c.tr.Done(g, offs, err == nil)
		switch {
		case err == nil:
			return nil
		case generationOver(err):
			c.lostCommits.Add(1)
			c.log.Info("kafka consumer: commit refused, the generation ended; the records will be read again",
				"group", c.opts.Group, "generation", g.ID, "err", err)
			return nil
		case !Transient(err):
			return fmt.Errorf("kafka consumer: committing offsets of group %s: %w", c.opts.Group, err)
		}
		c.log.Warn("kafka consumer: commit failed; retrying", "group", c.opts.Group, "attempt", attempt, "err", err)
		if !WaitRetry(ctx, attempt) {
			return ctx.Err()
		}
	}
}

// Lag is the sum over assigned partitions of high watermark minus next offset to fetch, as of
// each partition's last fetch. It is for metrics only and does not block on the network.
func (c *Consumer) Lag() int64 { return c.tr.Lag() }

// Assignment returns the partitions this member holds in the current generation, by topic;
// nil between generations (during a rebalance). It does not block on the network.
func (c *Consumer) Assignment() map[string][]int { return c.tr.Assignment() }

// Stats returns counters since the consumer was created; it does not block on the network.
func (c *Consumer) Stats() ConsumerStats {
	return ConsumerStats{
		Records:    c.records.Load(),
		Deliveries: c.deliveries.Load(),
		Abandoned:  c.asm.Abandoned.Load(),
		Orphans:    c.asm.Orphans.Load(),
		Restarts:   c.asm.Restarts.Load(),
		Malformed:  c.asm.Malformed.Load(),
		Stale:      c.stale.Load(),
		LostCommit: c.lostCommits.Load(),
	}
}

// Close stops the readers and leaves the group, so its partitions move to the other members at
// once. It does not commit: deliveries acked since the last Commit are read again by the next
// owner. It blocks until everything has stopped or ctx ends; in the latter case shutdown goes
// on in the background and a later Close waits for it again.
func (c *Consumer) Close(ctx context.Context) error {
	c.once.Do(func() {
		close(c.done)
		c.cancel()
	})
	select {
	case <-c.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
