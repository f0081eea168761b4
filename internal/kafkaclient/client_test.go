package kafkaclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	kafka "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	kafkaproduce "github.com/segmentio/kafka-go/protocol/produce"
)

func TestTransient(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"leader moved", kafka.NotLeaderForPartition, true},
		{"topic not visible yet", fmt.Errorf("wrapped: %w", kafka.UnknownTopicOrPartition), true},
		{"not enough replicas", kafka.NotEnoughReplicas, true},
		{"record too large", kafka.MessageSizeTooLarge, false},
		{"not authorized", kafka.TopicAuthorizationFailed, false},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"unexpected eof", io.ErrUnexpectedEOF, true},
		{"write errors all transient", kafka.WriteErrors{nil, kafka.LeaderNotAvailable, kafka.RequestTimedOut}, true},
		{"write errors with a permanent one", kafka.WriteErrors{kafka.LeaderNotAvailable, kafka.MessageSizeTooLarge}, false},
		{"write errors all nil", kafka.WriteErrors{nil, nil}, false},
		{"unknown authority", &net.OpError{Op: "remote error", Err: x509.UnknownAuthorityError{}}, false},
		{"no leader during a restart", kafka.WriteErrors{kafkaproduce.NewError(protocol.ErrNoLeader)}, true},
		{"partition not in metadata yet", fmt.Errorf("x: %w", protocol.ErrNoPartition), true},
		{"plain error", errors.New("boom"), false},
		{"SASL refused", fmt.Errorf("kafka.(*Client).Metadata: %w: invalid credentials", kafka.SASLAuthenticationFailed), false},
		{"plaintext to a TLS listener", fmt.Errorf("x: %w", fmt.Errorf("%w: broker appears to be expecting TLS", io.ErrUnexpectedEOF)), false},
		{"certificate for another name", &tls.CertificateVerificationError{Err: x509.HostnameError{Host: "kafka.example"}}, false},
	}
	for _, tc := range cases {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: transient = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	prevMax := time.Duration(0)
	for n := 1; n <= 12; n++ {
		for range 50 {
			d := backoff(n)
			if d < backoffMin || d > backoffMax {
				t.Fatalf("backoff(%d) = %v outside [%v, %v]", n, d, backoffMin, backoffMax)
			}
			prevMax = max(prevMax, d)
		}
	}
	if backoff(1) > backoffMin*5/4 {
		t.Fatalf("first backoff %v, want about %v", backoff(1), backoffMin)
	}
	if prevMax < backoffMax*3/4 {
		t.Fatalf("backoff never grew past %v", prevMax)
	}
}

