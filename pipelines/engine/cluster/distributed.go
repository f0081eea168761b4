// Package distributed runs a pipeline's stages as separate processes joined by Kafka topics:
//
//	ingest     source connector          → <topics>.raw      (raw documents, JSON)
//	embed      <topics>.raw   (group)    → <topics>.chunks   (chunk embeddings, via GN + cache)
//	aggregate  <topics>.chunks (group)   → sinks             (vectors: topic, Parquet, JSONL)
//
// The embed stage is the embedded runner (pipelines/embedded) with a Kafka source and a chunk
// sink, so chunking, caching and batching behave exactly as in one process. This package holds
// the two stages that have no GN: ingest and aggregate. Both keep the at-least-once rule: an
// input is acked only after what was derived from it is durable (Kafka produce acknowledged or
// sink flushed), and dead letters are durable before their input is acked.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/commitpolicy"
	"github.com/reignpipe/reignpipe/schemas"
)

// Options pace commits; zero values take the defaults.
type LoopOptions struct {
	CommitEvery    int           // inputs between commits (default commitpolicy.Every)
	CommitInterval time.Duration // and at most this long between commits (default commitpolicy.Interval)
	// IdleExit ends the stage once no input arrived for this long (a backfill that is done);
	// 0 runs until the context is cancelled, as a continuous stage does.
	IdleExit time.Duration
	Logger   *slog.Logger
}

