package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// Counters are the live figures of one run or stage, whichever mode it is: the ledger, the
// embed step and the runner count into the same fields, so a summary, the progress line and
// /metrics read the same numbers everywhere. Read them with Load; Summarize turns them into
// the JSON summary.
type Counters struct {
	// Inputs. InputsRead = DocsWritten + DocsFailed + Resumed + Abandoned + Revoked once the
	// run has ended (skipped inputs are counted by the source, by reason, before they are
	// inputs).
	InputsRead  atomic.Int64 // documents and bad inputs read in this run (resumed ones included)
	Resumed     atomic.Int64 // skipped because a previous run committed them
	DocsWritten atomic.Int64 // committed: durable in every output and acked
	DocsFailed  atomic.Int64 // dead-lettered (a sink's refusal included)
	Abandoned   atomic.Int64 // in flight at a hard stop or a fatal error: not acked, read again
	// Revoked counts inputs whose source stopped being this process's before they were done
	// (a Kafka partition moved to another group member): dropped unacked, the new owner
	// reads them.
	Revoked atomic.Int64
	// Duplicates counts documents whose doc id this run had already delivered (the same id
	// twice in one input); each is written, and readers keep one copy (see Ledger).
	Duplicates atomic.Int64

	// Windows.
	Tokens       atomic.Int64
	Windows      atomic.Int64 // cut (and looked up in the cache)
	WindowsDone  atomic.Int64 // with their embedding: from the cache, the GN or a shared pass
	CacheHits    atomic.Int64 // found in the cache when looked up or when their GN batch formed
	CacheLate    atomic.Int64 // of CacheHits: found only when their GN batch formed (another process's window arrived meanwhile)
	CacheCorrupt atomic.Int64 // cached windows found damaged and embedded again
	GNWindows    atomic.Int64 // windows the GN ran a forward pass on
	GNShared     atomic.Int64 // misses that took an identical in-flight window's vector instead of the GN
	GNDropped    atomic.Int64 // queued for the GN and dropped before their pass (their input stopped being this process's)
	ChunkRowsNew atomic.Int64 // rows the cache did not hold before

	// Outputs and commits.
	ManifestsPut atomic.Int64
	ChunkRecords atomic.Int64 // chunk records written (the embed stage)
	DeadLetters  atomic.Int64
	Commits      atomic.Int64
	Watermark    atomic.Int64 // leading inputs committed (file sources resume from it)

	// In flight.
	InFlight  atomic.Int64 // inputs between the source and the ledger
	Processed atomic.Int64 // inputs that reached the ledger

	busy busyClock
}

// busyClock accumulates the time during which at least one input was in flight, so that a
// stage that waits an hour for its first input reports the rate of its work, not of its wait.
type busyClock struct {
	mu    sync.Mutex
	n     int       // inputs in flight
	since time.Time // when n last went from 0 to 1
	total time.Duration
}

// Enter marks one input in flight.
func (c *Counters) Enter() {
	c.InFlight.Add(1)
	b := &c.busy
	b.mu.Lock()
	if b.n == 0 {
		b.since = time.Now()
	}
	b.n++
	b.mu.Unlock()
}

// Leave marks one input done (written, failed, abandoned or revoked).
func (c *Counters) Leave() {
	c.InFlight.Add(-1)
	b := &c.busy
	b.mu.Lock()
	if b.n > 0 {
		b.n--
		if b.n == 0 {
			b.total += time.Since(b.since)
		}
	}
	b.mu.Unlock()
}

// Busy is the time inputs were in flight so far.
func (c *Counters) Busy() time.Duration {
	b := &c.busy
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.total
	if b.n > 0 {
		t += time.Since(b.since)
	}
	return t
}
