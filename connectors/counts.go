package connectors

import "sync"

// Outcome names a buffering sink reports through SinkCounter: vectors written and deletions
// (tombstones) written, each counted once a Flush made it durable. A database sink reports its
// upsert's finer outcomes instead, under the same "deleted" for what it removed.
const (
	CountWritten = "written"
	CountDeleted = "deleted"
)

// FlushCounts counts what a buffering sink queued and commits the counts when a Flush succeeds,
// so that its SinkCounter reports only what was made durable (the contract of Counts). Add and
// Commit are called from the sink's one writing goroutine; Counts from any.
type FlushCounts struct {
	mu                 sync.Mutex
	pending, committed map[string]int64
}

// Add counts one queued item under name.
func (c *FlushCounts) Add(name string) {
	c.mu.Lock()
	if c.pending == nil {
		c.pending = map[string]int64{}
	}
	c.pending[name]++
	c.mu.Unlock()
}

// Commit moves what was queued into the committed counts: call it after a Flush succeeded.
func (c *FlushCounts) Commit() {
	c.mu.Lock()
	if c.committed == nil {
		c.committed = map[string]int64{}
	}
	for k, n := range c.pending {
		c.committed[k] += n
	}
	clear(c.pending)
	c.mu.Unlock()
}

// Counts is the committed counts, every name in names present (zero when nothing came of it).
func (c *FlushCounts) Counts(names ...string) map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(names)+len(c.committed))
	for _, k := range names {
		out[k] = 0
	}
	for k, n := range c.committed {
		out[k] = n
	}
	return out
}
