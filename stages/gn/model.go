package gn

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ort "github.com/yalue/onnxruntime_go"
)

var _ Embedder = (*Model)(nil)

// DefaultMaxPositions is the position-embedding table size of BERT-family GNs.
const DefaultMaxPositions = 512

// Config selects a GN and how to run it.
type Config struct {
	Name           string // e.g. "bge-small-en-v15" (informational)
	Model          string // path to model.onnx
	Tokenizer      string // path to tokenizer.json (hashed into the fingerprint only; tokenizing is elsewhere)
	Provider       string // "cpu" (default) or "cuda:N"
	IntraOpThreads int    // 0 = ORT default
	InterOpThreads int    // 0 = ORT default
	MaxPositions   int    // longest window the model accepts; 0 = DefaultMaxPositions
}

// Validate checks the settings without touching the files (Load reports unreadable files).
func (c Config) Validate() error {
	if c.Model == "" {
		return errors.New("gn: config: model path is empty")
	}
	if c.Tokenizer == "" {
		return errors.New("gn: config: tokenizer path is empty (it is part of the fingerprint)")
	}
	if _, _, err := parseProvider(c.Provider); err != nil {
		return err
	}
	if c.IntraOpThreads < 0 || c.InterOpThreads < 0 {
		return fmt.Errorf("gn: config: thread counts must be >= 0 (0 = ORT default), got intra=%d inter=%d", c.IntraOpThreads, c.InterOpThreads)
	}
	if c.MaxPositions < 0 {
		return fmt.Errorf("gn: config: max positions %d < 0", c.MaxPositions)
	}
	return nil
}

// parseProvider accepts "" or "cpu", and "cuda:N" with N >= 0.
func parseProvider(p string) (kind string, device int, err error) {
	switch {
	case p == "" || p == "cpu":
		return "cpu", 0, nil
	case strings.HasPrefix(p, "cuda:"):
		n, err := strconv.Atoi(strings.TrimPrefix(p, "cuda:"))
		if err != nil || n < 0 {
			return "", 0, fmt.Errorf("gn: config: provider %q: want cuda:N with a device number N >= 0", p)
		}
		return "cuda", n, nil
	}
	return "", 0, fmt.Errorf("gn: config: provider %q: want \"cpu\" or \"cuda:N\"", p)
}

// ModelStats counts the work a Model has done.
type ModelStats struct {
	ForwardPasses int64
	Windows       int64
	RealTokens    int64         // tokens with attention mask 1
	PaddedTokens  int64         // B*Lmax summed over passes: every position computed, padding included
	ForwardTime   time.Duration // time inside ORT Run
}

// Model is one loaded GN. Embed is safe for concurrent use: calls are serialised, because
// they share the reusable input/output buffers (ORT itself could run a session concurrently,
// but on the shared CPU that gains nothing over one pass using every intra-op thread).
type Model struct {
	rt           *Runtime
	id           Identity
	provider     string
	dim          int // id.Dim, id.Inputs and id.Output, kept at hand for Embed
	maxPositions int
	inputNames   []string // input_ids, attention_mask[, token_type_ids]
	outputName   string

	mu     sync.Mutex // serialises Embed and Close
	sess   *ort.DynamicAdvancedSession
	ids    []int64 // reused across calls, grown to the largest B*L seen
	mask   []int64
	types  []int64 // always zero
	hidden []float32
	acc    []float64 // pooling accumulator, len Dim

	passes, windows, real, padded, nanos atomic.Int64
}

// Load opens cfg.Model as a session in this Runtime. Its fingerprint, dimension and the
// inputs and output it binds are Identify's, read from the files before ORT sees them.
func (r *Runtime) Load(cfg Config) (*Model, error) {
	id, err := Identify(cfg)
	if err != nil {
		return nil, err
	}
	kind, device, _ := parseProvider(cfg.Provider)

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("gn: Load %s: runtime %w", cfg.Model, ErrClosed)
	}
	m := &Model{
		rt:           r,
		id:           id,
		provider:     kind,
		maxPositions: cmp0(cfg.MaxPositions, DefaultMaxPositions),
		dim:          id.Dim,
		inputNames:   id.Inputs,
		outputName:   id.Output,
	}
	if kind == "cuda" {
		m.provider = fmt.Sprintf("cuda:%d", device)
	}
	opts, err := sessionOptions(cfg, kind, device, r.lib)
	if err != nil {
		return nil, err
	}
	defer opts.Destroy()
	m.sess, err = ort.NewDynamicAdvancedSession(cfg.Model, m.inputNames, []string{m.outputName}, opts)
	if err != nil {
		return nil, fmt.Errorf("gn: creating session for %s: %w", cfg.Model, err)
	}
	r.models[m] = struct{}{}
	return m, nil
}

