package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// watermark tracks the longest prefix of inputs (by read order) that is fully done, so a
// restart can skip exactly those, whatever order documents finished in.
type watermark struct {
	next int64          // every seq < next is done
	done map[int64]bool // done seqs >= next (bounded by what is in flight)
}

func (w *watermark) mark(seq int64) {
	if seq < w.next {
		return
	}
	w.done[seq] = true
	for w.done[w.next] {
		delete(w.done, w.next)
		w.next++
	}
}

// write is the writer goroutine: it owns the cache writes, the sinks, the dead-letter output
// and the watermark. It returns when done is closed (after a final commit) or on a fatal error.
func (r *Runner) write(ctx context.Context, done <-chan *item) (err error) {
	wm := &watermark{next: r.opt.Resume, done: map[int64]bool{}}
	r.C.Watermark.Store(wm.next)
	var pending []*item // written to sinks, not yet committed
	defer func() {
		if err != nil { // never made durable, never acked: the next run reads them again
			r.C.Abandoned.Add(int64(len(pending)))
		}
	}()
	ticker := time.NewTicker(r.opt.CommitInterval)
	defer ticker.Stop()

	commit := func() error {
		if len(pending) == 0 {
			return nil
		}
		// Order matters: chunk rows and manifests first (vectors are derived from them), then
		// the sinks; only when both are durable are the inputs acked and the watermark moved.
		if err := r.parts.Cache.Flush(); err != nil {
			return fmt.Errorf("chunk cache flush: %w", err)
		}
		for _, s := range r.parts.ChunkSinks {
			if err := s.Flush(ctx); err != nil {
				return fmt.Errorf("chunk sink flush: %w", err)
			}
		}
		for _, s := range r.parts.Sinks {
			if err := s.Flush(ctx); err != nil {
				return fmt.Errorf("sink flush: %w", err)
			}
		}
		// Durable now: only committed documents count as written, so a run that fails later
		// still reports what it really delivered.
		for _, it := range pending {
			if it.refused == nil {
				r.C.DocsWritten.Add(1)
			}
			r.ack(ctx, it, it.refused)
			wm.mark(it.seq)
		}
		pending = pending[:0]
		if f, ok := r.parts.Source.(connectors.AckFlusher); ok {
			if err := f.FlushAcks(ctx); err != nil {
				return fmt.Errorf("source checkpoint: %w", err)
			}
		}
		return r.advance(wm)
	}

	for {
		select {
		case it, ok := <-done:
			if !ok {
				// How the run stopped, and what it left, is Run's to say (logStop): only it
				// knows whether the drain deadline passed.
				return commit()
			}
			r.C.ProcessedDocs.Add(1)
			r.C.InFlight.Add(-1)
			written, err := r.handle(ctx, it)
			r.flights.release(it) // its rows are in the cache now, or it failed: waiters no longer need it
			// handle has let go of the text and the window buffers, written or not.
			r.budget.release(it.size)
			if err != nil {
				return err
			}
			if written {
				pending = append(pending, it)
			} else if !abandoned(it) {
				wm.mark(it.seq) // dead-lettered durably: done
				if err := r.advance(wm); err != nil {
					return err
				}
			}
			if len(pending) >= r.opt.CommitEvery {
				if err := commit(); err != nil {
					return err
				}
			}
		case <-ticker.C:
			if err := commit(); err != nil {
				return err
			}
		}
	}
}

