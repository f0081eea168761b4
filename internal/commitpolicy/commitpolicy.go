// Package commitpolicy holds the one default of how often a runner commits (flushes its
// outputs, then acks its inputs), shared by the pipeline config, the embedded runner and the
// distributed stages so the three cannot drift apart.
package commitpolicy

import "time"

const (
	// Every is how many inputs a runner handles between commits.
	Every = 512
	// Interval is the longest a runner waits between commits while work is pending: it bounds
	// what a crash re-reads and how stale the outputs get on a slow feed.
	Interval = 10 * time.Second
)

// Defaults sets unset (zero or negative) values to Every and Interval.
func Defaults(every *int, interval *time.Duration) {
	if *every <= 0 {
		*every = Every
	}
	if *interval <= 0 {
		*interval = Interval
	}
}