func TestProducerOptions(t *testing.T) {
	cfg := ClientConfig{Brokers: []string{"127.0.0.1:9"}}
	cases := []struct {
		name string
		o    ProducerOptions
		want string
	}{
		{name: "defaults", o: ProducerOptions{Topic: "docs"}},
		{name: "every codec", o: ProducerOptions{Topic: "docs", Compression: "LZ4"}},
		{name: "none", o: ProducerOptions{Topic: "docs", Compression: "none"}},
		{name: "no topic", o: ProducerOptions{}, want: "invalid topic"},
		{name: "bad topic", o: ProducerOptions{Topic: "a b"}, want: "invalid topic"},
		{name: "unknown codec", o: ProducerOptions{Topic: "docs", Compression: "brotli"}, want: "unknown compression"},
		{name: "negative record size", o: ProducerOptions{Topic: "docs", MaxRecordBytes: -1}, want: "negative"},
		{name: "negative retry", o: ProducerOptions{Topic: "docs", RetryTimeout: -time.Second}, want: "negative"},
		{name: "batch smaller than a record", o: ProducerOptions{Topic: "docs", BatchBytes: 500_000}, want: "cannot hold"},
		{name: "bad client", o: ProducerOptions{Topic: "docs"}, want: "no brokers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.name == "bad client" {
				c = ClientConfig{}
			}
			p, err := NewProducer(c, tc.o)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if p.opts.MaxRecordBytes != defaultMaxRecordBytes || p.opts.BatchBytes != defaultMaxRecordBytes+100_000 {
					t.Errorf("defaults not applied: %+v", p.opts)
				}
				_ = p.Close(context.Background())
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestConsumerOptions(t *testing.T) {
	cases := []struct {
		name string
		o    ConsumerOptions
		want string
	}{
		{name: "no group", o: ConsumerOptions{Topics: []string{"t"}}, want: "Group"},
		{name: "no topics", o: ConsumerOptions{Group: "g"}, want: "Topics"},
		{name: "bad topic", o: ConsumerOptions{Group: "g", Topics: []string{"t", ""}}, want: "invalid topic"},
		{name: "topic twice", o: ConsumerOptions{Group: "g", Topics: []string{"t", "t"}}, want: "twice"},
		{name: "bad start", o: ConsumerOptions{Group: "g", Topics: []string{"t"}, StartOffset: "newest"}, want: "StartOffset"},
		{name: "negative fetch", o: ConsumerOptions{Group: "g", Topics: []string{"t"}, MaxFetchBytes: -1}, want: "negative"},
		{name: "short session", o: ConsumerOptions{Group: "g", Topics: []string{"t"}, SessionTimeout: time.Second}, want: "SessionTimeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewConsumer(ClientConfig{Brokers: []string{"127.0.0.1:9"}}, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	o := ConsumerOptions{Group: "g", Topics: []string{"t"}}
	if err := o.setDefaults(); err != nil || o.StartOffset != "earliest" || o.MaxFetchBytes != 10<<20 ||
		o.MaxMessageBytes != 256<<20 || o.SessionTimeout != 10*time.Second {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	if _, err := NewConsumer(ClientConfig{}, o); err == nil {
		t.Fatal("consumer accepted a config without brokers")
	}
}

// TestCloseLeavesNoGoroutines runs a producer and a consumer through their whole life and checks
// that Close stops every goroutine they and kafka-go started.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	cfg := brokerConfig(t)
	topic := newTopic(t, cfg, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	time.Sleep(100 * time.Millisecond) // let the topic setup's connections wind down
	base := runtime.NumGoroutine()

	p, err := NewProducer(cfg, ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, ctx, p, 0, 100)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := NewConsumer(cfg, ConsumerOptions{Group: "g-" + topic, Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		d, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.Ack(d)
	}
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		var buf strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
		t.Fatalf("%d goroutines after Close, %d before:\n%s", n, base, buf.String())
	}
}

// SecurityFailure sorts the failures a misconfigured client meets, with the broker's or the
// TLS stack's words and without the client library's call chain.
func TestSecurityFailure(t *testing.T) {
	cases := []struct {
		name         string
		err          error
		kind, detail string
	}{
		{"nil", nil, "", ""},
		{"network", io.ErrUnexpectedEOF, "", ""},
		{"unknown authority", fmt.Errorf("kafka.(*Client).Metadata: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), SecurityTLS, "x509: certificate signed by unknown authority"},
		{"plaintext to TLS", fmt.Errorf("kafka.(*Client).Metadata: %w: broker appears to be expecting TLS", io.ErrUnexpectedEOF), SecurityNeedsTLS, "the broker answered in TLS"},
		{"SASL", fmt.Errorf("kafka.(*Client).Metadata: %w: invalid credentials", kafka.SASLAuthenticationFailed), SecurityAuth, "[58] SASL Authentication Failed: SASL Authentication failed: invalid credentials"},
		{"ACL", fmt.Errorf("x: %w", kafka.TopicAuthorizationFailed), SecurityForbidden, "[29] Topic Authorization Failed: the client is not authorized to access the requested topic"},
		{"other broker error", kafka.MessageSizeTooLarge, "", ""},
	}
	for _, c := range cases {
		kind, detail := SecurityFailure(c.err)
		if kind != c.kind || detail != c.detail {
			t.Errorf("%s: (%q, %q), want (%q, %q)", c.name, kind, detail, c.kind, c.detail)
		}
	}
}
