package main

import (
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/reignpipe/reignpipe/internal/memstat"
	"github.com/reignpipe/reignpipe/pipelines/engine/reaggregate"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// sizeResult is what one child process measures for one store size.
type sizeResult struct {
	Windows        int64   `json:"windows"`
	Docs           int64   `json:"docs"`
	Shards         int64   `json:"shards"`
	WriteRowsPerS  float64 `json:"write_rows_per_s"`
	OpenSeconds    float64 `json:"open_s"`
	RebuildSeconds float64 `json:"table_rebuild_s"`
	HitSeqUs       float64 `json:"hit_seq_us_per_window"`
	HitRandUs      float64 `json:"hit_random_us_per_window"`
	HitSeqCPUUs    float64 `json:"hit_seq_cpu_us_per_window"`
	HitRandCPUUs   float64 `json:"hit_random_cpu_us_per_window"`
	OpenFiles      int     `json:"open_files"`
	// Random hits with the old pool of 64 open companions, measured on the same store between
	// two measurements with the default pool (whose mean is HitRandUs there).
	Rand64Us    float64 `json:"hit_random_64_us_per_window"`
	Rand64CPUUs float64 `json:"hit_random_64_cpu_us_per_window"`
	// Share of the companions' pages in the page cache just after the random measurement, and
	// random hits again after every companion was read once (what a machine whose RAM holds
	// them has after the first pass over the store), with the share then.
	RandResident     float64 `json:"hit_random_resident_share"`
	RandWarmUs       float64 `json:"hit_random_warm_us_per_window"`
	RandWarmCPUUs    float64 `json:"hit_random_warm_cpu_us_per_window"`
	RandWarmResident float64 `json:"hit_random_warm_resident_share"`
	SampledWindows   int64   `json:"sampled_windows"`
	ReaggWinPerS     float64 `json:"reaggregate_windows_per_s"`
	ReaggSeconds     float64 `json:"reaggregate_s"`
	DiskPerWindow    float64 `json:"disk_bytes_per_window"`
	ParquetPerWin    float64 `json:"parquet_bytes_per_window"`
	VecPerWin        float64 `json:"vec_bytes_per_window"`
	IndexPerWin      float64 `json:"index_bytes_per_window"`
	PeakRSSMiB       float64 `json:"peak_rss_mib"`
	LegacySeqUs      float64 `json:"legacy_hit_seq_us_per_window,omitempty"`
	LegacyRandUs     float64 `json:"legacy_hit_random_us_per_window,omitempty"`
	LegacySeqCPU     float64 `json:"legacy_hit_seq_cpu_us_per_window,omitempty"`
	LegacyRandCPU    float64 `json:"legacy_hit_random_cpu_us_per_window,omitempty"`
	LegacySampled    int64   `json:"legacy_sampled_windows,omitempty"`
	LegacyPeakMiB    float64 `json:"legacy_peak_rss_mib,omitempty"`
}

type childOptions struct {
	windows, docWindows, dim int
	sampleDocs               int
	legacyDocs               int // 0: no legacy measurement
	root                     string
	cpuProfile               string
}

const fingerprint = "bench-store@synthetic"

// mix is splitmix64: window keys and doc ids are derived from a document's write position, so
// nothing proportional to the store is kept to read it back.
func mix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

func windowKey(doc, w int64, docWindows int) uint64 { return mix(uint64(doc*int64(docWindows) + w)) }

// docID hashes the write position so that doc id order (the order ScanManifests walks) is
// unrelated to write order, as with real corpora.
func docID(doc int64) string { return fmt.Sprintf("doc:%016x", mix(uint64(doc)^0x5bd1e995)) }

// fillEmbedding writes pseudo-random floats in [-1, 1) seeded by key: incompressible like real
// embeddings, and checkable on read.
func fillEmbedding(key uint64, emb []float32) {
	s := key | 1
	for i := range emb {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		emb[i] = float32(int32(s>>32)) / (1 << 31)
	}
}

func runChild(o childOptions) (sizeResult, error) {
	docs := int64(o.windows / o.docWindows)
	res := sizeResult{Windows: docs * int64(o.docWindows), Docs: docs}
	dir, err := os.MkdirTemp(o.root, "store-bench-*")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	opts := shardcache.Options{Dir: dir, Fingerprint: fingerprint, Dim: o.dim, K: 512, S: 512}

	if err := writeStore(opts, o, docs, &res); err != nil {
		return res, err
	}
	t0 := time.Now()
	c, err := shardcache.Open(opts)
	if err != nil {
		return res, err
	}
	res.OpenSeconds = time.Since(t0).Seconds()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return res, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	res.Shards = c.Stats().Shards
	rng := rand.New(rand.NewPCG(1, 2))
	sample := min(int64(o.sampleDocs), docs)
	res.SampledWindows = sample * int64(o.docWindows)
	// One untimed pass of random documents first: the figures are the steady state of a
	// long-running reader, not the warm-up of Pebble's block cache after Open.
	if _, _, err = timeHits(c, o, randOrder(rng, docs, sample)); err != nil {
		return res, err
	}
	if res.HitSeqUs, res.HitSeqCPUUs, err = timeHits(c, o, seqOrder(rng, docs, sample)); err != nil {
		return res, err
	}
	if res.HitRandUs, res.HitRandCPUUs, err = timeHits(c, o, randOrder(rng, docs, sample)); err != nil {
		return res, err
	}
	if c, err = compareOpenFiles(c, opts, o, &res, func() func(func(int64) bool) { return randOrder(rng, docs, sample) }); err != nil {
		return res, err
	}
	if res.RandResident, err = residentShare(dir); err != nil {
		return res, err
	}
	if res.ReaggSeconds, err = timeReaggregate(c, o, docs); err != nil {
		return res, err
	}
	if err := readCompanions(dir); err != nil {
		return res, err
	}
	if res.RandWarmUs, res.RandWarmCPUUs, err = timeHits(c, o, randOrder(rng, docs, sample)); err != nil {
		return res, err
	}
	if res.RandWarmResident, err = residentShare(dir); err != nil {
		return res, err
	}
	res.ReaggWinPerS = float64(res.Windows) / res.ReaggSeconds
	if err := c.Close(); err != nil {
		return res, err
	}
	if err := diskUsage(dir, &res); err != nil {
		return res, err
	}
	if res.RebuildSeconds, err = timeRebuild(opts); err != nil {
		return res, err
	}
	res.PeakRSSMiB = memstat.MiB(memstat.Read().PeakRSS)

	if o.legacyDocs > 0 {
		opts.ReadParquet = true
		c, err := shardcache.Open(opts)
		if err != nil {
			return res, err
		}
		sample := min(int64(o.legacyDocs), docs)
		res.LegacySampled = sample * int64(o.docWindows)
		if res.LegacySeqUs, res.LegacySeqCPU, err = timeHits(c, o, seqOrder(rng, docs, sample)); err != nil {
			return res, err
		}
		if res.LegacyRandUs, res.LegacyRandCPU, err = timeHits(c, o, randOrder(rng, docs, sample)); err != nil {
			return res, err
		}
		if err := c.Close(); err != nil {
			return res, err
		}
		res.LegacyPeakMiB = memstat.MiB(memstat.Read().PeakRSS)
	}
	return res, nil
}

// compareOpenFiles measures random hits with a pool of 64 open companions (the default before
// the descriptor limit set it) between the default's first measurement and a second one, on
// the same store and page cache, so the two are side by side; HitRand* become the default's
// mean. It returns the cache reopened with the default pool.
func compareOpenFiles(c *shardcache.Cache, opts shardcache.Options, o childOptions, res *sizeResult, order func() func(func(int64) bool)) (*shardcache.Cache, error) {
	res.OpenFiles = c.Options().OpenFiles
	if err := c.Close(); err != nil {
		return nil, err
	}
	small := opts
	small.OpenFiles = 64
	c64, err := shardcache.Open(small)
	if err != nil {
		return nil, err
	}
	if res.Rand64Us, res.Rand64CPUUs, err = timeHits(c64, o, order()); err != nil {
		return nil, err
	}
	if err := c64.Close(); err != nil {
		return nil, err
	}
	if c, err = shardcache.Open(opts); err != nil {
		return nil, err
	}
	wall, cpu, err := timeHits(c, o, order())
	if err != nil {
		return nil, err
	}
	res.HitRandUs, res.HitRandCPUUs = (res.HitRandUs+wall)/2, (res.HitRandCPUUs+cpu)/2
	return c, nil
}

// writeStore adds every document's windows and manifest in write order, flushing every 1,024
// documents as the runner's commit cadence would.
func writeStore(opts shardcache.Options, o childOptions, docs int64, res *sizeResult) error {
	c, err := shardcache.Open(opts)
	if err != nil {
		return err
	}
	emb := make([]float32, o.dim)
	keys := make([]uint64, o.docWindows)
	t0 := time.Now()
	for d := int64(0); d < docs; d++ {
		id := docID(d)
		for w := range keys {
			keys[w] = windowKey(d, int64(w), o.docWindows)
			fillEmbedding(keys[w], emb)
			if _, err := c.Add(shardcache.Row{Key: keys[w], DocID: id, ChunkIndex: int32(w), NTokens: 512, Embedding: emb}); err != nil {
				return err
			}
		}
		if err := c.PutManifest(shardcache.Manifest{DocID: id, Version: "1", ContentHash: mix(uint64(d)), Keys: keys, NTokens: 510 * o.docWindows}); err != nil {
			return err
		}
		if d%1024 == 1023 {
			if err := c.Flush(); err != nil {
				return err
			}
		}
	}
	if err := c.Close(); err != nil {
		return err
	}
	res.WriteRowsPerS = float64(docs*int64(o.docWindows)) / time.Since(t0).Seconds()
	return nil
}

// timeRebuild deletes the key table and times the Open that rebuilds it from the shards: what a
// crash that tore the table, or the first Open of a cache from before it, costs.
func timeRebuild(opts shardcache.Options) (float64, error) {
	if err := os.Remove(filepath.Join(opts.Dir, "index.hash")); err != nil {
		return 0, err
	}
	t0 := time.Now()
	c, err := shardcache.Open(opts)
	if err != nil {
		return 0, err
	}
	s := time.Since(t0).Seconds()
	if !c.Stats().TableRebuilt {
		_ = c.Close()
		return 0, fmt.Errorf("Open did not rebuild the deleted table")
	}
	return s, c.Close()
}

// seqOrder is a run of documents in write order from a random start; randOrder draws documents
// uniformly. Both return sample document positions.
func seqOrder(rng *rand.Rand, docs, sample int64) func(yield func(int64) bool) {
	start := rng.Int64N(docs)
	return func(yield func(int64) bool) {
		for i := int64(0); i < sample; i++ {
			if !yield((start + i) % docs) {
				return
			}
		}
	}
}

func randOrder(rng *rand.Rand, docs, sample int64) func(yield func(int64) bool) {
	seed := rng.Uint64()
	return func(yield func(int64) bool) {
		r := rand.New(rand.NewPCG(seed, 7))
		for i := int64(0); i < sample; i++ {
			if !yield(r.Int64N(docs)) {
				return
			}
		}
	}
}

// timeHits reads every window of the given documents with Get, one call per window as the
// runner's hit path does, checks each vector, and returns wall and process CPU µs per window
// (CPU time is the figure less disturbed by other work on a shared machine).
func timeHits(c *shardcache.Cache, o childOptions, order func(func(int64) bool)) (wallUs, cpuUs float64, err error) {
	dst := make([]float32, o.dim)
	want := make([]float32, o.dim)
	var n int64
	var ferr error
	c0 := cpuTime()
	t0 := time.Now()
	order(func(d int64) bool {
		for w := 0; w < o.docWindows; w++ {
			k := windowKey(d, int64(w), o.docWindows)
			ok, err := c.Get(k, dst)
			if err != nil || !ok {
				ferr = fmt.Errorf("doc %d window %d: hit=%v err=%v", d, w, ok, err)
				return false
			}
			fillEmbedding(k, want[:1])
			if math.Float32bits(dst[0]) != math.Float32bits(want[0]) {
				ferr = fmt.Errorf("doc %d window %d: wrong vector", d, w)
				return false
			}
			n++
		}
		return true
	})
	if ferr != nil {
		return 0, 0, ferr
	}
	wall := time.Since(t0)
	return float64(wall.Microseconds()) / float64(n), float64((cpuTime() - c0).Microseconds()) / float64(n), nil
}

// cpuTime is the process's user + system time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timeReaggregate times what `reignpipe reaggregate` does without the GN and the sink: walk every
// manifest, fetch its windows, mean-pool them.
func timeReaggregate(c *shardcache.Cache, o childOptions, docs int64) (float64, error) {
	mp, err := aggregate.NewMeanPool(o.dim, fingerprint)
	if err != nil {
		return 0, err
	}
	rd := reaggregate.NewReader(c, o.dim)
	vec := make([]float32, o.dim)
	var seen int64
	t0 := time.Now()
	err = c.ScanManifests(func(m shardcache.Manifest) error {
		chunks, err := rd.Chunks(m)
		if err != nil {
			return fmt.Errorf("%s: %w", m.DocID, err)
		}
		seen++
		return mp.Aggregate(chunks, vec)
	})
	if err != nil {
		return 0, err
	}
	if seen != docs {
		return 0, fmt.Errorf("reaggregate saw %d documents, wrote %d", seen, docs)
	}
	return time.Since(t0).Seconds(), nil
}

// companions lists the store's companion files.
func companions(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".vec") {
			out = append(out, p)
		}
		return err
	})
	return out, err
}

