package tune

import (
	"errors"
	"fmt"
	"testing"
)

// The promotion rule itself, on made-up intervals: only a lower bound strictly above 0 promotes.
func TestDecide(t *testing.T) {
	for _, c := range []struct {
		diff, lo, hi float64
		err          error
		want         bool
	}{
		{0.05, 0.01, 0.09, nil, true},
		{0.001, 1e-9, 0.002, nil, true},
		{0.02, 0, 0.04, nil, false},       // touches 0: not above it
		{0.02, -0.01, 0.05, nil, false},   // better on average, not significantly
		{-0.03, -0.06, -0.01, nil, false}, // REIGN loses
		{0, 0, 0, nil, false},             // identical systems
		{0.5, 0.4, 0.6, errors.New("need at least 2 paired values"), false},
	} {
		got, reason := Decide(c.diff, c.lo, c.hi, c.err)
		if got != c.want || reason == "" {
			t.Errorf("Decide(%v, [%v, %v], %v) = %v %q, want %v", c.diff, c.lo, c.hi, c.err, got, reason, c.want)
		}
	}
}

// The split is a function of (seed, id): the same on every call, different under another seed,
// and close to the asked-for shares.
func TestAssign(t *testing.T) {
	n := map[string]int{}
	moved := 0
	for i := 0; i < 10000; i++ {
		id := fmt.Sprintf("src:doc-%d", i)
		s := Assign(id, 42, 10, 10)
		if Assign(id, 42, 10, 10) != s {
			t.Fatalf("%s: two answers", id)
		}
		if Assign(id, 7, 10, 10) != s {
			moved++
		}
		n[s]++
	}
	if n[Train] < 7700 || n[Train] > 8300 || n[Val] < 850 || n[Val] > 1150 || n[Test] < 850 || n[Test] > 1150 {
		t.Fatalf("shares %v, want about 80/10/10", n)
	}
	if moved < 1000 {
		t.Fatalf("another seed moved only %d of 10000 documents", moved)
	}
}

func TestHalves(t *testing.T) {
	if _, _, ok := Halves([]uint64{1}); ok {
		t.Fatal("one window gave an example")
	}
	for _, c := range []struct{ n, q int }{{2, 1}, {3, 1}, {4, 2}, {7, 3}} {
		keys := make([]uint64, c.n)
		for i := range keys {
			keys[i] = uint64(i)
		}
		q, p, ok := Halves(keys)
		if !ok || len(q) != c.q || len(q)+len(p) != c.n || q[len(q)-1]+1 != p[0] {
			t.Fatalf("%d windows: %v | %v", c.n, q, p)
		}
	}
}

func TestSizeFor(t *testing.T) {
	if SizeFor(10) != "small-l2" || SizeFor(BaseL3From-1) != "small-l2" || SizeFor(BaseL3From) != "base-l3" {
		t.Fatal("size rule")
	}
}
