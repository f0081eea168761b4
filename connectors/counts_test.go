package connectors

import (
	"maps"
	"testing"
)

// Counts reports only what a Commit (a successful Flush) followed, every name asked for present.
func TestFlushCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  string // w: written, d: deleted, c: commit
		want map[string]int64
	}{
		{"nothing", "", map[string]int64{"written": 0, "deleted": 0}},
		{"queued only", "wwd", map[string]int64{"written": 0, "deleted": 0}},
		{"committed", "wwdc", map[string]int64{"written": 2, "deleted": 1}},
		{"after the last commit left out", "wdcwwd", map[string]int64{"written": 1, "deleted": 1}},
		{"two commits add up", "wcwdc", map[string]int64{"written": 2, "deleted": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c FlushCounts
			for _, op := range tc.ops {
				switch op {
				case 'w':
					c.Add(CountWritten)
				case 'd':
					c.Add(CountDeleted)
				case 'c':
					c.Commit()
				}
			}
			if got := c.Counts(CountWritten, CountDeleted); !maps.Equal(got, tc.want) {
				t.Fatalf("%v, want %v", got, tc.want)
			}
		})
	}
}
