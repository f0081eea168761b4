package kafkaclient

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkatest"
)

// secureConfig is a client of the test broker's TLS + SASL/SCRAM listener.
func secureConfig(t *testing.T) (ClientConfig, kafkatest.SecureBroker) {
	t.Helper()
	s := kafkatest.Secure(t)
	return ClientConfig{Brokers: strings.Split(s.Brokers, ","), ClientID: "reignpipe-test",
		TLS:  &TLSConfig{CAFile: s.CAFile},
		SASL: &SASLConfig{Mechanism: MechanismSCRAMSHA512, Username: s.User, Password: s.Password}}, s
}

// Over TLS + SCRAM-SHA-512 (and SHA-256) against the real broker, a topic is created, written
// and read back by a consumer group.
func TestSecureRoundTrip(t *testing.T) {
	base, _ := secureConfig(t)
	for _, mech := range []string{MechanismSCRAMSHA512, MechanismSCRAMSHA256} {
		t.Run(mech, func(t *testing.T) {
			cfg := base
			sasl := *base.SASL
			sasl.Mechanism = mech
			cfg.SASL = &sasl
			topic := newTopic(t, cfg, 2)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p, err := NewProducer(cfg, ProducerOptions{Topic: topic})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				if err := p.Send(ctx, Message{Key: fmt.Sprint("k", i), Value: []byte(fmt.Sprint("v", i))}); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			c, err := NewConsumer(cfg, ConsumerOptions{Group: kafkatest.Topic(t, "secure"), Topics: []string{topic}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			seen := map[string]string{}
			for len(seen) < 5 {
				d, err := c.Next(ctx)
				if err != nil {
					t.Fatalf("after %d records: %v", len(seen), err)
				}
				seen[d.Key] = string(d.Value)
				c.Ack(d)
			}
			if seen["k3"] != "v3" {
				t.Fatalf("read %v", seen)
			}
		})
	}
}

// A client that must not get in (a CA that did not sign the broker's certificate, a wrong
// password, an unknown user, another server name, no TLS at all) fails at once, with what is
// wrong, on every path a stage takes: producing, consuming (and creating topics: package
// kafkaadmin). None is retried as a transient failure.
func TestSecureRefusalsFailFast(t *testing.T) {
	good, s := secureConfig(t)
	topic := newTopic(t, good, 1)
	otherCA, _ := writeCert(t, t.TempDir())
	cases := []struct {
		name string
		edit func(c *ClientConfig)
		want string
	}{
		{"wrong CA", func(c *ClientConfig) { c.TLS = &TLSConfig{CAFile: otherCA} }, "certificate signed by unknown authority"},
		{"wrong password", func(c *ClientConfig) { c.SASL.Password = s.Password + "x" }, "SASL Authentication Failed"},
		{"unknown user", func(c *ClientConfig) { c.SASL.Username = "nobody" }, "SASL Authentication Failed"},
		{"wrong server name", func(c *ClientConfig) { c.TLS = &TLSConfig{CAFile: s.CAFile, ServerName: "kafka.example"} }, "certificate is valid for localhost"},
		{"plaintext client", func(c *ClientConfig) { c.TLS, c.SASL = nil, nil }, "broker appears to be expecting TLS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			sasl := *good.SASL
			cfg.SASL = &sasl
			c.edit(&cfg)
			check := func(what string, err error, took time.Duration) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: got in", what)
				}
				if !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: %v, want it to say %q", what, err, c.want)
				}
				if took > 10*time.Second {
					t.Errorf("%s failed after %v, not at once", what, took)
				}
				t.Logf("%s: %v (%v)", what, err, took.Round(time.Millisecond))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()

			start := time.Now()
			p, err := NewProducer(cfg, ProducerOptions{Topic: topic})
			if err == nil {
				if err = p.Send(ctx, Message{Key: "k", Value: []byte("v")}); err == nil {
					err = p.Flush(ctx)
				}
				p.Close(context.Background())
			}
			check("producer", err, time.Since(start))

			start = time.Now()
			cons, err := NewConsumer(cfg, ConsumerOptions{Group: kafkatest.Topic(t, "never"), Topics: []string{topic}})
			if err == nil {
				_, err = cons.Next(ctx)
				cons.Close(context.Background())
			}
			check("consumer", err, time.Since(start))
		})
	}
}
