package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// The cluster's chunk store (pipelines/engine/replica) against the real broker, with real embed
// stage processes on the small GN all-minilm-l6-v2. Every GN batch holds one window
// (batching.max_batch: 1), so a window's embedding has the same bits whichever process embeds
// it, and a replica can be compared with an embedded run's cache byte for byte.

const storeGN = "all-minilm-l6-v2"

func newStoreSetup(t *testing.T) *stageSetup {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	model, tok := testenv.GN(t, storeGN)
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	s := &stageSetup{dir: t.TempDir(), brokers: brokers, topics: kafkatest.Topic(t, "store"), model: model, tok: tok}
	s.bin = filepath.Join(s.dir, "reignpipe")
	if out, err := exec.Command("go", "build", "-o", s.bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building reignpipe: %v\n%s", err, out)
	}
	return s
}

// storeConfig writes a pipeline file; cache is its cache.dir.
func (s *stageSetup) storeConfig(t *testing.T, name, transport, cache, sinks string) string {
	t.Helper()
	y := fmt.Sprintf(`version: 1
name: %s
source: {type: jsonl, path: %q, name: t}
gn: {name: %s, model: %q, tokenizer: %q}
chunking: {k: 64, s: 64}
batching: {max_wait: 2ms, token_budget: 64, max_batch: 1}
cache: {dir: %q, rows_per_shard: 64}
sinks:
%s
dead_letter: {path: %q}
run: {state_dir: %q, progress: log, commit_every: 8, commit_interval: 500ms}
transport:
  type: %s
  kafka: {brokers: [%q], topics: %q, partitions: 3, max_record_bytes: 262144}
`, name, filepath.Join(s.dir, "unused.jsonl"), storeGN, s.model, s.tok, cache, sinks, filepath.Join(s.dir, name+"-dl.jsonl"),
		filepath.Join(s.dir, name+"-state"), transport, s.brokers, s.topics)
	if _, err := pipelines.Parse([]byte(y)); err != nil {
		t.Fatalf("pipeline file: %v\n%s", err, y)
	}
	path := filepath.Join(s.dir, name+".yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// storeCorpus is n documents of 1 to 3 windows whose windows are distinct (words drawn at
// random per document), and n more with other ids and the same texts: every window of the
// second half repeats one of the first, usually on another partition.
func storeCorpus(n int) (first, copies []schemas.Document) {
	vocab := strings.Fields("river stone method claim device signal layer window token vector patent network " +
		"engine valve circuit memory table index shard cache record broker topic stream replica manifest key " +
		"north south east west green blue red amber silver copper iron carbon glass paper cloth wood water fire")
	for i := 0; i < n; i++ {
		r := rand.New(rand.NewPCG(uint64(i), 7))
		words := make([]string, 40+(i*53)%130)
		for j := range words {
			words[j] = vocab[r.IntN(len(vocab))]
		}
		text := strings.Join(words, " ")
		first = append(first, schemas.Document{ID: fmt.Sprintf("t:a%03d", i), Title: "a", Source: "t", Text: text})
		copies = append(copies, schemas.Document{ID: fmt.Sprintf("t:b%03d", i), Title: "b", Source: "t", Text: text})
	}
	return first, copies
}

// produceRaw publishes documents to P.raw as a third-party producer would.
func produceRaw(t *testing.T, s *stageSetup, docs []schemas.Document) {
	t.Helper()
	p, err := kafkaclient.NewProducer(kafkaclient.ClientConfig{Brokers: []string{s.brokers}}, kafkaclient.ProducerOptions{Topic: s.topics + ".raw"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	for _, d := range docs {
		v, err := schemas.EncodeRawDocument(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Send(context.Background(), kafkaclient.Message{Key: d.ID, Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// worker is one embed stage process and its metrics address.
type worker struct {
	label, addr, cache string
	cmd                *exec.Cmd
}

func (s *stageSetup) startWorker(t *testing.T, label, cfg, cache string) *worker {
	t.Helper()
	w := &worker{label: label, addr: freeAddr(t), cache: cache}
	w.cmd = s.start(t, label, "embed", "--cache-dir", cache, "--metrics-addr", w.addr, cfg)
	// The metrics endpoint comes up after the replica caught up and the runner started.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, ok := w.tryMetrics(); ok {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no metrics after 2 minutes", label)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (w *worker) tryMetrics() (map[string]float64, bool) {
	resp, err := http.Get("http://" + w.addr + "/metrics")
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(f[0], "{")
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		out[name] = v
	}
	return out, true
}

func (w *worker) metric(t *testing.T, name string) int64 {
	t.Helper()
	m, ok := w.tryMetrics()
	if !ok {
		t.Fatalf("%s: metrics endpoint down", w.label)
	}
	return int64(m[name])
}

func sumMetric(t *testing.T, ws []*worker, name string) int64 {
	var n int64
	for _, w := range ws {
		n += w.metric(t, name)
	}
	return n
}

// waitFor polls cond until it holds, or fails the test after timeout.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: still %s after %v", what, state, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitReplicated waits until every worker's replica has applied P.windows up to its current
// end offsets: from then on, each window embedded so far is a hit on every worker.
func waitReplicated(t *testing.T, s *stageSetup, ws []*worker) {
	t.Helper()
	end, err := kafkaclient.EndOffsets(context.Background(), kafkaclient.ClientConfig{Brokers: []string{s.brokers}}, s.topics+".windows")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, e := range end {
		total += e
	}
	for _, w := range ws {
		waitFor(t, w.label+" replica", time.Minute, func() (bool, string) {
			n := w.metric(t, "reignpipe_replica_windows_applied_total") + w.metric(t, "reignpipe_replica_windows_known_total") + w.metric(t, "reignpipe_window_conflicts_total")
			return n >= total, fmt.Sprintf("%d of %d window records applied", n, total)
		})
	}
}

// embeddedStore runs the corpus in embedded mode into its own cache and returns the cache dir.
func embeddedStore(t *testing.T, s *stageSetup, docs []schemas.Document) string {
	t.Helper()
	var b strings.Builder
	for _, d := range docs {
		d.ID = strings.TrimPrefix(d.ID, "t:") // the source's name (t) prefixes it again
		v, _ := schemas.EncodeRawDocument(d)
		b.Write(v)
		b.WriteByte('\n')
	}
	input := filepath.Join(s.dir, "corpus.jsonl")
	if err := os.WriteFile(input, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(s.dir, "embedded-cache")
	cfg, err := pipelines.Load(s.storeConfig(t, "embedded", "embedded", cache, fmt.Sprintf("  - {type: parquet, dir: %q}", filepath.Join(s.dir, "embedded-vectors"))))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Source.Path = input
	if _, err := run(context.Background(), cfg, false); err != nil {
		t.Fatal(err)
	}
	return cache
}

func openStore(t *testing.T, dir string) *shardcache.Cache {
	t.Helper()
	fp, dim, k, sv, err := shardcache.ReadSpace(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := shardcache.Open(shardcache.Options{Dir: dir, Fingerprint: fp, Dim: dim, K: k, S: sv})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// assertSameStore: got holds exactly want's manifests, and every window they name with the
// same bits; and as many rows.
func assertSameStore(t *testing.T, wantDir, gotDir string) {
	t.Helper()
	want, got := openStore(t, wantDir), openStore(t, gotDir)
	defer want.Close()
	defer got.Close()
	dim := want.Options().Dim
	a, b := make([]float32, dim), make([]float32, dim)
	mans, keys := 0, map[uint64]bool{}
	err := want.ScanManifests(func(m shardcache.Manifest) error {
		mans++
		g, ok, err := got.Manifest(m.DocID)
		if err != nil || !ok || g.Version != m.Version || g.ContentHash != m.ContentHash || fmt.Sprint(g.Keys) != fmt.Sprint(m.Keys) || g.NTokens != m.NTokens || g.Title != m.Title {
			return fmt.Errorf("manifest %s: got %+v (found %v, %v), want %+v", m.DocID, g, ok, err, m)
		}
		for _, k := range m.Keys {
			keys[k] = true
			hw, err1 := want.Get(k, a)
			hg, err2 := got.Get(k, b)
			if !hw || !hg || err1 != nil || err2 != nil {
				return fmt.Errorf("window %016x of %s: embedded has it %v (%v), the store %v (%v)", k, m.DocID, hw, err1, hg, err2)
			}
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					return fmt.Errorf("window %016x: component %d is %v in the embedded cache, %v in the store", k, i, a[i], b[i])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	gm := 0
	_ = got.ScanManifests(func(shardcache.Manifest) error { gm++; return nil })
	if gm != mans || got.Stats().Rows != want.Stats().Rows {
		t.Fatalf("store has %d manifests and %d windows, the embedded cache %d and %d", gm, got.Stats().Rows, mans, want.Stats().Rows)
	}
	t.Logf("%s equals the embedded cache: %d manifests, %d windows, same bits", filepath.Base(gotDir), mans, len(keys))
}

func waitDocs(t *testing.T, ws []*worker, base, want int64) {
	t.Helper()
	waitFor(t, "documents committed", 3*time.Minute, func() (bool, string) {
		n := sumMetric(t, ws, "reignpipe_docs_written_total") - base
		return n >= want, fmt.Sprintf("%d of %d", n, want)
	})
}

// TestStoreWorkersShareWindows: two workers embed a corpus whose second half repeats the first
// half's windows under other doc ids. The second half is produced only after both replicas
// applied every window of the first, so the GN sees each distinct window exactly once in
// total, whichever partitions the copies land on. A third worker with an empty directory then
// joins and the corpus comes again: 0 GN windows. A worker is killed, its directory deleted,
// and restarted: it starts warm (0 GN windows on the next pass), and its store equals an
// embedded run's cache key for key and bit for bit, and verify passes on it.
func TestStoreWorkersShareWindows(t *testing.T) {
	s := newStoreSetup(t)
	first, copies := storeCorpus(16)
	all := append(append([]schemas.Document{}, first...), copies...)
	embCache := embeddedStore(t, s, all)
	ec := openStore(t, embCache)
	distinct := ec.Stats().Rows
	ec.Close()

	cfg := s.storeConfig(t, "dist", "kafka", filepath.Join(s.dir, "unused-cache"), "  - {type: kafka}")
	wa := s.startWorker(t, "embed-a", cfg, filepath.Join(s.dir, "cache-a"))
	wb := s.startWorker(t, "embed-b", cfg, filepath.Join(s.dir, "cache-b"))
	ws := []*worker{wa, wb}
	time.Sleep(5 * time.Second) // let the group settle, so both workers usually share the partitions
	produceRaw(t, s, first)
	waitDocs(t, ws, 0, int64(len(first)))
	waitReplicated(t, s, ws)
	produceRaw(t, s, copies)
	waitDocs(t, ws, 0, int64(len(all)))
	gnA, gnB := wa.metric(t, "reignpipe_gn_windows_total"), wb.metric(t, "reignpipe_gn_windows_total")
	t.Logf("two workers: GN windows %d + %d, distinct windows %d", gnA, gnB, distinct)
	if gnA+gnB != distinct {
		t.Fatalf("the GN embedded %d + %d windows; the corpus has %d distinct (each once in total)", gnA, gnB, distinct)
	}

	// A third worker with an empty directory starts warm.
	wc := s.startWorker(t, "embed-c", cfg, filepath.Join(s.dir, "cache-c"))
	ws = append(ws, wc)
	// Again until the group's rebalance has given the new worker partitions (a few seconds).
	for round := 0; round < 15 && wc.metric(t, "reignpipe_docs_written_total") == 0; round++ {
		base := sumMetric(t, ws, "reignpipe_docs_written_total")
		produceRaw(t, s, all)
		waitDocs(t, ws, base, int64(len(all)))
		time.Sleep(time.Second)
	}
	if g := sumMetric(t, ws, "reignpipe_gn_windows_total"); g != distinct {
		t.Fatalf("after a third worker joined and the corpus came again, the GN embedded %d windows in all (want %d: none new)", g, distinct)
	}
	t.Logf("third worker joined (%d documents committed by it): 0 new GN windows", wc.metric(t, "reignpipe_docs_written_total"))

	// Kill worker A, lose its disk, restart it.
	_ = wa.cmd.Process.Kill()
	_ = wa.cmd.Wait()
	if err := os.RemoveAll(wa.cache); err != nil {
		t.Fatal(err)
	}
	wa2 := s.startWorker(t, "embed-a2", cfg, wa.cache)
	ws = []*worker{wa2, wb, wc}
	gnBefore := wb.metric(t, "reignpipe_gn_windows_total") + wc.metric(t, "reignpipe_gn_windows_total")
	for round := 0; round < 15 && wa2.metric(t, "reignpipe_docs_written_total") == 0; round++ {
		base := sumMetric(t, ws, "reignpipe_docs_written_total")
		produceRaw(t, s, all)
		waitDocs(t, ws, base, int64(len(all)))
		time.Sleep(time.Second)
	}
	t.Logf("restarted worker with a wiped directory committed %d documents", wa2.metric(t, "reignpipe_docs_written_total"))
	if g := sumMetric(t, ws, "reignpipe_gn_windows_total") - gnBefore; g != 0 {
		t.Fatalf("the restarted worker with a wiped directory and the others embedded %d windows (want 0)", g)
	}
	waitFor(t, "the restarted replica to hold every manifest", time.Minute, func() (bool, string) {
		n := wa2.metric(t, "reignpipe_replica_manifests_applied_total")
		return n >= int64(len(all)), fmt.Sprintf("%d of %d", n, len(all))
	})
	for _, w := range ws {
		stop(t, w.label, w.cmd)
	}
	assertSameStore(t, embCache, wa.cache)
	vcfg := s.storeConfig(t, "verify", "embedded", wa.cache, fmt.Sprintf("  - {type: parquet, dir: %q}", filepath.Join(s.dir, "verify-vectors")))
	if out, err := exec.Command(s.bin, "verify", vcfg).CombinedOutput(); err != nil || !strings.Contains(string(out), `"windows_to_reembed": 0`) {
		t.Fatalf("verify on the restored store: %v\n%s", err, out)
	}
}