// readCompanions reads every companion once, in order, so the page cache holds as many of them
// as the machine's free memory allows.
func readCompanions(dir string) error {
	paths, err := companions(dir)
	if err != nil {
		return err
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// residentShare is the fraction of the companions' pages in the page cache now (mincore): it
// says whether a random-hit figure measured memory or the disk.
func residentShare(dir string) (float64, error) {
	paths, err := companions(dir)
	if err != nil {
		return 0, err
	}
	var pages, resident int64
	for _, p := range paths {
		n, r, err := residentPages(p)
		if err != nil {
			return 0, err
		}
		pages, resident = pages+n, resident+r
	}
	if pages == 0 {
		return 0, nil
	}
	return float64(resident) / float64(pages), nil
}

func residentPages(path string) (pages, resident int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, 0, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Munmap(m)
	page := int64(os.Getpagesize())
	vec := make([]byte, (st.Size()+page-1)/page)
	// x/sys has no Mincore wrapper.
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return 0, 0, e
	}
	for _, b := range vec {
		resident += int64(b & 1)
	}
	return int64(len(vec)), resident, nil
}

func diskUsage(dir string, res *sizeResult) error {
	var pq, vec, idx int64
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		switch {
		case strings.HasSuffix(p, ".parquet"):
			pq += info.Size()
		case strings.HasSuffix(p, ".vec"):
			vec += info.Size()
		default:
			idx += info.Size()
		}
		return nil
	})
	w := float64(res.Windows)
	res.ParquetPerWin, res.VecPerWin, res.IndexPerWin = float64(pq)/w, float64(vec)/w, float64(idx)/w
	res.DiskPerWindow = float64(pq+vec+idx) / w
	return err
}