func (r *Runner) advance(wm *watermark) error {
	if wm.next == r.C.Watermark.Load() {
		return nil
	}
	r.C.Watermark.Store(wm.next)
	r.C.Commits.Add(1)
	if r.opt.OnCommit != nil {
		if err := r.opt.OnCommit(wm.next); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	return nil
}

// errHardStop is what windows still queued for the GN fail with at the hard stop.
var errHardStop = errors.New("hard stop: drain deadline passed")

func abandoned(it *item) bool {
	return it.bad == nil && it.err != nil && (isCancel(it.err) || it.stage == "stop" || errors.Is(it.err, errHardStop))
}

func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func (r *Runner) ack(ctx context.Context, it *item, err error) {
	if it.ack == nil {
		return
	}
	if aerr := it.ack(ctx, err); aerr != nil {
		r.opt.Logger.Warn("ack failed; the input may be delivered again", "doc", it.doc.ID, "err", aerr)
	}
}

// handle turns one finished item into sink writes (true) or a dead letter (false). A returned
// error is fatal.
func (r *Runner) handle(ctx context.Context, it *item) (bool, error) {
	if it.bad != nil {
		return false, r.deadLetter(ctx, it, schemas.DeadLetter{
			DocID: it.bad.DocID, Position: it.bad.Position, Stage: "source", Err: it.bad.Reason.Error(),
		})
	}
	if it.err != nil {
		if abandoned(it) {
			// Not the document's fault: a hard stop. Not acked, read again next run.
			r.C.Abandoned.Add(1)
			return false, nil
		}
		return false, r.deadLetter(ctx, it, schemas.DeadLetter{
			DocID: it.doc.ID, Source: it.doc.Source, Position: position(it), Stage: it.stage, Err: it.err.Error(),
		})
	}
	var v schemas.DocVector
	if r.parts.Aggregator != nil {
		var err error
		if v, err = aggregate.Vectors(r.parts.Aggregator, r.parts.GNMeanPool, it.emb); err != nil {
			return false, r.deadLetter(ctx, it, schemas.DeadLetter{
				DocID: it.doc.ID, Source: it.doc.Source, Position: position(it), Stage: "aggregate", Err: err.Error(),
			})
		}
	}
	for i, miss := range it.miss {
		if !miss {
			continue
		}
		row := shardcache.Row{Key: it.keys[i], DocID: it.doc.ID, ChunkIndex: int32(i), NTokens: int32(len(it.windows[i])), Embedding: it.emb[i]}
		added, err := r.parts.Cache.Add(row)
		if err != nil {
			return false, fmt.Errorf("chunk cache add (%s window %d): %w", it.doc.ID, i, err)
		}
		if added { // a window two documents in flight both missed is stored once
			r.C.ChunkRowsNew.Add(1)
		}
	}
	m := shardcache.Manifest{
		DocID: it.doc.ID, Version: it.doc.Version, ContentHash: it.hash, Fingerprint: r.parts.Fingerprint,
		K: r.parts.Chunking.K, S: r.parts.Chunking.S, Keys: it.keys,
		Title: it.doc.Title, Source: it.doc.Source, NTokens: it.nTokens,
	}
	if err := r.parts.Cache.PutManifest(m); err != nil {
		return false, fmt.Errorf("doc manifest (%s): %w", it.doc.ID, err)
	}
	r.C.ManifestsPut.Add(1)
	if len(r.parts.ChunkSinks) > 0 {
		cd := schemas.ChunkDoc{
			DocID: it.doc.ID, Source: it.doc.Source, Version: it.doc.Version, Title: it.doc.Title,
			ContentHash: it.hash, NTokens: it.nTokens, Fingerprint: r.parts.Fingerprint,
			K: r.parts.Chunking.K, S: r.parts.Chunking.S, Dim: r.parts.Dim, Keys: it.keys,
			Embeddings: make([]float32, 0, len(it.emb)*r.parts.Dim),
		}
		for _, e := range it.emb {
			cd.Embeddings = append(cd.Embeddings, e...)
		}
		for _, s := range r.parts.ChunkSinks {
			if err := s.WriteChunks(ctx, cd); err != nil {
				return false, fmt.Errorf("chunk sink write (%s): %w", it.doc.ID, err)
			}
		}
	}
	v.DocID, v.Title, v.Source, v.Version = it.doc.ID, it.doc.Title, it.doc.Source, it.doc.Version
	v.ContentHash, v.NChunks, v.NTokens = it.hash, len(it.windows), it.nTokens
	refused, err := connectors.WriteVector(ctx, r.parts.Sinks, v)
	if err != nil {
		return false, fmt.Errorf("sink write (%s): %w", it.doc.ID, err)
	}
	if refused != nil {
		// The other sinks may hold the vector: the input waits for the commit that makes their
		// copies durable, like any written document, and is acked then with the refusal.
		d := schemas.DeadLetter{DocID: it.doc.ID, Source: it.doc.Source, Position: position(it), Stage: "sink", Err: refused.Error()}
		if err := r.writeDeadLetter(ctx, d); err != nil {
			return false, err
		}
		it.refused = errors.New(d.Err)
	}
	// Free the window buffers now: the item stays pending until the commit.
	it.windows, it.emb, it.doc.Text = nil, nil, ""
	return true, nil
}

// position names where an input was read, for its dead letter.
func position(it *item) string {
	if it.doc.Position != "" {
		return it.doc.Position
	}
	return fmt.Sprintf("input %d", it.seq)
}

func (r *Runner) deadLetter(ctx context.Context, it *item, d schemas.DeadLetter) error {
	if err := r.writeDeadLetter(ctx, d); err != nil {
		return err
	}
	r.ack(ctx, it, errors.New(d.Err))
	return nil
}

// writeDeadLetter makes d durable and counts the document as failed.
func (r *Runner) writeDeadLetter(ctx context.Context, d schemas.DeadLetter) error {
	if err := r.parts.DeadLetter.WriteDeadLetter(ctx, d); err != nil {
		return fmt.Errorf("dead-letter output: %w", err)
	}
	r.C.DocsFailed.Add(1)
	r.C.DeadLetters.Add(1)
	r.opt.Logger.Warn("input failed; sent to the dead-letter output", "doc", d.DocID, "stage", d.Stage, "err", d.Err)
	return nil
}
