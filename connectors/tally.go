package connectors

import (
	"maps"
	"sync"
)

// Tally is what a source counts for its Stats: documents handed out, inputs skipped by reason,
// and text-policy repairs. Safe for use from any goroutine; the zero value is ready.
type Tally struct {
	mu      sync.Mutex
	read    int64
	skipped map[string]int64
	text    map[string]int64
}

// Read counts one document handed out.
func (t *Tally) Read() {
	t.mu.Lock()
	t.read++
	t.mu.Unlock()
}

// Skip counts one input skipped for reason ("empty", "redirect", ...).
func (t *Tally) Skip(reason string) {
	t.mu.Lock()
	if t.skipped == nil {
		t.skipped = map[string]int64{}
	}
	t.skipped[reason]++
	t.mu.Unlock()
}

// Text adds one input's text-policy counts (textpolicy.Counts) and clears c for the next.
func (t *Tally) Text(c map[string]int64) {
	if len(c) == 0 {
		return
	}
	t.mu.Lock()
	if t.text == nil {
		t.text = map[string]int64{}
	}
	for k, v := range c {
		t.text[k] += v
	}
	t.mu.Unlock()
	clear(c)
}

// Stats is the tally with the source's byte progress.
func (t *Tally) Stats(bytesRead, bytesTotal int64) SourceStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	sk := maps.Clone(t.skipped)
	if sk == nil {
		sk = map[string]int64{}
	}
	text := maps.Clone(t.text)
	if text == nil {
		text = map[string]int64{}
	}
	return SourceStats{Read: t.read, Skipped: sk, Text: text, BytesRead: bytesRead, BytesTotal: bytesTotal}
}
