// Command store measures the chunk store (stages/shardcache) at corpus scale on synthetic
// stores: documents of 10 windows, 384-d, shardcache defaults, doc ids whose order is unrelated
// to write order. Each size runs in its own child process, so peak RSS is that size's alone,
// and its store is deleted afterwards.
//
//	go run ./ops/bench/store [-dir /tmp] [-huge] [-legacy] [-sizes 10000,100000,1000000]
//
// Per size: write rows/s (Add + PutManifest, flushed every 1,024 docs), Get µs/window over a
// sample of documents in write order and in random order, re-aggregation windows/s over the
// whole store (ScanManifests + GetMany + mean-pool, as `reignpipe reaggregate` does), disk
// bytes per window and peak RSS. -legacy also reads through the decode-the-shard path
// (Options.ReadParquet) at sizes up to 10^5, so the change is a ratio measured in one run.
// The page cache is not dropped: hits are warm-cache figures, as after a write on this machine.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "store bench:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("store", flag.ContinueOnError)
	sizes := fs.String("sizes", "10000,100000,1000000", "store sizes in windows, comma-separated")
	huge := fs.Bool("huge", false, "add a 10^7-window store (~30 GB on disk while it runs)")
	legacy := fs.Bool("legacy", false, "also read through the decode-the-shard path, at sizes up to 10^5")
	root := fs.String("dir", os.TempDir(), "where the temporary stores are built")
	out := fs.String("out", "", "results file (default ops/bench/results/store-<date>.md; - for none)")
	sampleDocs := fs.Int("sample-docs", 20000, "documents read per hit measurement")
	legacyDocs := fs.Int("legacy-docs", 200, "documents read per legacy hit measurement")
	dim := fs.Int("dim", 384, "embedding dimension")
	docWindows := fs.Int("doc-windows", 10, "windows per document")
	child := fs.Int("child", 0, "internal: measure one size in this process and print JSON")
	cpuProfile := fs.String("cpuprofile", "", "with -child: CPU profile of the read phases to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dim <= 0 || *docWindows <= 0 || *sampleDocs <= 0 || *legacyDocs <= 0 {
		return errors.New("-dim, -doc-windows, -sample-docs and -legacy-docs must be positive")
	}
	if *child > 0 {
		o := childOptions{windows: *child, docWindows: *docWindows, dim: *dim, sampleDocs: *sampleDocs, root: *root, cpuProfile: *cpuProfile}
		if *legacy && *child <= 100000 {
			o.legacyDocs = *legacyDocs
		}
		res, err := runChild(o)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(res)
	}
	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < *docWindows {
			return fmt.Errorf("bad size %q", s)
		}
		ns = append(ns, n)
	}
	if *huge {
		ns = append(ns, 10_000_000)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	started := time.Now().UTC()
	var results []sizeResult
	for _, n := range ns {
		fmt.Fprintf(os.Stderr, "store bench: %d windows...\n", n)
		cargs := []string{"-child", strconv.Itoa(n), "-dir", *root, "-dim", strconv.Itoa(*dim),
			"-doc-windows", strconv.Itoa(*docWindows), "-sample-docs", strconv.Itoa(*sampleDocs),
			"-legacy-docs", strconv.Itoa(*legacyDocs)}
		if *legacy {
			cargs = append(cargs, "-legacy")
		}
		cmd := exec.Command(self, cargs...)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%d windows: %w", n, err)
		}
		var r sizeResult
		if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
			return fmt.Errorf("%d windows: child output %q: %w", n, buf.String(), err)
		}
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "store bench: %s\n", strings.TrimSpace(buf.String()))
	}
	report := render(results, *legacy, started, *root)
	fmt.Fprint(stdout, report)
	if *out == "-" {
		return nil
	}
	path := *out
	if path == "" {
		path = filepath.Join("ops", "bench", "results", "store-"+started.Format("2006-01-02")+".md")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(report), 0o644)
}

