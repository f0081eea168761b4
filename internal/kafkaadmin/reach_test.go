package kafkaadmin

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkaclient"
)

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Brokers where nothing listens: the wait is logged from the first attempt, with the address
// and the error, and ends with a message naming transport.kafka.brokers, in no Go type's name.
func TestUnreachableBrokersAreReported(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now

	var logs logBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)

	for _, c := range []struct {
		name   string
		cancel bool // an interrupt instead of the deadline
		want   string
		cause  error
	}{
		{"deadline", false, "cannot reach the Kafka brokers at " + addr + " (transport.kafka.brokers) after trying for", context.DeadlineExceeded},
		{"interrupted", true, "stopped after", context.Canceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
			defer cancel()
			if c.cancel {
				time.AfterFunc(1500*time.Millisecond, cancel)
			}
			start := time.Now()
			err := EnsureTopics(ctx, kafkaclient.ClientConfig{Brokers: []string{addr}}, TopicSpec{Name: "reach.raw", Partitions: 1, ReplicationFactor: 1})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "connection refused") ||
				!strings.Contains(err.Error(), "transport.kafka.brokers") || !errors.Is(err, c.cause) {
				t.Fatalf("%v\nwant %q, naming the brokers' key and the refusal", err, c.want)
			}
			if strings.Contains(err.Error(), "kafka.(*") || strings.Contains(err.Error(), "context canceled") {
				t.Fatalf("%v speaks Go", err)
			}
			var op *net.OpError
			if !errors.As(err, &op) { // the last attempt's error is still there for callers to explain
				t.Fatalf("%v does not wrap the dial error", err)
			}
			if el := time.Since(start); el > 10*time.Second {
				t.Fatalf("gave up after %v", el)
			}
		})
	}
	out := logs.String()
	if !strings.Contains(out, "cannot reach the Kafka brokers at "+addr+": ") || !strings.Contains(out, "connection refused; retrying for up to") {
		t.Fatalf("no warning while retrying:\n%s", out)
	}
	if strings.Contains(out, "kafka.(*") {
		t.Fatalf("the warning speaks Go:\n%s", out)
	}
}

// The retry log comes at the first failed attempt, then every reachLogEvery; a cluster that
// answers but is not ready yet is logged only once the wait lasts.
func TestRetryLogCadence(t *testing.T) {
	var logs logBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	notReady := errors.New("topics [a] have no leader yet")
	ctx := context.Background()
	var last time.Time
	now := time.Now()
	retryLog(ctx, []string{"b:9092"}, notReady, now, &last)
	if logs.String() != "" {
		t.Fatalf("a new topic without a leader, at once: %s", logs.String())
	}
	retryLog(ctx, []string{"b:9092"}, refused, now, &last)
	retryLog(ctx, []string{"b:9092"}, refused, now, &last) // within reachLogEvery: quiet
	if n := strings.Count(logs.String(), "cannot reach the Kafka brokers at b:9092"); n != 1 {
		t.Fatalf("%d warnings:\n%s", n, logs.String())
	}
	last = last.Add(-reachLogEvery)
	retryLog(ctx, []string{"b:9092"}, notReady, now.Add(-reachLogEvery), &last)
	if !strings.Contains(logs.String(), "the Kafka cluster at b:9092 is not ready: topics [a] have no leader yet") {
		t.Fatalf("a wait that lasts:\n%s", logs.String())
	}
}
