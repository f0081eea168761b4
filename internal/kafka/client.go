// Package kafka is the Kafka client layer of the distributed mode, on segmentio/kafka-go: a
// producer that splits large logical messages into fragments so that no record exceeds the
// broker's size limit, and a consumer-group reader that reassembles them and commits, per
// partition, only the contiguous prefix of records its owner has acked. Topics are created by
// package kafkaadmin.
//
// Delivery is at-least-once end to end. The producer retries whole batches, so records can be
// duplicated; the consumer re-reads everything after the last commit when a partition moves to
// another member. Fragment reassembly copes with both (see package fragment).
package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	kafka "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
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
// mechanism are loaded, ready to connect with (Resolve).
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

// dialer is what kafka-go's Conn-based parts (readers, consumer groups) connect with.
// Dialer is the dialer of the resolved TLS and SASL settings, for a reader of one partition.
func (r Resolved) Dialer() *kafka.Dialer {
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

// ErrClosed is returned by calls on a closed Producer or Consumer.
var ErrClosed = errors.New("kafka: closed")

// Transient reports whether err is worth retrying: the broker may come back, a leader may be
// elected, a topic just created may become visible. Anything else (authorization, a record
// over the size limit, a bad configuration) fails fast because retrying cannot fix it.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) {
		seen := false
		for _, e := range werrs {
			if e == nil {
				continue
			}
			if !Transient(e) {
				return false
			}
			seen = true
		}
		return seen
	}
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return kerr.Temporary()
	}
	// Client-side metadata gaps while a broker restarts or a leader is elected: the next
	// metadata refresh fills them.
	if errors.Is(err, protocol.ErrNoLeader) || errors.Is(err, protocol.ErrNoPartition) {
		return true
	}
	if fatalTLS(err) {
		return false
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// fatalTLS recognises certificate failures, which look like network errors but never heal
// by retrying, and a plaintext client answered in TLS by the broker.
func fatalTLS(err error) bool {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	return errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) ||
		errors.As(err, &header) || expectsTLS(err)
}

// expectsTLS: kafka-go saw a TLS record where a Kafka response belongs (it has no error type
// for it, only this wrapped text), so the listener speaks TLS and this client does not.
func expectsTLS(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) && strings.Contains(err.Error(), "broker appears to be expecting TLS")
}

// Kinds of SecurityFailure.
const (
	SecurityTLS       = "tls"        // the broker's certificate is not trusted, or not for this name
	SecurityNeedsTLS  = "needs-tls"  // the listener speaks TLS, the client does not
	SecurityAuth      = "sasl"       // the brokers refused the SASL credentials or mechanism
	SecurityForbidden = "authorized" // authenticated, but an ACL forbids the operation
)

// SecurityFailure tells what kind of security failure err is ("" for none), so that callers
// can say which setting to fix, and the broker's or the TLS stack's own words for it without
// the client library's call chain. None of them is retried.
func SecurityFailure(err error) (kind, detail string) {
	var kerr kafka.Error
	var verify *tls.CertificateVerificationError
	switch {
	case err == nil:
		return "", ""
	case expectsTLS(err):
		return SecurityNeedsTLS, "the broker answered in TLS"
	case fatalTLS(err):
		if errors.As(err, &verify) {
			return SecurityTLS, verify.Err.Error()
		}
		return SecurityTLS, err.Error()
	case errors.As(err, &kerr):
		// kafka-go writes "[code] Title: the broker's message"; keep it from the code on.
		detail = err.Error()
		if i := strings.Index(detail, fmt.Sprintf("[%d] ", int(kerr))); i >= 0 {
			detail = detail[i:]
		}
		switch kerr {
		case kafka.SASLAuthenticationFailed, kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState:
			return SecurityAuth, detail
		case kafka.TopicAuthorizationFailed, kafka.GroupAuthorizationFailed, kafka.ClusterAuthorizationFailed:
			return SecurityForbidden, detail
		}
	}
	return "", ""
}

// FatalAuth recognises errors a reader cannot recover from by retrying or rejoining
// (authentication, authorisation, TLS).
func FatalAuth(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		switch kerr {
		case kafka.SASLAuthenticationFailed, kafka.GroupAuthorizationFailed,
			kafka.TopicAuthorizationFailed, kafka.ClusterAuthorizationFailed,
			kafka.InvalidGroupId, kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState:
			return true
		}
	}
	return fatalTLS(err)
}

const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// Backoff is the wait before retry attempt n (1-based): exponential from backoffMin to
// backoffMax, with jitter so that clients that failed together do not retry together.
func Backoff(n int) time.Duration {
	d := backoffMin
	for i := 1; i < n && d < backoffMax; i++ {
		d *= 2
	}
	return min(d+rand.N(d/4+1), backoffMax)
}

// Sleep waits d or until ctx ends, reporting whether the full wait happened.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// OrDefault is l, or slog.Default() when l is nil.
func OrDefault(l *slog.Logger) *slog.Logger {
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

// PartitionReader reads one partition from the offset the caller sets, as this package's readers
// do: committed records only, fetches that wait at most fetchMaxWait, the package's backoff,
// kafka-go's own logging at Debug under component. The caller closes it.
func PartitionReader(rc Resolved, dialer *kafka.Dialer, topic string, partition, maxBytes, queue int, log *slog.Logger, component string) *kafka.Reader {
	return kafka.NewReader(kafka.ReaderConfig{
		Brokers: rc.brokers, Topic: topic, Partition: partition, Dialer: dialer,
		MinBytes: 1, MaxBytes: maxBytes, MaxWait: fetchMaxWait, QueueCapacity: queue,
		ReadBackoffMin: backoffMin, ReadBackoffMax: backoffMax, IsolationLevel: kafka.ReadCommitted,
		Logger: kafkaLogger(log, component), ErrorLogger: kafkaLogger(log, component),
	})
}
