package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
)

// ChunkInput yields documents' chunk embeddings (connectors/kafka.ChunkSource).
type ChunkInput interface {
	// Next blocks until the next document or ctx ends (returns ctx's error). The stage calls
	// ack once the document's vector (or its dead letter) is durable, as connectors.AckFunc
	// says; a *connectors.BadInputError comes with an ack too.
	Next(ctx context.Context) (doc schemas.ChunkDoc, ack connectors.AckFunc, err error)
	// Commit makes everything acked so far the input's committed position.
	Commit(ctx context.Context) error
}

// Space is the chunk-embedding space the aggregate stage accepts: embeddings of another GN or
// window setting would give a REIGN model confident nonsense, so they are dead-lettered.
type Space struct {
	Fingerprint string
	Dim, K, S   int
}

// AggregateParts are the pieces of the aggregate stage.
type AggregateParts struct {
	Input      ChunkInput
	Space      Space
	Aggregator aggregate.Aggregator
	GNMeanPool aggregate.Aggregator // optional companion vector, as in embedded mode
	Sinks      []connectors.Sink
	DeadLetter connectors.DeadLetterSink
}

// Aggregate turns chunk embeddings into document vectors until ctx is cancelled (or the input
// is idle for IdleExit), committing after the sinks are flushed. It returns after a final
// commit; the error is the first fatal one.
func Aggregate(ctx context.Context, p AggregateParts, o LoopOptions, c *Counters) error {
	o.defaults()
	switch {
	case p.Input == nil || p.Aggregator == nil || len(p.Sinks) == 0 || p.DeadLetter == nil:
		return errors.New("aggregate stage: input, aggregator, sinks and dead-letter output are required")
	case p.Space.Fingerprint == "" || p.Space.Dim <= 0:
		return errors.New("aggregate stage: the GN space is required")
	}
	wctx := context.WithoutCancel(ctx)
	var pending []pendingAck
	commit := func() error {
		if len(pending) == 0 {
			return nil
		}
		for _, s := range p.Sinks {
			if err := s.Flush(wctx); err != nil {
				return fmt.Errorf("sink flush: %w", err)
			}
		}
		ackAll(wctx, pending, o.Logger)
		pending = pending[:0]
		if err := p.Input.Commit(wctx); err != nil {
			return fmt.Errorf("committing input offsets: %w", err)
		}
		c.Commits.Add(1)
		return nil
	}
	deadLetter := func(d schemas.DeadLetter, ack connectors.AckFunc) error {
		if err := p.DeadLetter.WriteDeadLetter(wctx, d); err != nil {
			return fmt.Errorf("dead-letter output: %w", err)
		}
		c.DeadLetters.Add(1)
		o.Logger.Warn("input failed; sent to the dead-letter output", "doc", d.DocID, "at", d.Position, "err", d.Err)
		pending = append(pending, pendingAck{ack, errors.New(d.Err)})
		return nil
	}
	w := newWaiter(&o)
	for {
		var doc schemas.ChunkDoc
		var ack connectors.AckFunc
		bad, done, err := w.next(ctx, len(pending) > 0, func(rctx context.Context) (err error) {
			doc, ack, err = p.Input.Next(rctx)
			return err
		}, commit, "chunk input")
		if done {
			return err
		}
		c.Inputs.Add(1)
		if bad != nil {
			if err := deadLetter(schemas.DeadLetter{DocID: bad.DocID, Position: bad.Position, Stage: "aggregate", Err: bad.Reason.Error()}, ack); err != nil {
				return err
			}
		} else if err := p.one(wctx, doc); err != nil {
			var sinkErr errSinkWrite
			if errors.As(err, &sinkErr) {
				return err // not the document's fault; it is read again after a restart
			}
			stage := "aggregate"
			if errors.As(err, new(errSinkRefused)) {
				stage = "sink"
			}
			if err := deadLetter(schemas.DeadLetter{DocID: doc.DocID, Source: doc.Source, Stage: stage, Err: err.Error()}, ack); err != nil {
				return err
			}
		} else {
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

// errSinkWrite marks a sink failure (fatal) apart from a bad document (dead-lettered).
type errSinkWrite struct{ err error }

func (e errSinkWrite) Error() string { return e.err.Error() }

// one aggregates and writes one document. A sink error is returned wrapped in errSinkWrite.
func (p *AggregateParts) one(ctx context.Context, d schemas.ChunkDoc) error {
	sp := p.Space
	if d.Fingerprint != sp.Fingerprint || d.Dim != sp.Dim || d.K != sp.K || d.S != sp.S {
		return fmt.Errorf("chunk embeddings are from GN %s (dim %d, K=%d, S=%d); this stage aggregates GN %s (dim %d, K=%d, S=%d)",
			d.Fingerprint, d.Dim, d.K, d.S, sp.Fingerprint, sp.Dim, sp.K, sp.S)
	}
	if len(d.Keys) == 0 {
		return errors.New("document has no chunks")
	}
	chunks := make([][]float32, len(d.Keys))
	for i := range chunks {
		chunks[i] = d.Chunk(i)
	}
	v, err := aggregate.Vectors(p.Aggregator, p.GNMeanPool, chunks)
	if err != nil {
		return err
	}
	v.DocID, v.Title, v.Source, v.Version = d.DocID, d.Title, d.Source, d.Version
	v.ContentHash, v.NChunks, v.NTokens = d.ContentHash, len(d.Keys), d.NTokens
	refused, err := connectors.WriteVector(ctx, p.Sinks, v)
	if err != nil {
		return errSinkWrite{fmt.Errorf("sink write (%s): %w", d.DocID, err)}
	}
	if refused != nil {
		return errSinkRefused{refused}
	}
	return nil
}

// errSinkRefused is a vector a sink can never take (connectors.WriteVector): the document is
// dead-lettered under stage "sink".
type errSinkRefused struct{ err error }

func (e errSinkRefused) Error() string { return e.err.Error() }
