package runner

import (
	"context"
	"sync"
)

// byteBudget admits documents while their text bytes in flight stay under a limit. The first
// document is always admitted, so one larger than the limit still runs, alone.
type byteBudget struct {
	limit int64 // 0: no bound
	mu    sync.Mutex
	cond  *sync.Cond
	used  int64
	held  int // documents admitted and not released
}

func newByteBudget(limit int64) *byteBudget {
	b := &byteBudget{limit: limit}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// acquire waits until n more bytes fit (or nothing is held) or ctx is done.
func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	if b.limit <= 0 {
		return nil
	}
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.held > 0 && b.used+n > b.limit {
		if err := ctx.Err(); err != nil {
			return err
		}
		b.cond.Wait()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.used += n
	b.held++
	return nil
}

func (b *byteBudget) release(n int64) {
	if b.limit <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.held--
	b.cond.Broadcast()
	b.mu.Unlock()
}
