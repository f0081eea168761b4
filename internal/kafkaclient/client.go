// Package kafkaclient is reignpipe's Kafka client, on segmentio/kafka-go. It holds what it
// takes to talk to a cluster as a client:
//
//   - how to reach and authenticate to it (ClientConfig: brokers, TLS, SASL), resolved once
//     so that a bad file or mechanism fails at startup (Resolve);
//   - a Producer that splits large logical messages into fragments so that no record exceeds
//     the broker's size limit;
//   - a Consumer, a consumer-group member that reassembles fragments and commits, per
//     partition, only the contiguous prefix of records its owner has acked;
//   - a Tail, which reads every partition of some topics with no group, the way a replica
//     follows the chunk store's compacted topics;
//   - which errors are worth retrying (Transient), which are security failures and which
//     setting they point at (SecurityFailure), and how long to wait between tries (WaitRetry).
//
// Topic administration (creating and checking topics, broker settings) is beside it, in
// package kafkaadmin, which connects through Resolve and retries by Transient and WaitRetry.
// The per-partition ack watermark is package offsets, the fragment wire format package
// fragment.
//
// Delivery is at-least-once end to end. The producer retries whole batches, so records can be
// duplicated; the consumer re-reads everything after the last commit when a partition moves to
// another member. Fragment reassembly copes with both (see package fragment).
package kafkaclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	kafka "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// ClientConfig says how to reach and authenticate to a Kafka cluster.
type ClientConfig struct {
	// Brokers are bootstrap addresses, "host:port".
	Brokers []string
	// ClientID names this client in broker logs and quotas; default "reignpipe".
	ClientID string
	// TLS nil means plaintext.
	TLS *TLSConfig
	// SASL nil means no authentication.
	SASL *SASLConfig
}

const defaultClientID = "reignpipe"

// dialTimeout bounds connecting (TCP, TLS and SASL) to one broker.
const dialTimeout = 10 * time.Second

// Validate checks the addresses and loads the TLS files, so a bad path or mechanism fails at
// startup rather than on the first connection. It does not connect.
func (c ClientConfig) Validate() error {
	_, err := c.Resolve()
	return err
}

// Resolved is a ClientConfig whose addresses are checked and whose TLS files and SASL
// mechanism are loaded, ready to connect with (Resolve). Its exported surface (Brokers,
// Transport) is what a kafka-go Client needs, for the requests this package does not make
// itself (topic administration: package kafkaadmin).
type Resolved struct {
	brokers  []string
	clientID string
	tls      *tls.Config
	sasl     sasl.Mechanism
}

// Resolve checks the addresses and loads the TLS files and SASL mechanism, without connecting.
func (c ClientConfig) Resolve() (Resolved, error) {
	if len(c.Brokers) == 0 {
		return Resolved{}, errors.New("kafka: no brokers configured")
	}
	for _, b := range c.Brokers {
		host, port, err := net.SplitHostPort(b)
		if err != nil {
			return Resolved{}, fmt.Errorf("kafka: broker address %q: %w", b, err)
		}
		if host == "" {
			return Resolved{}, fmt.Errorf("kafka: broker address %q has no host", b)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return Resolved{}, fmt.Errorf("kafka: broker address %q: port must be a number in 1..65535", b)
		}
	}
	r := Resolved{brokers: append([]string(nil), c.Brokers...), clientID: c.ClientID}
	if r.clientID == "" {
		r.clientID = defaultClientID
	}
	var err error
	if r.tls, err = c.TLS.build(); err != nil {
		return Resolved{}, err
	}
	if r.sasl, err = c.SASL.build(); err != nil {
		return Resolved{}, err
	}
	return r, nil
}

// dialer is what kafka-go's Conn-based parts (partition readers, consumer groups) connect
// with, in the resolved TLS and SASL settings.
func (r Resolved) dialer() *kafka.Dialer {
	return &kafka.Dialer{
		ClientID:      r.clientID,
		Timeout:       dialTimeout,
		DualStack:     true,
		KeepAlive:     30 * time.Second,
		TLS:           r.tls,
		SASLMechanism: r.sasl,
	}
}

// Brokers are the bootstrap addresses, "host:port"; the caller must not change the slice.
func (r Resolved) Brokers() []string { return r.brokers }

// Transport is what kafka-go's Writer and Client connect with. It pools connections: the
// owner calls CloseIdleConnections when done.
func (r Resolved) Transport() *kafka.Transport {
	return &kafka.Transport{
		ClientID:    r.clientID,
		DialTimeout: dialTimeout,
		IdleTimeout: 30 * time.Second,
		MetadataTTL: 6 * time.Second,
		TLS:         r.tls,
		SASL:        r.sasl,
	}
}

// partitionReader reads one partition from the offset the caller sets, as this package's
// readers (the consumer's and the tail's) do, so their settings cannot drift apart: committed
// records only, fetches that wait at most fetchMaxWait, the package's backoff, kafka-go's own
// logging at Debug under component. The caller closes it.
func partitionReader(rc Resolved, dialer *kafka.Dialer, topic string, partition, maxBytes, queue int, log *slog.Logger, component string) *kafka.Reader {
	return kafka.NewReader(kafka.ReaderConfig{
		Brokers: rc.brokers, Topic: topic, Partition: partition, Dialer: dialer,
		MinBytes: 1, MaxBytes: maxBytes, MaxWait: fetchMaxWait, QueueCapacity: queue,
		ReadBackoffMin: backoffMin, ReadBackoffMax: backoffMax, IsolationLevel: kafka.ReadCommitted,
		Logger: kafkaLogger(log, component), ErrorLogger: kafkaLogger(log, component),
	})
}

// orDefault is l, or slog.Default() when l is nil.
func orDefault(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}

// kafkaLogger routes kafka-go's printf logging to slog at Debug: kafka-go reports every retry
// it makes internally, and the outcomes that matter are logged by this package.
func kafkaLogger(l *slog.Logger, component string) kafka.Logger {
	return kafka.LoggerFunc(func(format string, args ...any) {
		if l.Enabled(context.Background(), slog.LevelDebug) {
			l.Debug(fmt.Sprintf(format, args...), "component", component)
		}
	})
}

// fetchNext is a partition reader's next message past *next, which it advances: what the
// consumer's and the tail's readers share. A fetch that fails is retried with backoff (and
// logged, what names the reader), unless mend, when set, takes the failure first -- handled
// true: mended, fetch again at once; a non-nil error: final. The error is ctx's when ctx ended,
// else a failure retrying cannot mend (authentication, authorization, or mend's). A message
// at an offset already handed over (the reader reconnected and read it again) is skipped.
func fetchNext(ctx context.Context, r *kafka.Reader, next *int64, log *slog.Logger, what string, mend func(error) (bool, error)) (kafka.Message, error) {
	for attempt := 0; ; {
		m, err := r.FetchMessage(ctx)
		if err == nil {
			if m.Offset < *next {
				continue
			}
			*next = m.Offset + 1
			return m, nil
		}
		if ctx.Err() != nil {
			return m, ctx.Err()
		}
		if fatalAuth(err) {
			return m, err
		}
		if mend != nil {
			if handled, ferr := mend(err); ferr != nil {
				return m, ferr
			} else if handled {
				continue
			}
		}
		attempt++
		log.Warn(what+": fetch failed; retrying", "offset", *next, "attempt", attempt, "err", err)
		if !WaitRetry(ctx, attempt) {
			return m, ctx.Err()
		}
	}
}
