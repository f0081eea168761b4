package chunk

import (
	"testing"
)

func seq(n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(1000 + i)
	}
	return s
}

func TestCount(t *testing.T) {
	cases := []struct {
		name string
		p    Params
		t, n int
	}{
		{"empty text", Params{512, 512}, 0, 1},
		{"one token", Params{512, 512}, 1, 1},
		{"T=K-2 fits", Params{512, 512}, 510, 1},
		{"T=K-1 spills", Params{512, 512}, 511, 2},
		{"T=K", Params{512, 512}, 512, 2},
		{"two full", Params{512, 512}, 1020, 2},
		{"reference example S=512", Params{512, 512}, 1805, 4},
		{"reference example S=384", Params{512, 384}, 1805, 5},
		{"S<K overlap", Params{10, 6}, 9, 2},
		{"S=K small", Params{5, 5}, 7, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.p.Count(c.t); got != c.n {
				t.Fatalf("Count(%d) with %+v = %d, want %d", c.t, c.p, got, c.n)
			}
			if got := len(c.p.Windows(seq(c.t), 101, 102)); got != c.n {
				t.Fatalf("len(Windows) = %d, want %d", got, c.n)
			}
		})
	}
}

// TestWindowsCoverReference checks every window against the reference definition: window i holds
// content tokens [i*(S-2), min(i*(S-2)+K-2, T)), framed by [CLS]/[SEP], and windows stop at the
// first one that reaches T.
func TestWindowsCoverReference(t *testing.T) {
	for _, p := range []Params{{512, 512}, {512, 384}, {8, 8}, {8, 5}, {8, 3}, {3, 3}} {
		for _, T := range []int{0, 1, p.K - 3, p.K - 2, p.K - 1, p.K, 3*p.K + 7} {
			if T < 0 {
				continue
			}
			ids := seq(T)
			ws := p.Windows(ids, 101, 102)
			for i, w := range ws {
				if len(w) > p.K {
					t.Fatalf("%+v T=%d window %d has %d tokens > K", p, T, i, len(w))
				}
				if w[0] != 101 || w[len(w)-1] != 102 {
					t.Fatalf("%+v T=%d window %d not framed by CLS/SEP: %v", p, T, i, w)
				}
				start := i * (p.S - 2)
				end := min(start+p.K-2, T)
				body := w[1 : len(w)-1]
				if len(body) != end-start {
					t.Fatalf("%+v T=%d window %d: %d content tokens, want %d", p, T, i, len(body), end-start)
				}
				for j, id := range body {
					if id != ids[start+j] {
						t.Fatalf("%+v T=%d window %d token %d = %d, want %d", p, T, i, j, id, ids[start+j])
					}
				}
				last := i == len(ws)-1
				if reaches := end == T; reaches != last {
					t.Fatalf("%+v T=%d window %d reaches T=%v but last=%v", p, T, i, reaches, last)
				}
			}
		}
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Params{{2, 2}, {512, 0}, {512, 513}, {512, 2}} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if err := Default.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestKeyDependsOnEverything(t *testing.T) {
	w := []int32{101, 7, 8, 102}
	base := Key("fp", Default, w)
	if Key("fp", Default, []int32{101, 7, 8, 102}) != base {
		t.Fatal("key not deterministic")
	}
	for name, k := range map[string]uint64{
		"fingerprint": Key("fq", Default, w),
		"K":           Key("fp", Params{511, 511}, w),
		"S":           Key("fp", Params{512, 384}, w),
		"tokens":      Key("fp", Default, []int32{101, 8, 7, 102}),
	} {
		if k == base {
			t.Errorf("key ignores %s", name)
		}
	}
}
