package reign

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/stages/gn"
)

// BenchmarkFractionOfGN measures, side by side in one run, the GN's time for a document of N
// full windows and REIGN's time to aggregate those N chunk embeddings, and reports REIGN's
// share (target < 2% of GN time). The GN time per window is measured once on 512-token windows
// in batches of 8 and scaled by N.
//
//	go test ./stages/reign -run '^$' -bench FractionOfGN -benchtime 5x
func BenchmarkFractionOfGN(b *testing.B) {
	modelPath, tokPath := testenv.GN(b, "bge-small-en-v15")
	m, err := testRuntime(b).Load(gn.Config{Model: modelPath, Tokenizer: tokPath})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	windows := make([][]int32, 8)
	outs := make([][]float32, len(windows))
	for i := range windows {
		w := make([]int32, 512)
		w[0], w[511] = 101, 102
		for j := 1; j < 511; j++ {
			w[j] = int32(1000 + rng.IntN(20000))
		}
		windows[i], outs[i] = w, make([]float32, m.Dim())
	}
	start := time.Now()
	const rounds = 2
	for r := 0; r < rounds; r++ {
		if err := m.Embed(windows, outs); err != nil {
			b.Fatal(err)
		}
	}
	perWindow := time.Since(start) / time.Duration(rounds*len(windows))
	b.Logf("GN bge-small-en-v15: %v per 512-token window", perWindow)
	for _, size := range []string{"small-l2", "base-l3"} {
		s := newStage(b, makeCheckpoint(b, size, "--gn-dim", "384")) // fed by a 384-d GN
		for _, n := range []int{4, 16, 64, 256} {
			b.Run(fmt.Sprintf("%s/N=%d", size, n), func(b *testing.B) {
				perDoc := benchAggregate(b, s, n)
				b.ReportMetric(100*float64(perDoc)/float64(perWindow*time.Duration(n)), "%of-GN")
			})

		}
	}
}
