// Command faults is the project's fault campaign: it runs a pipeline on a fixture corpus, kills
// it (SIGKILL at random moments, SIGKILL while a temp file of each kind is open, SIGTERM),
// restarts it until it completes, and checks after every trial that no document was lost or
// changed (newest vector per doc id bit-identical to a clean run's), that the final summary
// adds up, and that a from-scratch rerun sends 0 windows to the GN.
//
//	go run ./ops/faults -trials 20 -seed 1            # the full campaign, embedded mode
//	go run ./ops/faults -trials 2 -out results.md     # short form
//
// It needs the fetched ONNX Runtime and GN (ops/fetch). Results with the machine's description
// go to -out (ops/FAULTS.md keeps the table of what each fault does).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

func main() {
	trials := flag.Int("trials", 20, "random SIGKILL trials (1 to 3 kills each)")
	targeted := flag.Bool("targeted", true, "also the targeted trials (a kill in each kind of write, a SIGTERM)")
	corruptions := flag.Bool("corrupt", true, "also damage the finished store (a companion bit, an unreadable or deleted shard, a vector part digit), then verify --repair and heal")
	diskFull := flag.Bool("disk-full", true, "also fill the disk under each writer (needs root: tmpfs mounts)")
	distTrials := flag.Int("dist-trials", 0, "distributed-mode trials (stage processes and the broker killed); run under ops/with-kafka")
	seed := flag.Uint64("seed", 1, "seed of the kill times and the corpus")
	docs := flag.Int("docs", 60, "documents in the fixture corpus")
	model := flag.String("gn", "all-minilm-l6-v2", "GN (fetched by ops/fetch)")
	k := flag.Int("k", 128, "window length and stride")
	work := flag.String("work", "", "scratch folder (default: a new temp folder, removed afterwards)")
	bin := flag.String("bin", "", "reignpipe binary (default: built from this checkout)")
	out := flag.String("out", "", "also write the table and the machine's description here")
	flag.Parse()
	if err := campaign(*trials, *targeted, *corruptions, *diskFull, *distTrials, *seed, *docs, *model, *k, *work, *bin, *out); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
}

func campaign(trials int, targeted, corruptions, diskFull bool, distTrials int, seed uint64, docs int, model string, k int, work, bin, out string) error {
	if work == "" {
		d, err := os.MkdirTemp("", "reignpipe-faults-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		work = d
	}
	if bin == "" {
		bin = filepath.Join(work, "reignpipe")
		build := exec.Command("go", "build", "-o", bin, "./cmd/reignpipe")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building reignpipe: %w", err)
		}
	}
	c := &Campaign{Bin: bin, Work: work, Input: filepath.Join(work, "corpus.jsonl"), Model: model, K: k,
		Timeout: 5 * time.Minute, Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}
	if err := Corpus(c.Input, docs, seed); err != nil {
		return err
	}
	if err := c.Reference(); err != nil {
		return err
	}
	faults := c.RandomFaults(trials, seed)
	if targeted {
		faults = append(faults, c.TargetedFaults()...)
	}
	if corruptions {
		faults = append(faults, c.CorruptFaults()...)
	}
	if diskFull {
		if err := CanFillDisks(); err != nil {
			c.Logf("disk-full trials left out: %v", err)
		} else {
			faults = append(faults, c.DiskFullFaults()...)
		}
	}
	var results []Result
	failed := 0
	for i, f := range faults {
		start := time.Now()
		r := c.Trial(i, f)
		results = append(results, r)
		if !r.OK() {
			failed++
		}
		c.Logf("%-28s kills %d lost %d wrong %d adds-up %v rerun-gn %d %s (%.1f s) %s",
			r.Fault, r.Kills, r.Lost, r.Wrong, r.AddsUp, r.RerunGN, r.FinalState, time.Since(start).Seconds(), firstLine(r.Err))
	}
	table := ""
	if len(results) > 0 {
		table = Table(results)
	}
	if distTrials > 0 {
		b, err := BrokerFromEnv()
		if err != nil {
			return err
		}
		var dist []Result
		for i, f := range c.RandomDistFaults(distTrials, seed) {
			start := time.Now()
			r := c.DistTrial(i, f, b)
			dist = append(dist, r)
			if !r.OK() {
				failed++
			}
			c.Logf("%-28s kills %d (%v) lost %d wrong %d max-delta %g (%.1f s) %s",
				r.Fault, r.Kills, f.Victims, r.Lost, r.Wrong, r.MaxDelta, time.Since(start).Seconds(), r.Err)
		}
		results = append(results, dist...)
		table += "\n## Distributed mode (ingest, 2 embed workers, aggregate, the broker)\n\n" + Table(dist)
	}
	fmt.Print(table)
	if out != "" {
		head := fmt.Sprintf("# Fault campaign\n\n%s\n\n`go run ./ops/faults %s`\n\n", machine(), strings.Join(os.Args[1:], " "))
		if err := os.WriteFile(out, []byte(head+table), 0o644); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d trials broke a promise", failed, len(results))
	}
	return nil
}

// machine describes where the campaign ran.
func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(l[strings.IndexByte(l, ':')+1:])
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s/%s, %s, %s", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), time.Now().UTC().Format("2006-01-02"))
}
