package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/commitpolicy"
	"github.com/reignpipe/reignpipe/schemas"
)

// Outputs are where delivered work goes, in the order a commit makes it durable. Any may be
// absent: the aggregate stage and reaggregate have no cache (the manifests are there
// already), the embed stage no vector sinks, ingest only documents.
type Outputs struct {
	// Cache receives each delivered document's manifest (the embed step added its rows); it is
	// flushed first, so no manifest is durable before its windows and nothing downstream
	// before its manifest. Space is the manifests' and chunk records' space.
	Cache Cache
	Space schemas.Space
	// Chunks receive each document's chunk record (the embed stage's chunk topic).
	Chunks []connectors.ChunkSink
	// Docs receives raw documents (the ingest stage's raw topic).
	Docs connectors.DocumentSink
	// Vectors are the vector sinks, named by Names (the run summary's outputs, "sinks[i]"
	// where there is none), and Aggregation makes their vectors.
	Vectors     []connectors.Sink
	Names       []string
	Aggregation Aggregation
}

// Options pace a ledger's commits and say what a commit persists besides the outputs.
type Options struct {
	CommitEvery    int           // inputs between commits (run.commit_every; default commitpolicy.Every)
	CommitInterval time.Duration // the longest pending work waits for a commit (run.commit_interval)
	// Resume is the number of leading inputs a previous run committed: the watermark starts
	// there (the runner skips them as they are read again).
	Resume int64
	// SourceCommit makes the acks given so far the source's persisted position (a watched
	// folder's state file, a Kafka group's offsets); nil when acks need no persisting.
	SourceCommit func(ctx context.Context) error
	// OnCommit persists the watermark (leading inputs done) after each commit that moved it.
	OnCommit func(watermark int64) error
	// DeadLetter receives the inputs that failed; required unless nothing can fail.
	DeadLetter connectors.DeadLetterSink
	// TrackIDs bounds the doc ids remembered to count the same id delivered twice (0: none;
	// run.duplicate_ids). Eight bytes an id, at most twice over. Left 0 where a repeat is not
	// the input's (a Kafka input read again after a rebalance, the aggregate stage, reaggregate).
	TrackIDs int
	Logger   *slog.Logger
}

// Ledger is the one commit path. It records every input from the moment it is read until it
// is done, and owns what a commit does, in this order:
//
//  1. the cache is flushed (chunk rows, then manifests);
//  2. the chunk sinks, the document sink and the vector sinks are flushed;
//  3. the inputs delivered since the last commit are acked (with a sink's refusal where there
//     was one), then the source commits its position (SourceCommit);
//  4. the watermark moves over the longest prefix of inputs done and is persisted (OnCommit).
//
// A failed input is dead-lettered (durable on return) and acked at once; an abandoned one is
// never acked. A ledger is used from one goroutine.
type Ledger struct {
	out Outputs
	o   Options
	c   *Counters
	log *slog.Logger

	pending    []pendingInput // delivered, not yet committed
	unsynced   bool           // acks given since the last SourceCommit
	wm         watermark
	persisted  int64 // the watermark OnCommit last saw
	lastCommit time.Time
	ids        *idSet
	closed     bool
}

type pendingInput struct {
	in      Input
	refused error // a sink's refusal (dead-lettered): the ack carries it
	deleted bool  // a deletion (DeliverDelete), counted as such once durable
	// superseded: an upsert a remembered deletion keeps out (Superseded); nothing written
	superseded bool
}

// New makes the ledger of one run or stage; c receives its counts.
func New(out Outputs, o Options, c *Counters) (*Ledger, error) {
	commitpolicy.Defaults(&o.CommitEvery, &o.CommitInterval)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DeadLetter == nil {
		return nil, errors.New("engine: no dead-letter output")
	}
	if len(out.Vectors) > 0 && out.Aggregation.Aggregator == nil {
		return nil, errors.New("engine: vector sinks need an aggregation")
	}
	if (out.Cache != nil || len(out.Chunks) > 0) && (out.Space.Fingerprint == "" || out.Space.Dim <= 0) {
		return nil, errors.New("engine: manifests and chunk records need the GN space")
	}
	l := &Ledger{out: out, o: o, c: c, log: o.Logger, wm: newWatermark(o.Resume), persisted: o.Resume, lastCommit: time.Now()}
	if o.TrackIDs > 0 {
		l.ids = newIDSet(o.TrackIDs)
	}
	c.Watermark.Store(o.Resume)
	return l, nil
}