func (o *LoopOptions) defaults() {
	commitpolicy.Defaults(&o.CommitEvery, &o.CommitInterval)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Counters are live figures of a stage, for metrics and the run summary.
type Counters struct {
	Inputs      atomic.Int64 // inputs read (documents and bad inputs)
	Written     atomic.Int64 // documents published
	DeadLetters atomic.Int64
	Commits     atomic.Int64
	Watermark   atomic.Int64 // ingest: leading inputs committed (the file checkpoint)
}

// RawWriter publishes raw documents (connectors/kafka.RawSink).
type RawWriter interface {
	WriteDocument(ctx context.Context, d schemas.Document) error
	Flush(ctx context.Context) error
}

// IngestOptions add the file-source checkpoint to Options.
type IngestOptions struct {
	LoopOptions
	// Resume skips the first inputs a previous run committed (file sources are deterministic);
	// sources that keep their own position (connectors.SelfCheckpointing) ignore it.
	Resume int64
	// OnCommit persists the number of leading inputs done after each commit.
	OnCommit func(watermark int64) error
}

// waiter bounds each blocking read of a stage's loop, so that work read earlier is committed
// within CommitInterval even when no further input arrives, and an idle stage can exit.
type waiter struct {
	o          *LoopOptions
	lastCommit time.Time
	lastInput  time.Time
}

func newWaiter(o *LoopOptions) *waiter {
	now := time.Now()
	return &waiter{o: o, lastCommit: now, lastInput: now}
}

// wait runs read under a deadline: the commit deadline while pending work waits, and the idle
// deadline. It reports commitDue when the commit deadline passed and idle when IdleExit passed,
// both only when the parent ctx is still live.
func (w *waiter) wait(ctx context.Context, pending bool, read func(context.Context) error) (commitDue, idle bool, err error) {
	var deadline time.Time
	if pending {
		deadline = w.lastCommit.Add(w.o.CommitInterval)
	}
	if w.o.IdleExit > 0 {
		if d := w.lastInput.Add(w.o.IdleExit); deadline.IsZero() || d.Before(deadline) {
			deadline = d
		}
	}
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if !deadline.IsZero() {
		rctx, cancel = context.WithDeadline(ctx, deadline)
	}
	err = read(rctx)
	timedOut := err != nil && rctx.Err() != nil && ctx.Err() == nil
	cancel()
	now := time.Now()
	if err == nil || !timedOut {
		w.lastInput = now
		return false, false, err
	}
	commitDue = pending && !now.Before(w.lastCommit.Add(w.o.CommitInterval))
	idle = w.o.IdleExit > 0 && !now.Before(w.lastInput.Add(w.o.IdleExit))
	return commitDue, idle, err
}

// committed restarts the commit deadline.
func (w *waiter) committed() { w.lastCommit = time.Now() }

// next reads one input under the waiter's deadlines, committing whenever the commit deadline
// passes while the input is quiet. It returns a bad input to dead-letter, or done when the loop
// ends: input exhausted, idle, ctx cancelled (after a last commit, whose error is err), or a
// fatal read error (err, after a last commit attempt).
func (w *waiter) next(ctx context.Context, pending bool, read func(context.Context) error, commit func() error, what string) (bad *connectors.BadInputError, done bool, err error) {
	for {
		commitDue, idle, err := w.wait(ctx, pending, read)
		switch {
		case err == nil:
			return nil, false, nil
		case errors.As(err, &bad):
			return bad, false, nil
		case idle && !commitDue, errors.Is(err, io.EOF), ctx.Err() != nil:
			return nil, true, commit()
		case commitDue:
			if err := commit(); err != nil {
				return nil, true, err
			}
			w.committed()
			pending = false
		default:
			if cerr := commit(); cerr != nil {
				w.o.Logger.Error("final commit", "err", cerr)
			}
			return nil, true, fmt.Errorf("%s: %w", what, err)
		}
	}
}

// pendingAck is an input waiting for the next commit: err is nil for one whose outputs are
// written, the reason for one that went to the dead-letter output (AckFunc's contract).
type pendingAck struct {
	ack connectors.AckFunc
	err error
}

// ackAll acks every pending input once its outputs (or dead letters) are durable. An ack that
// fails only means the input may be read again.
func ackAll(ctx context.Context, pending []pendingAck, log *slog.Logger) {
	for _, p := range pending {
		if p.ack == nil {
			continue
		}
		if err := p.ack(ctx, p.err); err != nil {
			log.Warn("ack failed; the input may be read again", "err", err)
		}
	}
}

// Ingest copies documents from src to out until src is exhausted or ctx is cancelled (then what
// was read is flushed and committed before returning). Bad inputs go to dl. The error is the
// first fatal one (the source or a Kafka write failing after its retries).
func Ingest(ctx context.Context, src connectors.Source, out RawWriter, dl connectors.DeadLetterSink, o IngestOptions, c *Counters) error {
	o.defaults()
	var seq int64
	var pending []pendingAck
	// Writes and commits go on past a soft stop: what was read is finished, not abandoned.
	wctx := context.WithoutCancel(ctx)
	commit := func() error {
		if len(pending) == 0 && seq == c.Watermark.Load() {
			return nil
		}
		if err := out.Flush(wctx); err != nil {
			return fmt.Errorf("publishing raw documents: %w", err)
		}
		ackAll(wctx, pending, o.Logger)
		pending = pending[:0]
		if f, ok := src.(connectors.AckFlusher); ok {
			if err := f.FlushAcks(wctx); err != nil {
				return fmt.Errorf("source checkpoint: %w", err)
			}
		}
		c.Watermark.Store(seq)
		c.Commits.Add(1)
		if o.OnCommit != nil {
			return o.OnCommit(seq)
		}
		return nil
	}
	if sc, ok := src.(connectors.SelfCheckpointing); ok && sc.SelfCheckpointing() {
		o.Resume = 0
	}
	w := newWaiter(&o.LoopOptions)
	for {
		var doc schemas.Document
		var ack connectors.AckFunc
		bad, done, err := w.next(ctx, len(pending) > 0, func(rctx context.Context) (err error) {
			doc, ack, err = src.Read(rctx)
			return err
		}, commit, "source")
		if done {
			return err
		}
		s := seq
		seq++
		c.Inputs.Add(1)
		switch {
		case s < o.Resume:
			if ack != nil {
				_ = ack(wctx, nil)
			}
		case bad != nil:
			if err := dl.WriteDeadLetter(wctx, schemas.DeadLetter{DocID: bad.DocID, Position: bad.Position, Stage: "source", Err: bad.Reason.Error()}); err != nil {
				return fmt.Errorf("dead-letter output: %w", err)
			}
			c.DeadLetters.Add(1)
			o.Logger.Warn("input failed; sent to the dead-letter output", "doc", bad.DocID, "at", bad.Position, "err", bad.Reason)
			pending = append(pending, pendingAck{ack, bad})
		default:
			if err := out.WriteDocument(wctx, doc); err != nil {
				return fmt.Errorf("publishing %s: %w", doc.ID, err)
			}
			c.Written.Add(1)
			pending = append(pending, pendingAck{ack, nil})
		}
		if len(pending) >= o.CommitEvery || time.Since(w.lastCommit) >= o.CommitInterval {
			if err := commit(); err != nil {
				return err
			}
			w.committed()
		}
	}
}
