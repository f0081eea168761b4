package reign

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/stages/gn"
)

// One Runtime per test binary: onnxruntime_go's environment is process-global.
var (
	rtOnce   sync.Once
	rtShared *gn.Runtime
	rtErr    error
	ckDir    string // random checkpoints, made once per (size, options) and shared by tests
	ckMu     sync.Mutex
)

func TestMain(m *testing.M) {
	ckDir, _ = os.MkdirTemp("", "reign-test-")
	code := m.Run()
	if rtShared != nil {
		if err := rtShared.Close(); err != nil {
			println("reign: closing runtime:", err.Error())
			code = 1
		}
	}
	os.RemoveAll(ckDir)
	os.Exit(code)
}

func testRuntime(t testing.TB) *gn.Runtime {
	t.Helper()
	lib := testenv.ORTLibrary(t)
	rtOnce.Do(func() { rtShared, rtErr = gn.NewRuntime(lib) })
	if rtErr != nil {
		t.Fatal(rtErr)
	}
	return rtShared
}

func oracle(t testing.TB) (py, script string) {
	return testenv.Python(t, "numpy"), filepath.Join(testenv.Root(), "ops", "oracles", "reign_reference.py")
}

// makeCheckpoint has the oracle write a random checkpoint (args as `make` takes them after
// SIZE SEED), reusing it across tests.
func makeCheckpoint(t testing.TB, size string, args ...string) string {
	t.Helper()
	py, script := oracle(t)
	dir := filepath.Join(ckDir, size+strings.Join(args, ""))
	ckMu.Lock()
	defer ckMu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		return dir
	}
	cmd := exec.Command(py, append([]string{script, "make", size, "7", dir}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("making %s checkpoint: %v\n%s", size, err, out)
	}
	return dir
}

