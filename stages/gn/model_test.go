package gn

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

var gns = []string{"bge-small-en-v15", "all-minilm-l6-v2"}

// One Runtime for the whole test binary, as in the process: onnxruntime_go's environment is
// global, so tests cannot each own one.
var (
	rtOnce   sync.Once
	rtShared *Runtime
	rtErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if rtShared != nil {
		if err := rtShared.Close(); err != nil {
			println("gn: closing runtime:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

func testRuntime(t testing.TB) *Runtime {
	t.Helper()
	lib := testenv.ORTLibrary(t)
	rtOnce.Do(func() { rtShared, rtErr = NewRuntime(lib) })
	if rtErr != nil {
		t.Fatal(rtErr)
	}
	return rtShared
}

func loadGN(t testing.TB, name string) *Model {
	t.Helper()
	rt := testRuntime(t)
	model, tok := testenv.GN(t, name)
	m, err := rt.Load(Config{Name: name, Model: model, Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

// window is [CLS] + n content ids + [SEP], content drawn from ordinary word-piece ids.
func window(rng *rand.Rand, n int) []int32 {
	w := []int32{101}
	for range n {
		w = append(w, int32(1000+rng.IntN(28000)))
	}
	return append(w, 102)
}

func embedOne(t *testing.T, m *Model, windows ...[]int32) [][]float32 {
	t.Helper()
	out := make([][]float32, len(windows))
	for i := range out {
		out[i] = make([]float32, m.Dim())
	}
	if err := m.Embed(windows, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func cosine(a []float32, b []float64) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * b[i]
		aa += float64(a[i]) * float64(a[i])
		bb += b[i] * b[i]
	}
	return ab / math.Sqrt(aa*bb)
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func TestModelInterface(t *testing.T) {
	for _, name := range gns {
		m := loadGN(t, name)
		t.Logf("%s: inputs %v, output %q, dim %d, fingerprint %s", name, m.inputNames, m.outputName, m.Dim(), m.Fingerprint())
		if m.Dim() != 384 || m.outputName != "last_hidden_state" || len(m.inputNames) != 3 {
			t.Fatalf("%s: unexpected interface", name)
		}
	}
}

func TestBatchSizeInvarianceAndNorm(t *testing.T) {
	for _, name := range gns {
		t.Run(name, func(t *testing.T) {
			m := loadGN(t, name)
			rng := rand.New(rand.NewPCG(1, 2))
			short, mid, long := window(rng, 7), window(rng, 200), window(rng, 510)
			alone := embedOne(t, m, short)[0]
			padded := embedOne(t, m, long, short, mid)
			if c := cosine(alone, f64(padded[1])); c < 0.99999 {
				t.Fatalf("same window alone vs padded in a batch: cosine %.7f", c)
			}
			midAlone := embedOne(t, m, mid)[0]
			if c := cosine(midAlone, f64(padded[2])); c < 0.99999 {
				t.Fatalf("mid window alone vs in a batch: cosine %.7f", c)
			}
			for _, v := range append(padded, alone) {
				var ss float64
				for _, x := range v {
					ss += float64(x) * float64(x)
				}
				if math.Abs(math.Sqrt(ss)-1) > 1e-5 {
					t.Fatalf("norm %.7f, want 1", math.Sqrt(ss))
				}
			}
			st := m.Stats()
			if st.ForwardPasses != 3 || st.Windows != 5 || st.RealTokens != 9+202+512+202+9 || st.PaddedTokens != 9+3*512+202 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	rt := testRuntime(t)
	fps := map[string]string{}
	for _, name := range gns {
		a := loadGN(t, name)
		b := loadGN(t, name)
		if a.Fingerprint() != b.Fingerprint() || len(a.Fingerprint()) != 64 {
			t.Fatalf("%s: fingerprint %q then %q", name, a.Fingerprint(), b.Fingerprint())
		}
		fps[name] = a.Fingerprint()
	}
	if fps[gns[0]] == fps[gns[1]] {
		t.Fatal("two GNs share a fingerprint")
	}
	model, _ := testenv.GN(t, gns[0])
	_, otherTok := testenv.GN(t, gns[1])
	m, err := rt.Load(Config{Model: model, Tokenizer: otherTok})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Fingerprint() == fps[gns[0]] {
		t.Fatal("fingerprint ignores the tokenizer")
	}
}

func TestEmbedRejectsBadInput(t *testing.T) {
	m := loadGN(t, "all-minilm-l6-v2")
	d := m.Dim()
	ok := []int32{101, 2000, 102}
	cases := map[string]struct {
		w   [][]int32
		out [][]float32
	}{
		"count mismatch":  {[][]int32{ok}, nil},
		"empty window":    {[][]int32{{}}, [][]float32{make([]float32, d)}},
		"too long":        {[][]int32{make([]int32, 513)}, [][]float32{make([]float32, d)}},
		"negative id":     {[][]int32{{101, -5, 102}}, [][]float32{make([]float32, d)}},
		"id past vocab":   {[][]int32{{101, 1 << 30, 102}}, [][]float32{make([]float32, d)}},
		"wrong out width": {[][]int32{ok}, [][]float32{make([]float32, d-1)}},
	}
	for name, c := range cases {
		if err := m.Embed(c.w, c.out); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if err := m.Embed(nil, nil); err != nil {
		t.Errorf("empty call: %v", err)
	}
	embedOne(t, m, ok) // still usable after a failed pass
	m.Close()
	if err := m.Embed([][]int32{ok}, [][]float32{make([]float32, d)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Embed after Close: %v", err)
	}
}

func TestConfigAndRuntimeErrors(t *testing.T) {
	good := Config{Model: "m.onnx", Tokenizer: "t.json"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{
		{Tokenizer: "t.json"}, {Model: "m.onnx"},
		{Model: "m", Tokenizer: "t", Provider: "gpu"},
		{Model: "m", Tokenizer: "t", Provider: "cuda:x"},
		{Model: "m", Tokenizer: "t", Provider: "cuda:-1"},
		{Model: "m", Tokenizer: "t", IntraOpThreads: -1},
		{Model: "m", Tokenizer: "t", MaxPositions: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := NewRuntime(""); err == nil {
		t.Error("empty library path accepted")
	}
	if _, err := NewRuntime("/nonexistent/libonnxruntime.so"); err == nil {
		t.Error("missing library accepted")
	}
	rt := testRuntime(t)
	if _, err := NewRuntime(rt.LibraryPath()); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("second environment: %v", err)
	}
	if _, err := rt.Load(Config{Model: "/nonexistent.onnx", Tokenizer: "/nonexistent.json"}); err == nil {
		t.Error("missing model accepted")
	}
	_, tok := testenv.GN(t, gns[0])
	if _, err := rt.Load(Config{Model: tok, Tokenizer: tok}); err == nil {
		t.Error("a JSON file loaded as a model")
	}
}

// The fetched ORT library is CPU-only: cuda:N must fail at Load with an error that says so.
func TestCUDAProviderOnCPUBuild(t *testing.T) {
	rt := testRuntime(t)
	model, tok := testenv.GN(t, "all-minilm-l6-v2")
	m, err := rt.Load(Config{Model: model, Tokenizer: tok, Provider: "cuda:0"})
	if err == nil {
		m.Close()
		t.Skip("this ONNX Runtime library has CUDA; the CPU-only error path cannot be tested here")
	}
	for _, want := range []string{"cannot run CUDA", "CPU-only build", "ops/fetch --gpu"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error does not say %q: %v", want, err)
		}
	}
	t.Logf("cuda:0 on the CPU build: %v", err)
}

func TestBatcherWithModel(t *testing.T) {
	m := loadGN(t, "all-minilm-l6-v2")
	rng := rand.New(rand.NewPCG(3, 4))
	var ws [][]int32
	for i := range 12 {
		ws = append(ws, window(rng, 5+i*23))
	}
	want := embedOne(t, m, ws...)
	b, err := NewBatcher(m, BatcherOptions{TokenBudget: 1024, MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	got := make([][]float32, len(ws))
	errs := make(chan error, len(ws))
	for i, w := range ws {
		got[i] = make([]float32, m.Dim())
		if err := b.Submit(t.Context(), Request{Tokens: w, Out: got[i], Done: func(err error) { errs <- err }}); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	for range ws {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range ws {
		if c := cosine(got[i], f64(want[i])); c < 0.99999 {
			t.Fatalf("window %d through the batcher: cosine %.7f", i, c)
		}
	}
	t.Logf("batcher stats %+v", b.Stats())
}
