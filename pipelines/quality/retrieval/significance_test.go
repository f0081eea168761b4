package retrieval

import (
	"math"
	"slices"
	"testing"
)

var (
	sysA = []float64{0.3, 0.7, 0.2, 0.9, 0.4, 0.6}
	sysB = []float64{0.1, 0.8, 0.2, 0.5, 0.3, 0.6}
)

func TestQuantile(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5}
	// pos = q·4: 0.025 → 0.1 → 1 + 0.1·(2−1) = 1.1; 0.975 → 3.9 → 4 + 0.9 = 4.9.
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.025, 1.1}, {0.5, 3}, {0.975, 4.9}, {1, 5}} {
		if g := quantile(xs, c.q); !near(g, c.want) {
			t.Errorf("quantile(%v) = %v, want %v", c.q, g, c.want)
		}
	}
}

func TestPairedBootstrapCI(t *testing.T) {
	cases := []struct {
		name         string
		a, b         []float64
		mean, lo, hi float64
	}{
		// Every resample of identical systems has mean difference 0.
		{"identical", []float64{0.1, 0.5, 0.9}, []float64{0.1, 0.5, 0.9}, 0, 0, 0},
		// One query: every resample is that query, difference 1.
		{"single", []float64{1}, []float64{0}, 1, 1, 1},
		// d = (0, 1): resample means are 0, ½, 1 with probability ¼, ½, ¼, so the 2.5% and
		// 97.5% quantiles fall inside the 0 and 1 masses.
		{"two", []float64{0, 1}, []float64{0, 0}, 0.5, 0, 1},
	}
	for _, c := range cases {
		m, lo, hi, err := PairedBootstrapCI(c.a, c.b, 0, DefaultSeed, 0)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(m-c.mean) > 1e-12 || math.Abs(lo-c.lo) > 1e-12 || math.Abs(hi-c.hi) > 1e-12 {
			t.Errorf("%s: got (%v, %v, %v), want (%v, %v, %v)", c.name, m, lo, hi, c.mean, c.lo, c.hi)
		}
	}
	m1, lo1, hi1, _ := PairedBootstrapCI(sysA, sysB, 2000, 7, 0.1)
	m2, lo2, hi2, _ := PairedBootstrapCI(sysA, sysB, 2000, 7, 0.1)
	if m1 != m2 || lo1 != lo2 || hi1 != hi2 {
		t.Error("not deterministic for a fixed seed")
	}
	// mean d = (0.2 − 0.1 + 0 + 0.4 + 0.1 + 0)/6 = 0.1.
	if !near(m1, 0.1) || !(lo1 <= m1 && m1 <= hi1) || lo1 < -0.1 || hi1 > 0.4 {
		t.Errorf("interval (%v, %v, %v)", m1, lo1, hi1)
	}
	for _, bad := range []struct {
		a, b  []float64
		alpha float64
	}{
		{[]float64{1}, []float64{1, 2}, 0.05},
		{nil, nil, 0.05},
		{[]float64{math.NaN()}, []float64{1}, 0.05},
		{[]float64{1}, []float64{math.Inf(1)}, 0.05},
		{[]float64{1}, []float64{1}, 1.5},
		{[]float64{1}, []float64{1}, math.NaN()},
	} {
		if _, _, _, err := PairedBootstrapCI(bad.a, bad.b, 10, 1, bad.alpha); err == nil {
			t.Errorf("accepted %v %v alpha=%v", bad.a, bad.b, bad.alpha)
		}
	}
}

func TestPairedRandomizationP(t *testing.T) {
	const R = 10000
	ones, zeros := slices.Repeat([]float64{1}, 20), make([]float64, 20)
	cases := []struct {
		name      string
		a, b      []float64
		want, tol float64
	}{
		// All differences 0: every flip reaches |0|, p = (R+1)/(R+1).
		{"identical", []float64{0.2, 0.4}, []float64{0.2, 0.4}, 1, 0},
		// d = (1, −1): observed sum 0, every flip reaches it.
		{"cancel", []float64{1, 0}, []float64{0, 1}, 1, 0},
		// One query: |±1| = 1 always.
		{"single", []float64{1}, []float64{0}, 1, 0},
		// d = (1, 1): |sum| = 2 only when both signs agree, probability ½.
		{"half", []float64{1, 1}, []float64{0, 0}, 0.5, 0.02},
		// Twenty equal differences: |sum| = 20 has probability 2^−19 ≈ 2e−6, so p ≈ 1/(R+1).
		{"strong", ones, zeros, 1.0 / (R + 1), 2.0 / (R + 1)},
	}
	for _, c := range cases {
		p, err := PairedRandomizationP(c.a, c.b, R, DefaultSeed)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(p-c.want) > c.tol+1e-12 {
			t.Errorf("%s: p = %v, want %v ± %v", c.name, p, c.want, c.tol)
		}
	}
	p1, _ := PairedRandomizationP(sysA, sysB, 0, 3)
	p2, _ := PairedRandomizationP(sysA, sysB, 0, 3)
	if p1 != p2 || p1 <= 0 || p1 > 1 {
		t.Errorf("p = %v, %v", p1, p2)
	}
}