func render(rs []sizeResult, legacy bool, started time.Time, root string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Chunk store benchmark (ops/bench/store)\n\n")
	fmt.Fprintf(&b, "%s\n\n", machine(started, root))
	fmt.Fprintf(&b, "Synthetic stores: documents of 10 windows, 384-d float32, shardcache defaults (8192 rows/shard, zstd Parquet + companion, open companions from the descriptor limit), doc ids unordered w.r.t. write order. Hits: `Get` per window over a sample of documents (sequential = a run in write order from a random start, random = uniform draws), every vector checked, after one untimed pass over as many random documents (steady state, not block-cache warm-up). Re-aggregation: the whole store, `ScanManifests` + `GetMany` + mean-pool. Index = the key table (index.hash) and the Pebble markers and manifests. Table rebuild = an Open after deleting index.hash (it rebuilds the table from the shards' key columns). How much of the companions the page cache held is in the last table. Peak RSS = VmHWM of the child process that built and read that size.\n\n")
	b.WriteString("| windows | shards | write rows/s | hit µs/window seq (CPU) | hit µs/window random (CPU) | sampled windows | reaggregate windows/s | reaggregate s | disk B/window (parquet + vec + index) | Open s | table rebuild s | peak RSS MiB |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %d | %d | %.0f | %.2f (%.2f) | %.2f (%.2f) | %d | %.0f | %.1f | %.0f (%.0f + %.0f + %.0f) | %.2f | %.1f | %.0f |\n",
			r.Windows, r.Shards, r.WriteRowsPerS, r.HitSeqUs, r.HitSeqCPUUs, r.HitRandUs, r.HitRandCPUUs, r.SampledWindows, r.ReaggWinPerS, r.ReaggSeconds,
			r.DiskPerWindow, r.ParquetPerWin, r.VecPerWin, r.IndexPerWin, r.OpenSeconds, r.RebuildSeconds, r.PeakRSSMiB)
	}
	b.WriteString("\nRandom hits by size of the companion pool, same store and process: the old 64 open files measured between two measurements with the default (the table's random column is their mean).\n\n")
	b.WriteString("| windows | shards | default open files | random µs/window, default (CPU) | random µs/window, 64 open files (CPU) | 64 ÷ default, CPU |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %d | %d | %d | %.2f (%.2f) | %.2f (%.2f) | %.2f |\n", r.Windows, r.Shards, r.OpenFiles, r.HitRandUs, r.HitRandCPUUs, r.Rand64Us, r.Rand64CPUUs, r.Rand64CPUUs/r.HitRandCPUUs)
	}
	b.WriteString("\nRandom hits and the page cache: the share of the companions' pages resident (mincore) just after the random measurement above, then random hits again after every companion was read once (as on a machine whose RAM holds them, after one pass over the store), with the share then.\n\n")
	b.WriteString("| windows | companion GB | resident share, random above | random µs/window (CPU) | random µs/window after one read of every companion (CPU) | resident share then |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %d | %.2f | %.2f | %.2f (%.2f) | %.2f (%.2f) | %.2f |\n", r.Windows, r.VecPerWin*float64(r.Windows)/1e9, r.RandResident,
			r.HitRandUs, r.HitRandCPUUs, r.RandWarmUs, r.RandWarmCPUUs, r.RandWarmResident)
	}
	if legacy {
		b.WriteString("\nSame stores read through the old decode-the-shard path (`Options.ReadParquet`, LRU of 8 decoded shards), same process:\n\n")
		b.WriteString("| windows | legacy hit µs/window seq (CPU) | legacy hit µs/window random (CPU) | sampled windows | legacy ÷ companion, seq | legacy ÷ companion, random | peak RSS MiB after legacy |\n")
		b.WriteString("|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rs {
			if r.LegacySampled == 0 {
				continue
			}
			fmt.Fprintf(&b, "| %d | %.2f (%.2f) | %.2f (%.2f) | %d | %.2f | %.2f | %.0f |\n", r.Windows, r.LegacySeqUs, r.LegacySeqCPU, r.LegacyRandUs, r.LegacyRandCPU,
				r.LegacySampled, r.LegacySeqUs/r.HitSeqUs, r.LegacyRandUs/r.HitRandUs, r.LegacyPeakMiB)
		}
	}
	return b.String()
}

// machine describes where the figures come from; they are comparable only on the same one.
func machine(started time.Time, root string) string {
	cpu, mem := "unknown", "unknown"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				if kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64); err == nil {
					mem = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	return fmt.Sprintf("Machine: %d CPUs (nproc), %s, %s RAM; %s; started %s; stores under %s (shared machine: other builds ran meanwhile).",
		runtime.NumCPU(), cpu, mem, runtime.Version(), started.Format(time.RFC3339), root)
}
