package kafkaadmin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"time"
)

// While a stage waits for its brokers it says so -- at the first failed attempt and every
// reachLogEvery after -- with the addresses and the error, and it gives up with a message that
// names the setting the addresses come from (transport.kafka.brokers) in place of the client
// library's ("kafka.(*Client).Metadata: dial tcp ...: context canceled").

// reachLogEvery is how often a wait for the brokers is logged again.
const reachLogEvery = 10 * time.Second

// unreachable reports whether err is a failure to connect (refused, no route, a name that does
// not resolve, a timeout): the brokers are not there, as opposed to a cluster that answers.
func unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) || errors.As(err, &dns)
}

var libraryPrefix = regexp.MustCompile(`kafka\.\(\*\w+\)\.\w+: `)

// plainErr is err's text without the client library's method names.
func plainErr(err error) string {
	return libraryPrefix.ReplaceAllString(err.Error(), "")
}

// retryLog logs a transient failure of a wait for the cluster, at most every reachLogEvery
// (*last is when it last logged). An unreachable cluster is logged from the first attempt; a
// cluster that answers but is not ready (a new topic without a leader yet) only once it lasts.
func retryLog(ctx context.Context, brokers []string, err error, started time.Time, last *time.Time) {
	now := time.Now()
	if !last.IsZero() && now.Sub(*last) < reachLogEvery {
		return
	}
	if !unreachable(err) && now.Sub(started) < reachLogEvery {
		return
	}
	*last = now
	left := ""
	if dl, ok := ctx.Deadline(); ok {
		left = fmt.Sprintf("; retrying for up to %s", time.Until(dl).Round(time.Second))
	}
	if unreachable(err) {
		slog.Warn(fmt.Sprintf("cannot reach the Kafka brokers at %s: %s%s", strings.Join(brokers, ","), plainErr(err), left))
		return
	}
	slog.Warn(fmt.Sprintf("the Kafka cluster at %s is not ready: %s%s", strings.Join(brokers, ","), plainErr(err), left))
}

// gaveUpError ends a wait for the cluster. It wraps ctx's error, so a caller still tells a
// deadline from a cancel (an interrupt), and the last attempt's, which callers explain further
// (a listener that keeps closing the connection wants SASL: pipelines/engine/cluster).
type gaveUpError struct {
	msg          string
	ctxErr, last error
}

func (e *gaveUpError) Error() string   { return e.msg }
func (e *gaveUpError) Unwrap() []error { return []error{e.ctxErr, e.last} }

// gaveUp is the error a wait for the cluster ends with when ctx ends first; what is the work
// that waited ("ensuring topics [a b]"), last the last attempt's error.
func gaveUp(ctx context.Context, brokers []string, what string, started time.Time, last error) error {
	addrs := strings.Join(brokers, ",")
	waited := time.Since(started).Round(time.Second)
	var msg string
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		msg = fmt.Sprintf("stopped after %s while %s on the Kafka brokers at %s (transport.kafka.brokers): %s", waited, what, addrs, plainErr(last))
	case unreachable(last):
		msg = fmt.Sprintf("cannot reach the Kafka brokers at %s (transport.kafka.brokers) after trying for %s: %s; "+
			"check that the brokers are running and that transport.kafka.brokers names them as this machine reaches them", addrs, waited, plainErr(last))
	default:
		msg = fmt.Sprintf("%s on the Kafka brokers at %s (transport.kafka.brokers) did not finish in %s: %s", what, addrs, waited, plainErr(last))
	}
	return &gaveUpError{msg: msg, ctxErr: ctx.Err(), last: last}
}