func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func sessionOptions(cfg Config, kind string, device int, lib string) (*ort.SessionOptions, error) {
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("gn: session options: %w", err)
	}
	fail := func(err error) (*ort.SessionOptions, error) {
		opts.Destroy()
		return nil, err
	}
	if cfg.IntraOpThreads > 0 {
		if err := opts.SetIntraOpNumThreads(cfg.IntraOpThreads); err != nil {
			return fail(fmt.Errorf("gn: intra-op threads: %w", err))
		}
	}
	if cfg.InterOpThreads > 0 {
		if err := opts.SetInterOpNumThreads(cfg.InterOpThreads); err != nil {
			return fail(fmt.Errorf("gn: inter-op threads: %w", err))
		}
	}
	// Idle ORT threads spin by default, burning the cores that the tokenizing and chunking
	// stages share with the GN between passes; passes here are long, so waking costs little.
	for _, key := range []string{"session.intra_op.allow_spinning", "session.inter_op.allow_spinning"} {
		if err := opts.AddSessionConfigEntry(key, "0"); err != nil {
			return fail(fmt.Errorf("gn: %s: %w", key, err))
		}
	}
	if kind != "cuda" {
		return opts, nil
	}
	noCUDA := func(err error) (*ort.SessionOptions, error) { return fail(cudaError(device, lib, err)) }
	co, err := ort.NewCUDAProviderOptions()
	if err != nil {
		return noCUDA(err)
	}
	defer co.Destroy()
	if err := co.Update(map[string]string{"device_id": strconv.Itoa(device)}); err != nil {
		return noCUDA(err)
	}
	if err := opts.AppendExecutionProviderCUDA(co); err != nil {
		return noCUDA(err)
	}
	return opts, nil
}