// Resumed records an input a previous run committed, read again and skipped: acked at once.
func (l *Ledger) Resumed(ctx context.Context, in Input) {
	l.c.Resumed.Add(1)
	l.ack(ctx, in, nil)
}

// Deliver writes one document whose chunk embeddings are known: its manifest into the cache,
// its chunk record into the chunk sinks and its vector into the vector sinks (each where the
// ledger has them). The input is acked at the commit that makes them durable. A document the
// aggregation cannot take is dead-lettered under stage "aggregate" and acked now; one a sink
// refuses is dead-lettered under stage "sink" and acked with the refusal at the commit (the
// other sinks may hold its vector). A returned error is fatal: an output failed.
//
// An upsert at a version a deletion the cache remembers supersedes is kept out of every
// output, acked at the commit and counted as superseded: checked here, in input order, as
// well as by the caller before it embedded (a deletion earlier in the same input may have
// been applied since).
func (l *Ledger) Deliver(ctx context.Context, in Input, d Doc, keys []uint64, chunks [][]float32) error {
	if l.out.Cache != nil {
		sup, err := l.out.Cache.Superseded(d.ID, d.Version)
		if err != nil {
			return fmt.Errorf("doc manifest (%s): %w", d.ID, err)
		}
		if sup {
			l.Superseded(in)
			return nil
		}
	}
	var v schemas.DocVector
	if len(l.out.Vectors) > 0 {
		var err error
		if v, err = l.out.Aggregation.Vector(d, chunks); err != nil {
			return l.Fail(ctx, in, "aggregate", err)
		}
	}
	if l.out.Cache != nil {
		if err := l.out.Cache.PutManifest(Manifest(d, l.out.Space, keys)); err != nil {
			return fmt.Errorf("doc manifest (%s): %w", d.ID, err)
		}
		l.c.ManifestsPut.Add(1)
	}
	if len(l.out.Chunks) > 0 {
		cd := ChunkRecord(d, l.out.Space, keys, chunks)
		for _, s := range l.out.Chunks {
			if err := s.WriteChunks(ctx, cd); err != nil {
				return fmt.Errorf("chunk record (%s): %w", d.ID, err)
			}
		}
		l.c.ChunkRecords.Add(1)
	}
	var refused error
	if len(l.out.Vectors) > 0 {
		r, err := connectors.WriteVector(ctx, l.out.Vectors, v)
		if err != nil {
			return fmt.Errorf("sink write (%s): %w", d.ID, err)
		}
		if r != nil {
			if err := l.deadLetter(ctx, in, "sink", r); err != nil {
				return err
			}
			refused = r
		}
	}
	l.seen(d.ID)
	l.pending = append(l.pending, pendingInput{in: in, refused: refused})
	return nil
}

// DeliverDelete applies one deletion to every output the ledger has: the cache's manifest
// (Cache.DeleteManifest), the chunk sinks (the deletion's chunk record), the document sink
// (the deletion record) and every vector sink (Sink.Delete). The input is acked at the commit
// that makes them durable, and counts as deleted. A returned error is fatal.
func (l *Ledger) DeliverDelete(ctx context.Context, in Input, d schemas.Deletion) error {
	if l.out.Cache != nil {
		if err := l.out.Cache.DeleteManifest(d); err != nil {
			return fmt.Errorf("doc manifest (deleting %s): %w", d.DocID, err)
		}
	}
	if len(l.out.Chunks) > 0 {
		sp := l.out.Space
		cd := schemas.ChunkDoc{DocID: d.DocID, Source: d.Source, Version: d.Version, Fingerprint: sp.Fingerprint, K: sp.K, S: sp.S, Dim: sp.Dim, Deleted: true}
		for _, s := range l.out.Chunks {
			if err := s.WriteChunks(ctx, cd); err != nil {
				return fmt.Errorf("chunk record (deleting %s): %w", d.DocID, err)
			}
		}
	}
	if s := l.out.Docs; s != nil {
		doc := schemas.Document{ID: d.DocID, Source: d.Source, Version: d.Version, Position: in.Position, Deleted: true}
		if err := s.WriteDocument(ctx, doc); err != nil {
			return fmt.Errorf("publishing the deletion of %s: %w", d.DocID, err)
		}
	}
	for i, s := range l.out.Vectors {
		if err := s.Delete(ctx, d); err != nil {
			return fmt.Errorf("%s: deleting %s: %w", l.name(i), d.DocID, err)
		}
	}
	l.pending = append(l.pending, pendingInput{in: in, deleted: true})
	return nil
}

