// Command ortopt measures a GN against its offline-optimised variant (optimize.py beside this
// file: onnxruntime.transformers BERT fusion) on the same windows in one process: speed in
// alternating rounds (A B, then B A, ...) with the load average read around each round, since
// the machine is shared and noisy, and every chunk vector's cosine to the original's.
//
//	go run ./ops/bench/ortopt -gn bge-small-en-v15 -dump enwiki.xml.bz2 [-windows 96] [-rounds 5]
//
// Both sessions get what the pipeline's get (stages/gn: ORT's default graph optimisation, which
// the binding leaves at ORT_ENABLE_ALL, and no spinning); windows are batched as the pipeline's
// CPU default does (longest first, 2,048 padded tokens, at most 32 windows a pass).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/wikipedia"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/gn/gnbatch"
	"github.com/reignpipe/reignpipe/stages/wordpiece"
)

func main() {
	name := flag.String("gn", "bge-small-en-v15", "fetched GN; <gn>-opt must exist (optimize.py)")
	dump := flag.String("dump", "", "Wikipedia dump (.xml.bz2)")
	nWin := flag.Int("windows", 96, "windows to embed per round (the dump's first)")
	rounds := flag.Int("rounds", 5, "rounds; each runs both models, alternating which goes first")
	flag.Parse()
	if err := run(*name, *dump, *nWin, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "ortopt:", err)
		os.Exit(1)
	}
}

func run(name, dump string, nWin, rounds int) error {
	if dump == "" || nWin < 1 || rounds < 1 {
		return errors.New("need -dump, -windows >= 1 and -rounds >= 1")
	}
	lib, err := pipelines.RuntimeConfig{}.LibraryPath()
	if err != nil {
		return err
	}
	rt, err := gn.NewRuntime(lib)
	if err != nil {
		return err
	}
	defer rt.Close()
	var models [2]*gn.Model
	for i, n := range []string{name, name + "-opt"} {
		mp, tp := pipelines.GNConfig{Name: n}.ModelPaths()
		m, err := rt.Load(gn.Config{Name: n, Model: mp, Tokenizer: tp})
		if err != nil {
			return fmt.Errorf("%s: %w (run ops/bench/ortopt/optimize.py %s first)", n, err, name)
		}
		defer m.Close()
		models[i] = m
	}
	if models[0].Fingerprint() == models[1].Fingerprint() {
		return errors.New("the variant has the original's fingerprint: same file?")
	}
	_, tp := pipelines.GNConfig{Name: name}.ModelPaths()
	tok, err := wordpiece.Load(tp)
	if err != nil {
		return err
	}
	windows, err := cut(dump, tok, nWin)
	if err != nil {
		return err
	}
	batches := batch(windows, gnbatch.For("cpu"))
	real := 0
	for _, w := range windows {
		real += len(w)
	}
	fmt.Printf("GN %s vs %s-opt: %d windows (%d tokens, longest first), %d passes at the CPU default budget\n",
		name, name, len(windows), real, len(batches))

	// Equivalence first: every chunk vector of the variant against the original's.
	var outs [2][][]float32
	for i, m := range models {
		outs[i] = embed(m, batches)
		if outs[i] == nil {
			return fmt.Errorf("%s: forward pass failed", m.Name())
		}
	}
	minCos, maxAbs := 1.0, 0.0
	for k := range outs[0] {
		minCos = min(minCos, cosine(outs[0][k], outs[1][k]))
		for d := range outs[0][k] {
			maxAbs = max(maxAbs, math.Abs(float64(outs[0][k][d])-float64(outs[1][k][d])))
		}
	}
	fmt.Printf("chunk vectors, variant vs original: min cosine %.9f (1 − %.2g), max |Δ| %.3g\n", minCos, 1-minCos, maxAbs)

	// Wall seconds swing with the other jobs on the machine; CPU seconds (this process's user +
	// system, every ORT thread included) swing much less, so both are reported.
	var secs, cpus [2][]float64
	fmt.Println("round | first | original s | variant s | wall original/variant | original CPU s | variant CPU s | CPU original/variant | load avg before → after")
	for r := 0; r < rounds; r++ {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		before := loadavg()
		var t, c [2]float64
		for _, i := range order {
			start, cpu0 := time.Now(), cpuSeconds()
			if embed(models[i], batches) == nil {
				return fmt.Errorf("%s: forward pass failed", models[i].Name())
			}
			t[i], c[i] = time.Since(start).Seconds(), cpuSeconds()-cpu0
			secs[i], cpus[i] = append(secs[i], t[i]), append(cpus[i], c[i])
		}
		fmt.Printf("%d | %s | %.2f | %.2f | %.3f | %.2f | %.2f | %.3f | %s → %s\n", r+1, []string{"original", "variant"}[order[0]],
			t[0], t[1], t[0]/t[1], c[0], c[1], c[0]/c[1], before, loadavg())
	}
	var ratios, cratios []float64
	for r := range secs[0] {
		ratios = append(ratios, secs[0][r]/secs[1][r])
		cratios = append(cratios, cpus[0][r]/cpus[1][r])
	}
	fmt.Printf("median: original %.2f s (%.1f windows/s), variant %.2f s (%.1f windows/s); original/variant per round median %.3f (min %.3f, max %.3f)\n",
		median(secs[0]), float64(len(windows))/median(secs[0]), median(secs[1]), float64(len(windows))/median(secs[1]),
		median(ratios), slices.Min(ratios), slices.Max(ratios))
	fmt.Printf("median CPU s: original %.2f, variant %.2f; original/variant per round median %.3f (min %.3f, max %.3f)\n",
		median(cpus[0]), median(cpus[1]), median(cratios), slices.Min(cratios), slices.Max(cratios))
	return nil
}

// cut tokenizes articles in dump order until it has n windows (the sample's first articles are
// long, so most windows are full 512-token ones) and sorts them longest first.
func cut(dump string, tok *wordpiece.Tokenizer, n int) ([][]int32, error) {
	src, err := wikipedia.Open(wikipedia.Options{Path: dump})
	if err != nil {
		return nil, err
	}
	defer src.Close(context.Background())
	var ws [][]int32
	if _, err := connectors.Each(context.Background(), src, func(d schemas.Document) (bool, error) {
		ws = append(ws, chunk.Default.Windows(tok.Encode(d.Text), tok.CLS(), tok.SEP())...)
		return len(ws) < n, nil
	}); err != nil {
		return nil, err
	}
	if len(ws) < n {
		return nil, fmt.Errorf("%s has only %d windows", dump, len(ws))
	}
	ws = ws[:n]
	slices.SortStableFunc(ws, func(a, b []int32) int { return len(b) - len(a) })
	return ws, nil
}

// batch cuts length-sorted windows into passes within the budget, as gn.Batcher does.
func batch(ws [][]int32, d gnbatch.Defaults) [][][]int32 {
	var out [][][]int32
	for i := 0; i < len(ws); {
		j := i + 1
		for j < len(ws) && j-i < d.MaxBatch && (j-i+1)*len(ws[i]) <= d.TokenBudget {
			j++
		}
		out = append(out, ws[i:j])
		i = j
	}
	return out
}

func embed(m *gn.Model, batches [][][]int32) [][]float32 {
	var all [][]float32
	for _, b := range batches {
		out := make([][]float32, len(b))
		for i := range out {
			out[i] = make([]float32, m.Dim())
		}
		if err := m.Embed(b, out); err != nil {
			fmt.Fprintln(os.Stderr, "ortopt:", err)
			return nil
		}
		all = append(all, out...)
	}
	return all
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