func newStage(t testing.TB, dir string) *Stage {
	t.Helper()
	ck, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStage(testRuntime(t), ck, StageOptions{IntraOpThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// randDoc returns n random unit-norm chunk embeddings, like a GN's.
func randDoc(rng *rand.Rand, n, dim int) [][]float32 {
	doc := make([][]float32, n)
	for i := range doc {
		c, norm := make([]float32, dim), 0.0
		for j := range c {
			c[j] = float32(rng.NormFloat64())
			norm += float64(c[j]) * float64(c[j])
		}
		for j := range c {
			c[j] /= float32(math.Sqrt(norm))
		}
		doc[i] = c
	}
	return doc
}

func runOracle(t testing.TB, dir string, docs [][][]float32) [][]float64 {
	t.Helper()
	py, script := oracle(t)
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, d := range docs {
		if err := enc.Encode(map[string]any{"chunks": d}); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(py, script, "run", dir)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, stderr.Bytes())
	}
	var vecs [][]float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r struct{ Vector []float64 }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		vecs = append(vecs, r.Vector)
	}
	if len(vecs) != len(docs) {
		t.Fatalf("oracle gave %d vectors for %d documents", len(vecs), len(docs))
	}
	return vecs
}

func maxDiff(got []float32, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range got {
		d = max(d, math.Abs(float64(got[i])-want[i]))
	}
	return d
}

const tol = 1e-5

// checkParity runs each document alone and all of them as one padded batch against the oracle.
func checkParity(t *testing.T, dir string, ns []int) {
	s := newStage(t, dir)
	rng := rand.New(rand.NewPCG(uint64(len(dir)), 1))
	docs := make([][][]float32, len(ns))
	for i, n := range ns {
		docs[i] = randDoc(rng, n, s.InputDim())
	}
	want := runOracle(t, dir, docs)
	batch := make([][]float32, len(docs))
	for i := range docs {
		out := make([]float32, s.Dim())
		if err := s.Aggregate(docs[i], out); err != nil {
			t.Fatal(err)
		}
		batch[i] = make([]float32, s.Dim())
		d := maxDiff(out, want[i])
		t.Logf("%s N=%d single: max abs diff %.2e", filepath.Base(dir), ns[i], d)
		if d > tol {
			t.Errorf("N=%d: single-document max abs diff %.3g > %g", ns[i], d, tol)
		}
	}
	if err := s.AggregateBatch(docs, batch); err != nil {
		t.Fatal(err)
	}
	for i := range docs {
		d := maxDiff(batch[i], want[i])
		t.Logf("%s N=%d in mixed batch: max abs diff %.2e", filepath.Base(dir), ns[i], d)
		if d > tol {
			t.Errorf("N=%d: batched max abs diff %.3g > %g", ns[i], d, tol)
		}
	}
}

func TestParityWithReference(t *testing.T) {
	for _, size := range []string{"tiny-l1", "small-l2", "base-l3", "large-l4"} {
		t.Run(size, func(t *testing.T) { checkParity(t, makeCheckpoint(t, size), []int{1, 2, 7, 64, 300}) })
	}
	t.Run("absolute-positions", func(t *testing.T) {
		checkParity(t, makeCheckpoint(t, "tiny-l1", "--positions", "512"), []int{1, 7, 300})
	})
	t.Run("long-N4096", func(t *testing.T) { checkParity(t, makeCheckpoint(t, "tiny-l1"), []int{4096}) })
	for _, dt := range []string{"F16", "BF16"} {
		t.Run(dt, func(t *testing.T) { checkParity(t, makeCheckpoint(t, "tiny-l1", "--dtype", dt), []int{1, 7}) })
	}
}

// TestLowPrecisionLoad checks the F16/BF16 upcast against the same weights stored as F32.
func TestLowPrecisionLoad(t *testing.T) {
	ref, err := Load(makeCheckpoint(t, "tiny-l1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dtype string
		rel   float64 // half an ulp at the format's mantissa width
	}{{"F16", 0x1p-11}, {"BF16", 0x1p-8}} {
		ck, err := Load(makeCheckpoint(t, "tiny-l1", "--dtype", c.dtype))
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range ref.tensors {
			got := ck.tensors[name]
			if got.DType != c.dtype {
				t.Fatalf("%s: dtype %s, want %s", name, got.DType, c.dtype)
			}
			for i, w := range want.Data {
				// 2^-24 covers F16 subnormals, which have absolute rather than relative spacing.
				if d := math.Abs(float64(got.Data[i] - w)); d > c.rel*math.Abs(float64(w))+0x1p-24 {
					t.Fatalf("%s %s[%d] = %v, F32 has %v", c.dtype, name, i, got.Data[i], w)
				}
			}
		}
	}
}

func TestHalfToFloat(t *testing.T) {
	for _, c := range []struct {
		h    uint16
		want float32
	}{{0x3c00, 1}, {0xc000, -2}, {0x0001, 0x1p-24}, {0x7bff, 65504}, {0x8000, float32(math.Copysign(0, -1))}, {0x7c00, float32(math.Inf(1))}} {
		if got := halfToFloat(c.h); got != c.want || math.Signbit(float64(got)) != math.Signbit(float64(c.want)) {
			t.Errorf("halfToFloat(%#04x) = %v, want %v", c.h, got, c.want)
		}
	}
	if !math.IsNaN(float64(halfToFloat(0x7e00))) {
		t.Error("0x7e00 should be NaN")
	}
}

// encodeST writes F32 safetensors (dtype overridable per tensor via dtypes) for the error tests.
func encodeST(tensors map[string]Tensor, dtypes map[string]string) []byte {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var body []byte
	for _, n := range names {
		t := tensors[n]
		start := len(body)
		for _, v := range t.Data {
			body = binary.LittleEndian.AppendUint32(body, math.Float32bits(v))
		}
		dt := "F32"
		if d, ok := dtypes[n]; ok {
			dt = d
		}
		header[n] = map[string]any{"dtype": dt, "shape": t.Shape, "data_offsets": []int{start, len(body)}}
	}
	h, _ := json.Marshal(header)
	return append(append(binary.LittleEndian.AppendUint64(nil, uint64(len(h))), h...), body...)
}

func TestLoadErrors(t *testing.T) {
	dir := makeCheckpoint(t, "tiny-l1")
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	base, err := ParseSafetensors(st)
	if err != nil {
		t.Fatal(err)
	}
	with := func(edit func(m map[string]Tensor)) []byte {
		m := map[string]Tensor{}
		for k, v := range base {
			m[k] = v
		}
		edit(m)
		return encodeST(m, nil)
	}
	setCfg := func(key string, v any) []byte {
		var m map[string]any
		json.Unmarshal(cfg, &m)
		m[key] = v
		b, _ := json.Marshal(m)
		return b
	}
	garbage := append(binary.LittleEndian.AppendUint64(nil, 5), "{nope"...)
	for _, c := range []struct {
		name   string
		config []byte
		st     []byte
		want   []string
	}{
		{"missing tensor", cfg, with(func(m map[string]Tensor) { delete(m, "encoder.layer.0.attention.self.key.bias") }),
			[]string{"missing tensors", "encoder.layer.0.attention.self.key.bias"}},
		{"unknown tensor", cfg, with(func(m map[string]Tensor) {
			m["encoder.layer.1.output.dense.bias"] = Tensor{Shape: []int{1}, Data: []float32{0}}
		}), []string{"unknown tensors", "encoder.layer.1.output.dense.bias"}},
		{"wrong shape", cfg, with(func(m map[string]Tensor) {
			m["pooler.dense.bias"] = Tensor{Shape: []int{191}, Data: make([]float32, 191)}
		}),
			[]string{"pooler.dense.bias has shape [191], want [192]"}},
		{"special tokens shape", cfg, with(func(m map[string]Tensor) {
			m["embeddings.special_token_embeddings.weight"] = Tensor{Shape: []int{2, 384}, Data: make([]float32, 768)}
		}), []string{"embeddings.special_token_embeddings.weight has shape [2 384], want [3 384]"}},
		{"bad header", cfg, garbage, []string{"bad header JSON"}},
		{"truncated file", cfg, st[:len(st)-100], []string{"truncated"}},
		{"header longer than file", cfg, st[:50], []string{"header length"}},
		{"unsupported dtype", cfg, encodeST(map[string]Tensor{"pooler.dense.bias": {Shape: []int{1}, Data: []float32{0}}}, map[string]string{"pooler.dense.bias": "I32"}),
			[]string{"pooler.dense.bias", `dtype "I32" not supported`}},
		{"heads do not divide hidden", setCfg("num_attention_heads", 5), st, []string{"not a multiple of num_attention_heads"}},
		{"gn dim disagrees", setCfg("gn_projection_dim", 768), st, []string{"gn_projection_dim is 768"}},
		{"layers disagree", setCfg("num_hidden_layers", 2), st, []string{"missing tensors", "encoder.layer.1.attention.self.query.weight"}},
		{"special tokens", setCfg("use_special_tokens", true), st, []string{"use_special_tokens"}},
		{"sinusoidal", setCfg("position_embedding_type", "sinusoidal"), st, []string{"sinusoidal"}},
		{"bad config json", []byte("{"), st, []string{"config.json"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromBytes(c.config, c.st)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("empty dir: %v", err)
	}
}

func TestStageContract(t *testing.T) {
	dir := makeCheckpoint(t, "tiny-l1", "--positions", "512")
	s := newStage(t, dir)
	ck, _ := Load(dir)
	if s.Dim() != 192 || s.InputDim() != 384 || s.Space() != "reign:"+ck.ID() || len(ck.ID()) != 16 {
		t.Fatalf("Dim %d InputDim %d Space %q id %q", s.Dim(), s.InputDim(), s.Space(), ck.ID())
	}
	rng := rand.New(rand.NewPCG(3, 3))
	good := randDoc(rng, 3, 384)
	nan := randDoc(rng, 2, 384)
	nan[1][5] = float32(math.NaN())
	out := make([]float32, 192)
	for _, c := range []struct {
		name  string
		docs  [][][]float32
		out   [][]float32
		wantE string
	}{
		{"empty document", [][][]float32{{}}, [][]float32{out}, "no chunks"},
		{"wrong chunk dim", [][][]float32{{make([]float32, 383)}}, [][]float32{out}, "383 dims"},
		{"wrong out dim", [][][]float32{good}, [][]float32{make([]float32, 5)}, "output 0 has 5 dims"},
		{"non-finite input", [][][]float32{nan}, [][]float32{out}, "non-finite"},
		{"beyond positions", [][][]float32{randDoc(rng, 513, 384)}, [][]float32{out}, "cover 512"},
		{"empty batch", nil, nil, "empty batch"},
		{"out count", [][][]float32{good}, nil, "0 outputs"},
	} {
		if err := s.AggregateBatch(c.docs, c.out); err == nil || !strings.Contains(err.Error(), c.wantE) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.wantE)
		}
	}
	s2, err := NewStage(testRuntime(t), ck, StageOptions{CheckpointID: "abc", Provider: "tpu"})
	if err == nil {
		s2.Close()
		t.Error("provider tpu accepted")
	}
	s2, err = NewStage(testRuntime(t), ck, StageOptions{CheckpointID: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	if s2.Space() != "reign:abc" {
		t.Errorf("space %q", s2.Space())
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s2.Aggregate(good, out); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := s2.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func FuzzParseSafetensors(f *testing.F) {
	f.Add(encodeST(map[string]Tensor{"a": {Shape: []int{2, 2}, Data: []float32{1, 2, 3, 4}}}, nil))
	f.Add(encodeST(map[string]Tensor{"a": {Shape: []int{2}, Data: []float32{1, 2}}}, map[string]string{"a": "F16"}))
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseSafetensors(data)
		if err != nil {
			return
		}
		for name, ts := range m {
			n := 1
			for _, d := range ts.Shape {
				n *= d
			}
			if n != len(ts.Data) {
				t.Fatalf("%s: shape %v but %d values", name, ts.Shape, len(ts.Data))
			}
		}
	})
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"num_hidden_layers":1,"hidden_size":192,"num_attention_heads":3,"intermediate_size":768}`))
	f.Add([]byte(`{"num_hidden_layers":2,"hidden_size":384,"num_attention_heads":6,"intermediate_size":1536,"layer_norm_eps":1e-12,"position_embedding_type":"absolute"}`))
	f.Add([]byte(`{"hidden_size":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if c.HeadDim()*c.NumAttentionHeads != c.HiddenSize || c.NumHiddenLayers <= 0 || !(c.LayerNormEps > 0) {
			t.Fatalf("accepted inconsistent config %+v", c)
		}
	})
}

func BenchmarkAggregate(b *testing.B) {
	for _, size := range []string{"small-l2", "base-l3"} {
		s := newStage(b, makeCheckpoint(b, size))
		for _, n := range []int{4, 16, 64, 256} {
			b.Run(fmt.Sprintf("%s/N=%d", size, n), func(b *testing.B) { benchAggregate(b, s, n) })
		}
	}
}

// benchAggregate times Aggregate on one random document of n chunks, reports ms/doc and
// returns the time per document.
func benchAggregate(b *testing.B, s *Stage, n int) time.Duration {
	doc := randDoc(rand.New(rand.NewPCG(1, uint64(n))), n, s.InputDim())
	out := make([]float32, s.Dim())
	iters := 0
	for b.Loop() {
		if err := s.Aggregate(doc, out); err != nil {
			b.Fatal(err)
		}
		iters++
	}
	perDoc := b.Elapsed() / time.Duration(max(iters, 1))
	b.ReportMetric(float64(perDoc)/1e6, "ms/doc")
	return perDoc
}
