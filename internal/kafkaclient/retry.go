package kafkaclient

import (
	"context"
	"math/rand/v2"
	"time"
)

// One retry schedule for everything that retries the cluster: this package's producer,
// consumer and tail, kafka-go's partition readers under them (ReadBackoffMin/Max), and the
// topic administration beside it (package kafkaadmin), which retries the same brokers and so
// waits as they do. Which errors are retried is Transient's decision.

const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// WaitRetry waits before retry attempt n (1-based) -- exponential from 100 ms to 5 s, with
// jitter so that clients that failed together do not retry together -- or until ctx ends,
// reporting whether the full wait happened.
func WaitRetry(ctx context.Context, attempt int) bool {
	return sleep(ctx, backoff(attempt))
}

// backoff is the wait before retry attempt n (1-based): exponential from backoffMin to
// backoffMax, with jitter.
func backoff(n int) time.Duration {
	d := backoffMin
	for i := 1; i < n && d < backoffMax; i++ {
		d *= 2
	}
	return min(d+rand.N(d/4+1), backoffMax)
}

// sleep waits d or until ctx ends, reporting whether the full wait happened.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
