package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/schemas"
)

// The two stages without a GN, ingest (a source → the raw topic) and aggregate (the chunk
// topic → vector sinks), are each one loop over their input through the engine's ledger: the
// same commit path, cadence, dead letters and close errors as a run, with inputs handled one
// at a time (neither has work worth overlapping).

// LoopOptions pace a loop's commits; zero values take the defaults.
type LoopOptions struct {
	CommitEvery    int           // inputs between commits (run.commit_every)
	CommitInterval time.Duration // and at most this long between commits (run.commit_interval)
	Logger         *slog.Logger
}

// IngestOptions add the file-source checkpoint to LoopOptions.
type IngestOptions struct {
	LoopOptions
	// Resume skips the first inputs a previous run committed (file sources are deterministic);
	// sources that keep their own position (connectors.SelfCheckpointing) ignore it.
	Resume int64
	// OnCommit persists the number of leading inputs done after each commit.
	OnCommit func(watermark int64) error
	// TrackIDs bounds the doc ids remembered to count the input's duplicates (run.duplicate_ids).
	TrackIDs int
}

// Ingest copies documents from src to out until src is exhausted or ctx is cancelled (then what
// was read is flushed and committed before returning); a deletion record goes to out as a
// deletion (DocumentSink: the raw topic's tombstone). Bad inputs go to dl. It closes out; the
// error is the first fatal one (the source, a Kafka write failing after its retries, out
// failing to close).
func Ingest(ctx context.Context, src connectors.Source, out connectors.DocumentSink, dl connectors.DeadLetterSink, o IngestOptions, c *engine.Counters) (err error) {
	if sc, ok := src.(connectors.SelfCheckpointing); ok && sc.SelfCheckpointing() {
		o.Resume = 0
	}
	var sourceCommit func(context.Context) error
	if f, ok := src.(connectors.AckFlusher); ok {
		sourceCommit = f.FlushAcks
	}
	led, err := engine.New(engine.Outputs{Docs: out}, engine.Options{
		CommitEvery: o.CommitEvery, CommitInterval: o.CommitInterval, Resume: o.Resume,
		SourceCommit: sourceCommit, OnCommit: o.OnCommit, DeadLetter: dl, TrackIDs: o.TrackIDs, Logger: o.Logger,
	}, c)
	if err != nil {
		return errors.Join(err, out.Close(context.WithoutCancel(ctx)))
	}
	// Writes and commits go on past a soft stop: what was read is finished, not abandoned.
	wctx := context.WithoutCancel(ctx)
	defer func() { err = closeLedger(wctx, led, err) }()
	var seq int64
	return led.Drive(ctx, func(wait context.Context) error {
		doc, ack, bad, err := readOne(wait, led, c, "source", src.Read)
		if err != nil {
			return err
		}
		in := engine.Input{Seq: seq, Ack: ack, DocID: doc.ID, Source: doc.Source, Position: doc.Position}
		seq++
		c.InputsRead.Add(1)
		c.Processed.Add(1)
		switch {
		case in.Seq < o.Resume:
			led.Resumed(wctx, in)
			return nil
		case bad != nil:
			return led.FailBad(wctx, in, bad)
		case doc.Deleted:
			// Through the ledger's one deletion path: the document sink writes it as the raw
			// topic's tombstone, and it counts as a deletion, not a document written (nor a
			// duplicate id).
			return led.DeliverDelete(wctx, in, schemas.DeletionOf(doc))
		}
		return led.DeliverDocument(wctx, in, doc)
	})
}

// AggregateParts are the pieces of the aggregate stage.
type AggregateParts struct {
	Input connectors.ChunkSource
	// Space is the chunk-embedding space the stage accepts: embeddings of another GN or window
	// setting are dead-lettered.
	Space       schemas.Space
	Aggregation engine.Aggregation
	Sinks       []connectors.Sink
	SinkNames   []string
	DeadLetter  connectors.DeadLetterSink
}

// Aggregate turns chunk records into document vectors until ctx is cancelled (or the input
// ends), committing after the sinks are flushed; a deletion's chunk record is applied to every
// sink (Sink.Delete). It returns after a final commit, with the
// sinks closed; the error is the first fatal one, a sink's close included.
func Aggregate(ctx context.Context, p AggregateParts, o LoopOptions, c *engine.Counters) (err error) {
	switch {
	case p.Input == nil || p.Aggregation.Aggregator == nil || len(p.Sinks) == 0 || p.DeadLetter == nil:
		return errors.New("aggregate stage: input, aggregator, sinks and dead-letter output are required")
	case p.Space.Fingerprint == "" || p.Space.Dim <= 0:
		return errors.New("aggregate stage: the GN space is required")
	}
	led, err := engine.New(engine.Outputs{Vectors: p.Sinks, Names: p.SinkNames, Aggregation: p.Aggregation}, engine.Options{
		CommitEvery: o.CommitEvery, CommitInterval: o.CommitInterval, SourceCommit: p.Input.FlushAcks, DeadLetter: p.DeadLetter, Logger: o.Logger,
	}, c)
	if err != nil {
		return err
	}
	wctx := context.WithoutCancel(ctx)
	defer func() { err = closeLedger(wctx, led, err) }()
	var seq int64
	return led.Drive(ctx, func(wait context.Context) error {
		d, ack, bad, err := readOne(wait, led, c, "chunk input", p.Input.Read)
		if err != nil {
			return err
		}
		in := engine.Input{Seq: seq, Ack: ack, DocID: d.DocID, Source: d.Source}
		seq++
		c.InputsRead.Add(1)
		c.Processed.Add(1)
		switch {
		case bad != nil:
			in.Position = bad.Position
			return led.Fail(wctx, in, "aggregate", bad.Reason)
		case d.Deleted:
			// A deletion is of every space the sinks hold: no space check, no vector.
			return led.DeliverDelete(wctx, in, schemas.Deletion{DocID: d.DocID, Source: d.Source, Version: d.Version})
		}
		if err := engine.CheckSpace(engine.SpaceOf(&d), p.Space); err != nil {
			return led.Fail(wctx, in, "aggregate", err)
		}
		c.Windows.Add(int64(len(d.Keys)))
		return led.Deliver(wctx, in, engine.DocOfChunks(&d), d.Keys, engine.Chunks(&d))
	})
}

// readOne reads a loop's next input: a bad one comes back as bad (to dead-letter), the end of
// the input or of the wait as their own errors (Drive tells them apart), anything else as the
// input's failure, named by what. The wait counts as idle when nothing was pending.
func readOne[T any](wait context.Context, led *engine.Ledger, c *engine.Counters, what string,
	read func(context.Context) (T, connectors.AckFunc, error)) (v T, ack connectors.AckFunc, bad *connectors.BadInputError, err error) {
	start, idle := time.Now(), led.Pending() == 0
	v, ack, err = read(wait)
	c.Waited(start, idle)
	switch {
	case err == nil:
		return v, ack, nil, nil
	case errors.As(err, &bad):
		return v, ack, bad, nil
	case errors.Is(err, io.EOF), wait.Err() != nil:
		return v, ack, nil, err
	}
	return v, ack, nil, fmt.Errorf("%s: %w", what, err)
}

// closeLedger closes the ledger's outputs after its loop: a close that fails fails the stage.
func closeLedger(ctx context.Context, led *engine.Ledger, runErr error) error {
	cerr := led.Close(ctx, runErr != nil)
	if runErr != nil {
		if cerr != nil {
			slog.Error("closing the outputs after the failure", "err", cerr)
		}
		return runErr
	}
	return cerr
}
