package connectors

import (
	"sync"
	"testing"
)

func TestTally(t *testing.T) {
	var tl Tally
	if st := tl.Stats(0, 0); st.Read != 0 || st.Skipped == nil || st.Text == nil {
		t.Fatalf("zero tally: %+v", st)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := map[string]int64{"repaired_utf8": 2}
			for range 100 {
				tl.Read()
				tl.Skip("empty")
				tl.Text(c)
				if len(c) != 0 {
					t.Error("Text did not clear the counts it added")
					return
				}
				c["repaired_utf8"] = 2
			}
		}()
	}
	wg.Wait()
	st := tl.Stats(5, 10)
	if st.Read != 400 || st.Skipped["empty"] != 400 || st.Text["repaired_utf8"] != 800 || st.BytesRead != 5 || st.BytesTotal != 10 {
		t.Errorf("stats %+v", st)
	}
	st.Skipped["empty"] = 0 // a copy: the tally is not changed through it
	if tl.Stats(0, 0).Skipped["empty"] != 400 {
		t.Error("Stats shares its map with the tally")
	}
}
