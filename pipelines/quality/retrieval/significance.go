package retrieval

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Defaults from the reference evaluation (section 7).
const (
	DefaultResamples = 10000
	DefaultSeed      = 42
	DefaultAlpha     = 0.05
)

// pcgStream is the fixed second PCG word: one seed then names one stream, and changing it
// would silently change every published interval.
const pcgStream = 0x9e3779b97f4a7c15

func checkPaired(a, b []float64) error {
	if len(a) != len(b) {
		return fmt.Errorf("retrieval: paired test needs equal lengths, got %d and %d", len(a), len(b))
	}
	if len(a) == 0 {
		return fmt.Errorf("retrieval: paired test needs at least one query")
	}
	for i := range a {
		if math.IsNaN(a[i]) || math.IsNaN(b[i]) || math.IsInf(a[i], 0) || math.IsInf(b[i], 0) {
			return fmt.Errorf("retrieval: non-finite score at query %d", i)
		}
	}
	return nil
}

// PairedBootstrapCI returns mean(a−b) and its (1−alpha) percentile-bootstrap interval:
// B times, draw len(a) query indices with replacement and take the mean paired difference;
// lo and hi are the alpha/2 and 1−alpha/2 quantiles of those B means (linear interpolation
// between order statistics, numpy's default). B <= 0 means DefaultResamples and alpha 0
// means DefaultAlpha. Resampling pairs, not each system separately, keeps the per-query
// correlation that makes paired comparisons sensitive.
func PairedBootstrapCI(a, b []float64, B int, seed uint64, alpha float64) (meanDiff, lo, hi float64, err error) {
	if err := checkPaired(a, b); err != nil {
		return 0, 0, 0, err
	}
	if B <= 0 {
		B = DefaultResamples
	}
	if alpha == 0 {
		alpha = DefaultAlpha
	}
	if !(alpha > 0 && alpha < 1) {
		return 0, 0, 0, fmt.Errorf("retrieval: alpha must be in (0, 1), got %v", alpha)
	}
	n := len(a)
	d := make([]float64, n)
	for i := range a {
		d[i] = a[i] - b[i]
		meanDiff += d[i]
	}
	meanDiff /= float64(n)
	rng := rand.New(rand.NewPCG(seed, pcgStream))
	means := make([]float64, B)
	for r := range means {
		s := 0.0
		for range n {
			s += d[rng.IntN(n)]
		}
		means[r] = s / float64(n)
	}
	sort.Float64s(means)
	return meanDiff, quantile(means, alpha/2), quantile(means, 1-alpha/2), nil
}

// quantile of sorted xs at q in [0, 1], interpolating at position q·(len−1).
func quantile(xs []float64, q float64) float64 {
	pos := q * float64(len(xs)-1)
	i := int(math.Floor(pos))
	if i >= len(xs)-1 {
		return xs[len(xs)-1]
	}
	f := pos - float64(i)
	return xs[i] + f*(xs[i+1]-xs[i])
}

// PairedRandomizationP is the two-sided paired randomisation (sign-flip) test of mean(a−b)=0:
// R times, flip the sign of each query's difference with probability ½ and count the
// resamples whose |mean| reaches the observed |mean|; p = (count + 1)/(R + 1), which counts
// the observed labelling as one permutation so p is never 0. R <= 0 means DefaultResamples.
func PairedRandomizationP(a, b []float64, R int, seed uint64) (float64, error) {
	if err := checkPaired(a, b); err != nil {
		return 0, err
	}
	if R <= 0 {
		R = DefaultResamples
	}
	n := len(a)
	d := make([]float64, n)
	obs, scale := 0.0, 0.0
	for i := range a {
		d[i] = a[i] - b[i]
		obs += d[i]
		scale += math.Abs(d[i])
	}
	obs = math.Abs(obs)
	// Sums are compared rather than means (same order, one division fewer). The tolerance
	// absorbs summation rounding so a resample equal to the observed split is not missed
	// by one ulp.
	thresh := obs - 1e-12*scale
	rng := rand.New(rand.NewPCG(seed, pcgStream))
	count := 0
	for range R {
		s := 0.0
		var bits uint64
		for i, x := range d {
			if i%64 == 0 {
				bits = rng.Uint64()
			}
			if bits&1 == 1 {
				x = -x
			}
			bits >>= 1
			s += x
		}
		if math.Abs(s) >= thresh {
			count++
		}
	}
	return float64(count+1) / float64(R+1), nil
}
