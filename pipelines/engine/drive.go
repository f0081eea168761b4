package engine

import (
	"context"
	"errors"
	"io"

	"github.com/cespare/xxhash/v2"
)

// Drive is the commit cadence of a loop that handles one input at a time: it calls next until
// next returns io.EOF or ctx ends, committing after every input that makes a commit Due, and
// when the oldest pending input has waited CommitInterval while next still waits for the
// following one (next's context is cut at that deadline: next must return its error then, and
// is called again after the commit). At the end it commits what is pending and returns nil;
// a fatal error from next or a commit is returned after a last commit attempt (logged when it
// fails too). next writes with a context of its own: the one it is given is for waiting only.
func (l *Ledger) Drive(ctx context.Context, next func(wait context.Context) error) error {
	for {
		wait, cancel := ctx, context.CancelFunc(func() {})
		if len(l.pending) > 0 {
			wait, cancel = context.WithDeadline(ctx, l.lastCommit.Add(l.o.CommitInterval))
		}
		err := next(wait)
		cutShort := err != nil && wait.Err() != nil && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			if err := l.CommitIfDue(context.WithoutCancel(ctx)); err != nil {
				return err
			}
		case cutShort:
			// The commit deadline passed while waiting: what was delivered is committed now
			// rather than when the next input comes.
			if err := l.Commit(context.WithoutCancel(ctx)); err != nil {
				return err
			}
		case errors.Is(err, io.EOF), ctx.Err() != nil:
			return l.Commit(context.WithoutCancel(ctx))
		default:
			if cerr := l.Commit(context.WithoutCancel(ctx)); cerr != nil {
				l.log.Error("final commit", "err", cerr)
			}
			return err
		}
	}
}

// watermark tracks the longest prefix of inputs (by read order) that is fully done, so a
// restart can skip exactly those, whatever order documents finished in.
type watermark struct {
	next int64          // every seq < next is done
	done map[int64]bool // done seqs >= next (bounded by what is in flight)
}

func newWatermark(start int64) watermark { return watermark{next: start, done: map[int64]bool{}} }

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

// idSet remembers the doc ids a run delivered, as 63-bit hashes in an open-addressing table
// (eight bytes a slot, at most half full), up to max ids; the top bit of a slot marks an id
// already seen twice. Two ids share a hash with odds of about n²/2⁶⁴: a miscount, never a
// lost document.
type idSet struct {
	slots []uint64 // 0: empty
	n     int
	max   int
	full  bool
}

const repeatBit = 1 << 63

type idOutcome int

const (
	idNew idOutcome = iota
	idFirstRepeat
	idRepeat
	idFull // the set just reached max: nothing more is remembered
	idUnknown
)

func newIDSet(max int) *idSet { return &idSet{slots: make([]uint64, 1024), max: max} }

func (s *idSet) add(id string) idOutcome {
	if s.full {
		return idUnknown
	}
	h := xxhash.Sum64String(id) &^ repeatBit
	if h == 0 {
		h = 1
	}
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch v := s.slots[i]; {
		case v == 0:
			if s.n >= s.max {
				s.full = true
				return idFull
			}
			s.slots[i] = h
			s.n++
			if 2*s.n > len(s.slots) {
				s.grow()
			}
			return idNew
		case v&^repeatBit == h:
			if v&repeatBit != 0 {
				return idRepeat
			}
			s.slots[i] |= repeatBit
			return idFirstRepeat
		}
	}
}

func (s *idSet) grow() {
	old := s.slots
	s.slots = make([]uint64, 2*len(old))
	mask := uint64(len(s.slots) - 1)
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := (v &^ repeatBit) & mask
		for s.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = v
	}
}
