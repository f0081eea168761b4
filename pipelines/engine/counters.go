package engine

import (
	"sync/atomic"
	"time"
)

// Counters are the live figures of one run or stage, whichever mode it is: the ledger, the
// embed step and the runner count into the same fields, so a summary, the progress line and
// /metrics read the same numbers everywhere. Read them with Load; Summarize turns them into
// the JSON summary.
type Counters struct {
	// Inputs. InputsRead = DocsWritten + DocsDeleted + DocsFailed + Resumed + Abandoned +
	// Revoked + Superseded once the run has ended (skipped inputs are counted by the source,
	// by reason, before they are inputs).
	InputsRead  atomic.Int64 // documents and bad inputs read in this run (resumed ones included)
	Resumed     atomic.Int64 // skipped because a previous run committed them
	DocsWritten atomic.Int64 // committed: durable in every output and acked
	DocsDeleted atomic.Int64 // deletion records committed: applied in every output and acked
	DocsFailed  atomic.Int64 // dead-lettered (a sink's refusal included)
	// Superseded counts upserts kept out by a deletion the cache remembers (the document was
	// deleted at this version or a later one): neither embedded nor written, acked at the
	// commit.
	Superseded atomic.Int64
	Abandoned  atomic.Int64 // in flight at a hard stop or a fatal error: not acked, read again
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

	idle atomic.Int64 // nanoseconds waiting for input with nothing in flight (Waited)
}

// Waited records a wait for input that began at start: idle when nothing was in flight or
// pending when it began. The summary's busy time is the wall time less the idle waits, so a
// stage that waited an hour for its first input reports the pace of its work, not of its
// wait.
func (c *Counters) Waited(start time.Time, idle bool) {
	if idle {
		c.idle.Add(int64(time.Since(start)))
	}
}

// Idle is the time spent waiting for input with nothing to do.
func (c *Counters) Idle() time.Duration { return time.Duration(c.idle.Load()) }
