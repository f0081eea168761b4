package engine

import "testing"

func TestWatermark(t *testing.T) {
	w := newWatermark(5)
	for _, s := range []int64{7, 6, 3, 9} {
		w.mark(s)
	}
	if w.next != 5 {
		t.Fatalf("next %d", w.next)
	}
	w.mark(5)
	if w.next != 8 || len(w.done) != 1 {
		t.Fatalf("next %d done %v", w.next, w.done)
	}
}
