// Package cudatest checks the GPU build of ONNX Runtime that ops/fetch --gpu unpacks. It is a
// package of its own because a process holds one ORT environment, and stages/gn's tests hold
// the CPU build's.
package cudatest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/stages/gn"
)

// gpuLibrary is the fetched GPU build, or a skip: ops/fetch (and so make test) does not fetch
// it by default, so not even REIGNPIPE_STRICT=1 makes its absence a failure.
func gpuLibrary(t *testing.T) string {
	matches, _ := filepath.Glob(filepath.Join(testenv.Home(), "ort-gpu", "*", "libonnxruntime.so"))
	if len(matches) == 0 {
		t.Skipf("GPU build of ONNX Runtime not fetched under %s/ort-gpu: run ops/fetch --gpu", testenv.Home())
	}
	return matches[len(matches)-1]
}

// The GPU build loads and runs on CPU anywhere; cuda:0 either works (a GPU with CUDA 12 and
// cuDNN 9) or fails with an error that names the GPU build and what it is missing -- not the
// CPU-only message, which would send the user to fetch what they already have.
func TestGPUBuild(t *testing.T) {
	lib := gpuLibrary(t)
	model, tok := testenv.GN(t, "all-minilm-l6-v2")
	rt, err := gn.NewRuntime(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	cpu, err := rt.Load(gn.Config{Model: model, Tokenizer: tok})
	if err != nil {
		t.Fatalf("the GPU build does not run the GN on CPU: %v", err)
	}
	out := [][]float32{make([]float32, cpu.Dim())}
	if err := cpu.Embed([][]int32{{101, 7592, 2088, 102}}, out); err != nil {
		t.Fatal(err)
	}
	m, err := rt.Load(gn.Config{Model: model, Tokenizer: tok, Provider: "cuda:0"})
	if err == nil {
		defer m.Close()
		if err := m.Embed([][]int32{{101, 7592, 2088, 102}}, [][]float32{make([]float32, m.Dim())}); err != nil {
			t.Fatalf("cuda:0 session created but the forward pass failed: %v", err)
		}
		t.Logf("cuda:0 runs on this machine")
		return
	}
	msg := err.Error()
	for _, want := range []string{"GPU build", "CUDA 12", "cuDNN 9", lib} {
		if !strings.Contains(msg, want) {
			t.Errorf("cuda:0 error does not mention %q: %v", want, err)
		}
	}
	if strings.Contains(msg, "CPU-only") {
		t.Errorf("the GPU build was called CPU-only: %v", err)
	}
	t.Logf("cuda:0 without a usable GPU: %v", err)
	if _, statErr := os.Stat("/dev/nvidia0"); statErr == nil {
		t.Logf("note: /dev/nvidia0 exists, so the CUDA libraries are what is missing")
	}
}
