package runner

import (
	"sync"

	"github.com/reignpipe/reignpipe/pipelines/engine"
)

// idOrder keeps copies of one doc id in input order on their way to the ledger. Documents
// finish out of order (a long one behind a short one), and every sink keeps, of two copies
// with the same version, the one written last; so when an input holds a doc id twice and both
// copies are in flight together, the later copy waits at the writer until the earlier one is
// handled. Then "readers keep the later copy in the input" holds whatever order the copies
// finished in. Only ids in flight are held, so memory is bounded by the queues.
type idOrder struct {
	mu       sync.Mutex
	inflight map[string][]int64 // doc id → seqs in flight, in read order
	parked   map[string][]*item // doc id → copies waiting for an earlier one
}

func newIDOrder() *idOrder {
	return &idOrder{inflight: map[string][]int64{}, parked: map[string][]*item{}}
}

// enter registers an input as it is read.
func (o *idOrder) enter(it *item) {
	o.mu.Lock()
	o.inflight[it.in.DocID] = append(o.inflight[it.in.DocID], it.in.Seq)
	o.mu.Unlock()
}

// leave removes an input that will not reach handle.
func (o *idOrder) leave(it *item) {
	o.mu.Lock()
	o.remove(it)
	o.mu.Unlock()
}

func (o *idOrder) remove(it *item) {
	id := it.in.DocID
	seqs := o.inflight[id]
	for i, s := range seqs {
		if s == it.in.Seq {
			seqs = append(seqs[:i], seqs[i+1:]...)
			break
		}
	}
	if len(seqs) == 0 {
		delete(o.inflight, id)
	} else {
		o.inflight[id] = seqs
	}
}

// handle passes it to fn once no earlier copy of its doc id is in flight, and then every
// parked later copy whose turn has come. Bad inputs (no document) pass at once.
func (o *idOrder) handle(it *item, fn func(*item) error) error {
	if it.bad != nil {
		return fn(it)
	}
	o.mu.Lock()
	id := it.in.DocID
	if seqs := o.inflight[id]; len(seqs) > 0 && seqs[0] < it.in.Seq {
		o.parked[id] = append(o.parked[id], it)
		o.mu.Unlock()
		return nil
	}
	o.mu.Unlock()
	for it != nil {
		err := fn(it)
		o.mu.Lock()
		o.remove(it)
		it = o.next(id)
		o.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// next takes the parked copy of id that is now first in flight, if any.
func (o *idOrder) next(id string) *item {
	seqs := o.inflight[id]
	if len(seqs) == 0 {
		return nil
	}
	for i, p := range o.parked[id] {
		if p.in.Seq == seqs[0] {
			rest := append(o.parked[id][:i:i], o.parked[id][i+1:]...)
			if len(rest) == 0 {
				delete(o.parked, id)
			} else {
				o.parked[id] = rest
			}
			return p
		}
	}
	return nil
}

// abandonParked gives up the copies still waiting once the run failed.
func (o *idOrder) abandonParked(led *engine.Ledger, c *engine.Counters) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, its := range o.parked {
		for _, it := range its {
			c.Processed.Add(1)
			c.InFlight.Add(-1)
			led.Abandon(it.in)
		}
		delete(o.parked, id)
	}
}
