package gn

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkEmbedRaw is the limit the pipeline is measured against: bare forward passes over
// pre-tokenized full 512-token windows, no tokenizing, chunking or batching logic. Run it
// short, e.g. go test ./stages/gn -run '^$' -bench EmbedRaw -benchtime=3x.
func BenchmarkEmbedRaw(b *testing.B) {
	for _, name := range gns {
		b.Run(name, func(b *testing.B) {
			m := loadGN(b, name)
			rng := rand.New(rand.NewPCG(5, 6))
			for _, bs := range []int{1, 4, 8, 16, 32} {
				ws, out := make([][]int32, bs), make([][]float32, bs)
				for i := range ws {
					ws[i], out[i] = window(rng, 510), make([]float32, m.Dim())
				}
				if err := m.Embed(ws, out); err != nil { // warm-up: buffers sized, kernels chosen
					b.Fatal(err)
				}
				b.Run(fmt.Sprintf("bs=%d", bs), func(b *testing.B) {
					for b.Loop() {
						if err := m.Embed(ws, out); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(bs*b.N)/b.Elapsed().Seconds(), "windows/s")
				})
			}
		})
	}
}
