// Package gnbatch holds the batching defaults of the GN batcher, per execution provider. It is
// the one place they live: the pipeline config (for keys left out) and gn.NewBatcher (for zero
// options) both read it, and it has no cgo so the config loader does not link ONNX Runtime.
package gnbatch

import "strings"

// Defaults are the forward-pass bounds for one provider.
type Defaults struct {
	TokenBudget int // padded tokens per forward pass (B*Lmax)
	MaxBatch    int // windows per forward pass
}

// For returns the defaults of provider ("cpu", "" or "cuda:N").
//
// CPU: ONNX Runtime's arena keeps the peak of the largest pass, and a 32x512 pass holds
// ~400 MB of attention scores per layer, so a 16,384-token budget made a default run peak at
// ~2.1 GiB; on the 2-core development machine 2,048 tokens (4 full windows) ran as fast
// (73.4 s vs 73.5 s, 40 long articles, all-MiniLM-L6-v2) at 0.46 GB. A CPU pass of 4 windows
// already keeps the cores busy, so bigger passes buy nothing there.
// CUDA: large passes are what keeps a GPU busy, and its memory is not the host's RSS.
func For(provider string) Defaults {
	if strings.HasPrefix(provider, "cuda:") {
		return Defaults{TokenBudget: 16384, MaxBatch: 32}
	}
	return Defaults{TokenBudget: 2048, MaxBatch: 32}
}