// Superseded records an upsert that a deletion the cache remembers keeps out (the caller
// found it with Cache.Superseded before embedding, or Deliver did): nothing is written; it is
// acked at the next commit, in order with what was delivered before it, and counted as
// superseded.
func (l *Ledger) Superseded(in Input) {
	l.pending = append(l.pending, pendingInput{in: in, superseded: true})
}

// DeliverDocument writes one raw document to the document sink (ingest); the input is acked
// at the commit that makes it durable. A returned error is fatal.
func (l *Ledger) DeliverDocument(ctx context.Context, in Input, d schemas.Document) error {
	if err := l.out.Docs.WriteDocument(ctx, d); err != nil {
		return fmt.Errorf("publishing %s: %w", d.ID, err)
	}
	l.seen(d.ID)
	l.pending = append(l.pending, pendingInput{in: in})
	return nil
}

// Fail dead-letters an input with the stage that failed it and the reason, durably, and acks
// it: the run goes on. The returned error is fatal (the dead-letter output failed).
func (l *Ledger) Fail(ctx context.Context, in Input, stage string, reason error) error {
	if err := l.deadLetter(ctx, in, stage, reason); err != nil {
		return err
	}
	l.ack(ctx, in, reason)
	l.wm.mark(in.Seq)
	if len(l.pending) == 0 {
		// Nothing earlier waits for a commit: the watermark may move now.
		return l.advance()
	}
	return nil
}

// FailBad dead-letters an input the source could not turn into a document.
func (l *Ledger) FailBad(ctx context.Context, in Input, bad *connectors.BadInputError) error {
	if in.DocID == "" {
		in.DocID = bad.DocID
	}
	if in.Position == "" {
		in.Position = bad.Position
	}
	return l.Fail(ctx, in, "source", bad.Reason)
}

// Abandon records an input left unacked by a hard stop or a fatal error: the next run (or the
// source's next reader) reads it again.
func (l *Ledger) Abandon(Input) { l.c.Abandoned.Add(1) }

// Revoke records an input whose source stopped being this process's before it was done (its
// Kafka partition moved): dropped unacked, its new owner reads it.
func (l *Ledger) Revoke(Input) { l.c.Revoked.Add(1) }

func (l *Ledger) deadLetter(ctx context.Context, in Input, stage string, reason error) error {
	d := schemas.DeadLetter{DocID: in.DocID, Source: in.Source, Position: in.position(), Stage: stage, Err: reason.Error()}
	if err := l.o.DeadLetter.WriteDeadLetter(ctx, d); err != nil {
		return fmt.Errorf("dead-letter output: %w", err)
	}
	l.c.DocsFailed.Add(1)
	l.c.DeadLetters.Add(1)
	l.log.Warn("input failed; sent to the dead-letter output", "doc", d.DocID, "at", d.Position, "stage", stage, "err", d.Err)
	return nil
}

func (l *Ledger) ack(ctx context.Context, in Input, err error) {
	if in.Ack == nil {
		return
	}
	l.unsynced = true
	if aerr := in.Ack(ctx, err); aerr != nil {
		l.log.Warn("ack failed; the input may be delivered again", "doc", in.DocID, "err", aerr)
	}
}

// Pending is the number of inputs delivered and not yet committed.
func (l *Ledger) Pending() int { return len(l.pending) }

// Due says whether a commit is due: CommitEvery inputs wait for one, or the oldest has waited
// CommitInterval.
func (l *Ledger) Due() bool {
	n := len(l.pending)
	return n >= l.o.CommitEvery || n > 0 && time.Since(l.lastCommit) >= l.o.CommitInterval
}

// CommitIfDue commits when Due.
func (l *Ledger) CommitIfDue(ctx context.Context) error {
	if !l.Due() {
		return nil
	}
	return l.Commit(ctx)
}

