// Package gn runs a Guidance Network (a sentence-embedding ONNX model such as bge-small-en-v1.5
// or all-MiniLM-L6-v2) over token windows with ONNX Runtime, and batches windows from many
// documents into forward passes. Pooling follows the REIGN reference: mean over every token
// with attention mask 1 ([CLS] and [SEP] included, padding excluded), then L2 normalisation.
package gn

import (
	"errors"
	"fmt"
	"os"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

// ErrClosed is returned by calls on a closed Runtime, Model or Batcher.
var ErrClosed = errors.New("gn: closed")

// onnxruntime_go keeps its environment in package globals, so two Runtimes would share (and
// the first Close would destroy) one environment: the process may hold only one at a time.
var (
	processMu sync.Mutex
	processRT *Runtime
)

// Runtime owns the process's ONNX Runtime environment: created once by main, closed last.
// It tracks the models loaded from it so that Close can release them before the environment
// goes away (a session outliving its environment is undefined behaviour in ORT).
type Runtime struct {
	lib string

	mu     sync.Mutex // guards closed and models; held across Load so Close cannot race it
	closed bool
	models map[*Model]struct{}
}

// NewRuntime loads the ONNX Runtime shared library at libraryPath and creates the
// environment. It fails if this process already has one.
func NewRuntime(libraryPath string) (*Runtime, error) {
	if libraryPath == "" {
		return nil, errors.New("gn: NewRuntime: empty ONNX Runtime library path")
	}
	st, err := os.Stat(libraryPath)
	if err != nil {
		return nil, fmt.Errorf("gn: ONNX Runtime library: %w", err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("gn: ONNX Runtime library %s is a directory, want libonnxruntime.so", libraryPath)
	}
	processMu.Lock()
	defer processMu.Unlock()
	if processRT != nil || ort.IsInitialized() {
		return nil, errors.New("gn: this process already has an ONNX Runtime environment; create one Runtime in main and pass it down")
	}
	ort.SetSharedLibraryPath(libraryPath)
	if err := ort.InitializeEnvironment(ort.WithLogLevelWarning()); err != nil {
		return nil, fmt.Errorf("gn: initialising ONNX Runtime from %s: %w", libraryPath, err)
	}
	r := &Runtime{lib: libraryPath, models: map[*Model]struct{}{}}
	processRT = r
	return r, nil
}

// LibraryPath is the shared library this Runtime loaded.
func (r *Runtime) LibraryPath() string { return r.lib }

// Close closes every model still open, then destroys the environment. Closing twice is a no-op.
func (r *Runtime) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	open := make([]*Model, 0, len(r.models))
	for m := range r.models {
		open = append(open, m)
	}
	r.mu.Unlock()

	var errs []error
	for _, m := range open {
		errs = append(errs, m.Close())
	}
	processMu.Lock()
	defer processMu.Unlock()
	if err := ort.DestroyEnvironment(); err != nil {
		errs = append(errs, fmt.Errorf("gn: destroying ONNX Runtime environment: %w", err))
	}
	processRT = nil
	return errors.Join(errs...)
}

func (r *Runtime) forget(m *Model) {
	r.mu.Lock()
	delete(r.models, m)
	r.mu.Unlock()
}

// NewSessionFromBytes creates a session from an in-memory ONNX model with the same provider,
// thread and spinning options as the GN sessions, so other stages (the REIGN aggregator, whose
// graph is built in Go) share this environment instead of creating a second one. The caller
// owns the session and must destroy it before Close: the Runtime does not track it.
func (r *Runtime) NewSessionFromBytes(onnx []byte, inputs, outputs []string, provider string, intra, inter int) (*ort.DynamicAdvancedSession, error) {
	cfg := Config{Provider: provider, IntraOpThreads: intra, InterOpThreads: inter}
	kind, device, err := parseProvider(provider)
	if err != nil {
		return nil, err
	}
	if intra < 0 || inter < 0 {
		return nil, fmt.Errorf("gn: thread counts must be >= 0 (0 = ORT default), got intra=%d inter=%d", intra, inter)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("gn: NewSessionFromBytes: runtime %w", ErrClosed)
	}
	opts, err := sessionOptions(cfg, kind, device, r.lib)
	if err != nil {
		return nil, err
	}
	defer opts.Destroy()
	s, err := ort.NewDynamicAdvancedSessionWithONNXData(onnx, inputs, outputs, opts)
	if err != nil {
		return nil, fmt.Errorf("gn: creating session from %d-byte model: %w", len(onnx), err)
	}
	return s, nil
}
