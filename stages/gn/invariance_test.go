package gn

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// batchDiff compares a window's vector inside a batch with the same window embedded alone.
type batchDiff struct {
	bitEqual  int     // windows whose 384 float32s are identical bit for bit
	compared  int     // windows compared
	maxAbs    float64 // largest |Δ| of one component
	minCosine float64
}

func (d *batchDiff) add(alone, inBatch []float32) {
	d.compared++
	same := true
	for i := range alone {
		if math.Float32bits(alone[i]) != math.Float32bits(inBatch[i]) {
			same = false
		}
		d.maxAbs = max(d.maxAbs, math.Abs(float64(alone[i])-float64(inBatch[i])))
	}
	if same {
		d.bitEqual++
	}
	d.minCosine = min(d.minCosine, cosine(inBatch, f64(alone)))
}

// Batch invariance, measured bit for bit: every window is embedded alone, then inside
// batches of other sizes and lengths (so it is padded, or sets the padding of others, and the
// GEMMs run with other shapes). The chunk cache keys a window by its ids only and keeps the
// first vector stored, so whether the GN's answer depends on the batch decides whether two runs
// of the same corpus, batched differently, store the same bits.
//
// On ONNX Runtime 1.24.2's CPU build (MLAS kernels) they are bit-identical: padding is masked
// to exact zeros, and the kernels split work by rows and columns, never by the summed
// dimension, so a window's hidden states do not depend on its batch
// (ops/bench/results/gn-2026-12-01.md). The test fails on the first difference, reporting the
// largest |Δ| and the cosine, because a different build, provider or kernel could change that.
// Bits can still differ between machines whose CPUs pick other kernels (AVX2 vs AVX-512): that
// is not what this test checks.
//
// The int8 variants must pass the same test. The static ones (make gn-int8) fix every scale at
// quantisation time; the row-wise ones (make gn-int8r) take each token's scale from that token
// alone and multiply in exact integers. Either way a window's arithmetic is the same in any
// batch. (The -q jars' dynamic int8 models fail it: their scales come from the whole batch.)
func TestBatchInvariance(t *testing.T) {
	names := slices.Clone(gns)
	for _, name := range gns {
		// The offline-fused variants (gn.optimized, make gn-optimized; their fused Attention
		// kernel is another code path) and the int8 ones.
		names = append(names, builtVariants(t, name, "-opt", "-int8s", "-int8r")...)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			m := loadGN(t, name)
			rng := rand.New(rand.NewPCG(15, 3))
			lengths := []int{510, 257, 64, 7, 1}
			var ws [][]int32
			for _, n := range lengths {
				ws = append(ws, window(rng, n))
			}
			alone := make([][]float32, len(ws))
			for i, w := range ws {
				alone[i] = embedOne(t, m, w)[0]
			}
			d := batchDiff{minCosine: 1}
			// Every pair (each member is checked, so the longer pads the shorter once), then
			// growing batches in random order.
			for i := range ws {
				for j := i + 1; j < len(ws); j++ {
					out := embedOne(t, m, ws[i], ws[j])
					d.add(alone[i], out[0])
					d.add(alone[j], out[1])
				}
			}
			for n := 3; n <= len(ws); n++ {
				perm := rng.Perm(len(ws))[:n]
				var batch [][]int32
				for _, k := range perm {
					batch = append(batch, ws[k])
				}
				out := embedOne(t, m, batch...)
				for b, k := range perm {
					d.add(alone[k], out[b])
				}
			}
			// Four copies of one window: same shape for all, no padding at all.
			out := embedOne(t, m, ws[2], ws[2], ws[2], ws[2])
			for _, v := range out {
				d.add(alone[2], v)
			}
			// One intra-op thread instead of ORT's default (all cores): the work is split
			// differently, which must not change the bits either.
			model, tok := testenv.GN(t, name)
			one, err := m.rt.Load(Config{Name: name, Model: model, Tokenizer: tok, IntraOpThreads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			for i, w := range ws {
				d.add(alone[i], embedOne(t, one, w)[0])
			}
			t.Logf("%s: %d of %d vectors (in batches, or from a 1-thread session) bit-identical to the window alone; max |Δ| %.3g, min cosine 1 − %.3g",
				name, d.bitEqual, d.compared, d.maxAbs, 1-d.minCosine)
			if d.bitEqual != d.compared {
				t.Fatalf("%s: %d of %d in-batch vectors differ from the window alone: max |Δ| %.3g, min cosine 1 − %.3g; the cache keeps the first vector stored, so runs batched differently would store different bits",
					name, d.compared-d.bitEqual, d.compared, d.maxAbs, 1-d.minCosine)
			}
		})
	}
}

// variantMake is the make target that builds each GN variant the tests know.
var variantMake = map[string]string{"-opt": "gn-optimized", "-int8s": "gn-int8", "-int8r": "gn-int8r"}

// builtVariants returns the names of GN name's variants that are built. The row-wise int8 ones
// are built by make test itself (make gn-int8r, from the test venv), so under REIGNPIPE_STRICT
// their absence fails the test rather than skipping the check; the others need the peers venv
// and are checked only when there.
func builtVariants(t *testing.T, name string, variants ...string) []string {
	t.Helper()
	var built []string
	for _, v := range variants {
		switch _, err := os.Stat(filepath.Join(testenv.Home(), "gn", name+v, "model.onnx")); {
		case err == nil:
			built = append(built, name+v)
		case v == "-int8r" && os.Getenv("REIGNPIPE_STRICT") == "1":
			t.Errorf("%s%s not built: make test builds it first (make %s)", name, v, variantMake[v])
		default:
			t.Logf("%s%s not built (make %s): not checked", name, v, variantMake[v])
		}
	}
	return built
}