// Commit makes everything delivered so far durable, then acks it and persists the position
// (the order in the type's comment). On an error nothing pending is acked: the caller ends
// the run, and those inputs are read again.
func (l *Ledger) Commit(ctx context.Context) error {
	if len(l.pending) > 0 {
		if c := l.out.Cache; c != nil {
			if err := c.Flush(); err != nil {
				return fmt.Errorf("chunk cache flush: %w", err)
			}
		}
		for _, s := range l.out.Chunks {
			if err := s.Flush(ctx); err != nil {
				return fmt.Errorf("chunk records: %w", err)
			}
		}
		if s := l.out.Docs; s != nil {
			if err := s.Flush(ctx); err != nil {
				return fmt.Errorf("publishing raw documents: %w", err)
			}
		}
		for i, s := range l.out.Vectors {
			if err := s.Flush(ctx); err != nil {
				return fmt.Errorf("%s: flush: %w", l.name(i), err)
			}
		}
		// Durable now: only committed documents count as written, so a run that fails later
		// still reports what it really delivered.
		for _, p := range l.pending {
			switch {
			case p.deleted:
				l.c.DocsDeleted.Add(1)
			case p.superseded:
				l.c.Superseded.Add(1)
			case p.refused == nil:
				l.c.DocsWritten.Add(1)
			}
			l.ack(ctx, p.in, p.refused)
			l.wm.mark(p.in.Seq)
		}
		l.pending = l.pending[:0]
		l.c.Commits.Add(1)
	}
	if l.unsynced && l.o.SourceCommit != nil {
		if err := l.o.SourceCommit(ctx); err != nil {
			return fmt.Errorf("source checkpoint: %w", err)
		}
	}
	l.unsynced = false
	l.lastCommit = time.Now()
	return l.advance()
}

func (l *Ledger) advance() error {
	next := l.wm.next
	l.c.Watermark.Store(next)
	if next == l.persisted {
		return nil
	}
	l.persisted = next
	if l.o.OnCommit != nil {
		if err := l.o.OnCommit(next); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	return nil
}

func (l *Ledger) name(i int) string {
	if i < len(l.out.Names) && l.out.Names[i] != "" {
		return fmt.Sprintf("sinks[%d] (%s)", i, l.out.Names[i])
	}
	return fmt.Sprintf("sinks[%d]", i)
}

// Aborter is a sink that can withdraw what it holds uncommitted (a Parquet part not yet
// renamed into place), so that a failed run leaves nothing visible that was not committed.
type Aborter interface{ Abort() }

// Close ends the outputs the ledger was given: after a run that failed (failed true) the
// sinks that can withdraw their uncommitted writes do; every other sink is closed, and its
// error returned, named by its place in the pipeline file, so that a close that fails (a
// pgvector index: deferred that cannot be built) fails the run. The inputs still pending are
// never acked (call Commit first to keep them): they count as abandoned, read again by the
// next run. Close is called once; later calls do nothing.
func (l *Ledger) Close(ctx context.Context, failed bool) error {
	if l.closed {
		return nil
	}
	l.closed = true
	l.c.Abandoned.Add(int64(len(l.pending)))
	l.pending = nil
	var errs []error
	for i, s := range l.out.Vectors {
		if a, ok := s.(Aborter); ok && failed {
			a.Abort()
			continue
		}
		if err := s.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("closing %s: %w", l.name(i), err))
		}
	}
	for _, s := range l.out.Chunks {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("closing the chunk records: %w", err))
		}
	}
	if s := l.out.Docs; s != nil {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("closing the raw documents: %w", err))
		}
	}
	return errors.Join(errs...)
}

// seen counts d's id as a duplicate when this run delivered it before, and says once per id
// what readers keep.
func (l *Ledger) seen(id string) {
	if l.ids == nil {
		return
	}
	switch l.ids.add(id) {
	case idFirstRepeat:
		l.c.Duplicates.Add(1)
		l.log.Warn("doc id delivered twice in this run; every copy is written, and readers keep the newest version "+
			"(of copies with the same version, the one later in the input); said once per id", "doc", id)
	case idRepeat:
		l.c.Duplicates.Add(1)
	case idFull:
		l.log.Warn("duplicate doc ids are no longer counted: this run has delivered more distinct ids than the ledger remembers", "ids", l.ids.max)
	}
}