// cudaError says why cuda:N could not start, in the two cases that need different fixes: the
// library is a CPU-only build (ORT loads the CUDA provider from the library's own folder, so
// its absence there decides it), or it is the GPU build and the host lacks what the provider
// links against.
func cudaError(device int, lib string, err error) error {
	provider := filepath.Join(filepath.Dir(lib), "libonnxruntime_providers_cuda.so")
	if _, serr := os.Stat(provider); serr != nil {
		return fmt.Errorf("gn: provider cuda:%d: the ONNX Runtime library %s cannot run CUDA: it is a CPU-only build (no %s beside it); run ops/fetch --gpu and leave runtime.ort_library unset, or use provider \"cpu\": %w",
			device, lib, filepath.Base(provider), err)
	}
	return fmt.Errorf("gn: provider cuda:%d: the GPU build of ONNX Runtime at %s cannot run CUDA here: it needs an NVIDIA GPU with its driver, CUDA 12 (libcudart.so.12, cuBLAS, cuFFT, cuRAND) and cuDNN 9 where the dynamic loader finds them (LD_LIBRARY_PATH); or use provider \"cpu\": %w",
		device, lib, err)
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fingerprint names everything that decides a chunk vector; the version tag lets a change of
// pooling code invalidate caches even when the files are the same.
func fingerprint(modelSum, tokSum string) string {
	h := sha256.Sum256([]byte("reignpipe-gn/v1\nmodel-sha256=" + modelSum + "\ntokenizer-sha256=" + tokSum + "\npooling=mean\nnormalisation=l2\n"))
	return hex.EncodeToString(h[:])
}

// Dim is the embedding dimension D.
func (m *Model) Dim() int { return m.dim }

// Name is Config.Name.
func (m *Model) Name() string { return m.id.Name }

// Identity is what Identify reports for this model's files.
func (m *Model) Identity() Identity { return m.id }

// Provider is "cpu" or "cuda:N".
func (m *Model) Provider() string { return m.provider }

// MaxPositions is the longest window Embed accepts.
func (m *Model) MaxPositions() int { return m.maxPositions }

// Fingerprint is a stable hex string over the model and tokenizer file hashes, the pooling
// ("mean") and the normalisation ("l2"): equal fingerprints give equal chunk vectors.
func (m *Model) Fingerprint() string { return m.id.Fingerprint }

// Stats returns counters since Load.
func (m *Model) Stats() ModelStats {
	return ModelStats{
		ForwardPasses: m.passes.Load(),
		Windows:       m.windows.Load(),
		RealTokens:    m.real.Load(),
		PaddedTokens:  m.padded.Load(),
		ForwardTime:   time.Duration(m.nanos.Load()),
	}
}

// Embed runs ONE forward pass over windows (token ids including [CLS]/[SEP], any lengths from
// 1 to MaxPositions), padding to the longest with id 0 under mask 0, and writes the
// L2-normalised masked-mean vector of window i into out[i] (len Dim). On error out is
// unspecified.
func (m *Model) Embed(windows [][]int32, out [][]float32) error {
	if len(windows) != len(out) {
		return fmt.Errorf("gn: Embed: %d windows but %d outputs", len(windows), len(out))
	}
	if len(windows) == 0 {
		return nil
	}
	lmax, real := 0, 0
	for i, w := range windows {
		if len(w) == 0 || len(w) > m.maxPositions {
			return fmt.Errorf("gn: Embed: window %d has %d tokens, want 1..%d", i, len(w), m.maxPositions)
		}
		if len(out[i]) != m.dim {
			return fmt.Errorf("gn: Embed: out[%d] has length %d, want %d", i, len(out[i]), m.dim)
		}
		for _, id := range w {
			if id < 0 {
				return fmt.Errorf("gn: Embed: window %d has negative token id %d", i, id)
			}
		}
		lmax, real = max(lmax, len(w)), real+len(w)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sess == nil {
		return fmt.Errorf("gn: Embed: model %w", ErrClosed)
	}
	b, n := len(windows), len(windows)*lmax
	m.grow(n)
	for i, w := range windows {
		ids, mask := m.ids[i*lmax:(i+1)*lmax], m.mask[i*lmax:(i+1)*lmax]
		for j, id := range w {
			ids[j], mask[j] = int64(id), 1
		}
		clear(ids[len(w):])
		clear(mask[len(w):])
	}
	hidden, err := m.run(b, lmax)
	if err != nil {
		return err
	}
	for i, w := range windows {
		pool(hidden[i*lmax*m.dim:], len(w), m.acc, out[i])
	}
	m.passes.Add(1)
	m.windows.Add(int64(b))
	m.real.Add(int64(real))
	m.padded.Add(int64(n))
	return nil
}

// grow keeps one buffer per tensor at the largest size seen, so steady-state passes allocate
// only the small tensor headers.
func (m *Model) grow(n int) {
	if len(m.ids) >= n {
		return
	}
	m.ids, m.mask, m.types = make([]int64, n), make([]int64, n), make([]int64, n)
	m.hidden = make([]float32, n*m.dim)
	m.acc = make([]float64, m.dim)
}

func (m *Model) run(b, l int) ([]float32, error) {
	shape := ort.NewShape(int64(b), int64(l))
	n := b * l
	var vals []*ort.Tensor[int64]
	defer func() {
		for _, v := range vals {
			v.Destroy()
		}
	}()
	for _, buf := range [][]int64{m.ids[:n], m.mask[:n], m.types[:n]}[:len(m.inputNames)] {
		t, err := ort.NewTensor(shape, buf)
		if err != nil {
			return nil, fmt.Errorf("gn: input tensor: %w", err)
		}
		vals = append(vals, t)
	}
	outT, err := ort.NewTensor(ort.NewShape(int64(b), int64(l), int64(m.dim)), m.hidden[:n*m.dim])
	if err != nil {
		return nil, fmt.Errorf("gn: output tensor: %w", err)
	}
	defer outT.Destroy()
	inputs := make([]ort.Value, len(vals))
	for i, v := range vals {
		inputs[i] = v
	}
	start := time.Now()
	err = m.sess.Run(inputs, []ort.Value{outT})
	m.nanos.Add(int64(time.Since(start)))
	if err != nil {
		return nil, fmt.Errorf("gn: forward pass [%d x %d]: %w", b, l, err)
	}
	return outT.GetData(), nil
}

// pool averages the first n token rows of h (row stride len(acc)) in float64, so the result
// does not depend on padding or batch order, then L2-normalises into dst.
func pool(h []float32, n int, acc []float64, dst []float32) {
	d := len(acc)
	clear(acc)
	for t := 0; t < n; t++ {
		for k, v := range h[t*d : (t+1)*d] {
			acc[k] += float64(v)
		}
	}
	var ss float64
	for k := range acc {
		acc[k] /= float64(n)
		ss += acc[k] * acc[k]
	}
	norm := math.Sqrt(ss)
	if norm == 0 || math.IsNaN(norm) || math.IsInf(norm, 0) {
		norm = 1 // a zero vector stays zero rather than becoming NaN
	}
	for k := range acc {
		dst[k] = float32(acc[k] / norm)
	}
}

// Close destroys the session. Closing twice is a no-op; an Embed in flight finishes first.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sess == nil {
		return nil
	}
	err := m.sess.Destroy()
	m.sess = nil
	m.ids, m.mask, m.types, m.hidden, m.acc = nil, nil, nil, nil, nil
	m.rt.forget(m)
	if err != nil {
		return fmt.Errorf("gn: destroying session: %w", err)
	}
	return nil
}
