// Package memstat reads how much memory this process holds, split into what the Go runtime
// manages and the rest (ONNX Runtime's arena, Pebble's block cache and memtables, which live
// in C memory), so a run can say which side grows.
package memstat

import (
	"bufio"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
)

// Snapshot is one reading, in bytes; -1 where the platform does not say (no /proc).
type Snapshot struct {
	RSS     int64 // resident now (VmRSS)
	PeakRSS int64 // the process's peak resident set so far (VmHWM)
	Go      int64 // memory the Go runtime has mapped and not returned to the OS
	GoHeap  int64 // bytes of live and not yet swept heap objects
}

var samples = []metrics.Sample{
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/released:bytes"},
	{Name: "/memory/classes/heap/objects:bytes"},
}

// Read takes a snapshot. It is cheap (no stop-the-world), so a progress loop can call it.
func Read() Snapshot {
	s := Snapshot{}
	s.RSS, s.PeakRSS = procStatus()
	ss := make([]metrics.Sample, len(samples))
	copy(ss, samples)
	metrics.Read(ss)
	s.Go = int64(ss[0].Value.Uint64() - ss[1].Value.Uint64())
	s.GoHeap = int64(ss[2].Value.Uint64())
	return s
}

// MiB converts bytes for reports; -1 stays -1.
func MiB(b int64) float64 {
	if b < 0 {
		return -1
	}
	return float64(b) / (1 << 20)
}

// procStatus reads VmRSS and VmHWM in one pass over /proc/self/status; -1 for either it lacks.
func procStatus() (rss, peak int64) {
	rss, peak = -1, -1
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return rss, peak
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() && (rss < 0 || peak < 0) {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rss = kiB(rest)
		} else if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			peak = kiB(rest)
		}
	}
	return rss, peak
}

// kiB parses a status value such as "  123456 kB" into bytes, -1 if it is not one.
func kiB(v string) int64 {
	kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	if err != nil {
		return -1
	}
	return kb << 10
}
