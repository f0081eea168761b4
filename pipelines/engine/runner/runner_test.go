package runner

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

const dim = 8

// sliceSource yields documents; an entry with ID "bad:*" is returned as a bad input.
type sliceSource struct {
	mu       sync.Mutex // guards i for readCount; Read is called from one goroutine
	docs     []schemas.Document
	i        int
	delay    time.Duration
	acked    atomic.Int64
	cancelAt int    // when > 0: call cancel after handing out this many inputs (an interrupt)
	cancel   func() // the run's soft stop
}

func (s *sliceSource) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return schemas.Document{}, nil, ctx.Err()
		}
	}
	s.mu.Lock()
	if s.i >= len(s.docs) {
		s.mu.Unlock()
		return schemas.Document{}, nil, io.EOF
	}
	d := s.docs[s.i]
	s.i++
	s.mu.Unlock()
	if s.cancelAt > 0 && s.i == s.cancelAt {
		s.cancel()
	}
	ack := func(context.Context, error) error { s.acked.Add(1); return nil }
	if strings.HasPrefix(d.ID, "bad:") {
		return schemas.Document{}, ack, &connectors.BadInputError{DocID: d.ID, Position: fmt.Sprint(s.i), Reason: errors.New("malformed")}
	}
	return d, ack, nil
}
func (s *sliceSource) Stats() connectors.SourceStats {
	return connectors.SourceStats{Read: int64(s.readCount())}
}

func (s *sliceSource) readCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.i
}
func (s *sliceSource) Close(context.Context) error { return nil }

// wordTokenizer maps each space-separated word to an id.
type wordTokenizer struct{}

func (wordTokenizer) AppendEncode(dst []int32, text string) []int32 {
	for _, w := range strings.Fields(text) {
		h := fnv.New32a()
		h.Write([]byte(w))
		dst = append(dst, int32(h.Sum32()%30000)+10)
	}
	return dst
}
func (wordTokenizer) CLS() int32 { return 1 }
func (wordTokenizer) SEP() int32 { return 2 }

// fakeGN embeds a window as a deterministic unit vector of its tokens, asynchronously.
type fakeGN struct {
	calls  atomic.Int64
	failOn int32 // a window containing this token fails
	wg     sync.WaitGroup
}

func vectorOf(w []int32) []float32 {
	v := make([]float32, dim)
	for i, id := range w {
		v[(int(id)+i)%dim] += float32(id%7) + 1
	}
	var n float64
	for _, x := range v {
		n += float64(x * x)
	}
	for i := range v {
		v[i] /= float32(math.Sqrt(n))
	}
	return v
}

func (g *fakeGN) Abort(error) {}

func (g *fakeGN) Submit(ctx context.Context, w []int32, out []float32, done func(error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.calls.Add(1)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for _, id := range w {
			if g.failOn != 0 && id == g.failOn {
				done(errors.New("forward pass failed"))
				return
			}
		}
		copy(out, vectorOf(w))
		done(nil)
	}()
	return nil
}

type memSink struct {
	mu      sync.Mutex
	buf     []schemas.DocVector
	durable []schemas.DocVector
	failOn  string
	flushes int
	deleted []schemas.Deletion
	// order is every write ("id@version") and deletion ("-id@version") in the order it came.
	order []string
}

// Delete keeps the deletions in the order they came; none is applied to buf.
func (m *memSink) Delete(ctx context.Context, d schemas.Deletion) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deleted = append(m.deleted, d)
	m.order = append(m.order, "-"+d.DocID+"@"+d.Version)
	return nil
}

func (m *memSink) Write(ctx context.Context, v schemas.DocVector) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.failOn != "" && v.DocID == m.failOn {
		return errors.New("disk full")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.buf = append(m.buf, v)
	m.order = append(m.order, v.DocID+"@"+v.Version)
	return nil
}
func (m *memSink) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil { // like a real sink
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.durable = append(m.durable, m.buf...)
	m.buf = nil
	m.flushes++
	return nil
}
func (m *memSink) Close(ctx context.Context) error { return m.Flush(ctx) }

type memDL struct {
	mu sync.Mutex
	d  []schemas.DeadLetter
}

func (m *memDL) WriteDeadLetter(_ context.Context, d schemas.DeadLetter) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.d = append(m.d, d)
	return nil
}
func (m *memDL) Close(context.Context) error { return nil }

func corpus(n int) []schemas.Document {
	var docs []schemas.Document
	for i := 0; i < n; i++ {
		words := make([]string, 3+i*7%40) // 3..42 words: 1 to 6 windows at K=10
		for j := range words {
			words[j] = fmt.Sprintf("w%d", (i*13+j)%50)
		}
		docs = append(docs, schemas.Document{ID: fmt.Sprintf("t:%d", i), Source: "t", Version: "1", Title: fmt.Sprint("doc ", i), Text: strings.Join(words, " ")})
	}
	return docs
}

type rig struct {
	src   *sliceSource
	gn    *fakeGN
	cache *shardcache.Cache
	sink  *memSink
	dl    *memDL
	r     *Runner
}

func newRig(t *testing.T, dir string, docs []schemas.Document, opt Options) *rig {
	t.Helper()
	p := chunk.Params{K: 10, S: 10}
	cache, err := shardcache.Open(shardcache.Options{Dir: dir, Fingerprint: "fake-gn", Dim: dim, K: p.K, S: p.S, RowsPerShard: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	agg, _ := aggregate.NewMeanPool(dim, "fake-gn")
	rg := &rig{src: &sliceSource{docs: docs}, gn: &fakeGN{}, cache: cache, sink: &memSink{}, dl: &memDL{}}
	if opt.CommitEvery == 0 {
		opt.CommitEvery = 4
	}
	opt.TokenizeWorkers = 3
	rg.r, err = New(Parts{Source: rg.src, Tokenizer: wordTokenizer{}, Chunking: p, Fingerprint: "fake-gn", Dim: dim,
		Embedder: gnOf{rg.gn}, Cache: cache, Aggregation: engine.Aggregation{Aggregator: agg}, Sinks: []connectors.Sink{rg.sink}, DeadLetter: rg.dl}, opt)
	if err != nil {
		t.Fatal(err)
	}
	return rg
}

func TestEveryInputAccountedAndVectorsCorrect(t *testing.T) {
	docs := corpus(40)
	docs = append(docs[:10], append([]schemas.Document{{ID: "bad:x"}}, docs[10:]...)...)
	var marks []int64
	rg := newRig(t, t.TempDir(), docs, Options{OnCommit: func(w int64) error { marks = append(marks, w); return nil }})
	if err := rg.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := &rg.r.C
	if c.InputsRead.Load() != 41 || c.DocsWritten.Load() != 40 || c.DocsFailed.Load() != 1 {
		t.Fatalf("read %d written %d failed %d", c.InputsRead.Load(), c.DocsWritten.Load(), c.DocsFailed.Load())
	}
	if rg.src.acked.Load() != 41 || marks[len(marks)-1] != 41 {
		t.Fatalf("acked %d, last watermark %v", rg.src.acked.Load(), marks)
	}
	if len(rg.dl.d) != 1 || rg.dl.d[0].DocID != "bad:x" || rg.dl.d[0].Stage != "source" {
		t.Fatalf("dead letters %+v", rg.dl.d)
	}
	got := map[string]schemas.DocVector{}
	for _, v := range rg.sink.durable {
		got[v.DocID] = v
	}
	if len(got) != 40 || len(rg.sink.buf) != 0 {
		t.Fatalf("%d durable vectors, %d unflushed", len(got), len(rg.sink.buf))
	}
	p := chunk.Params{K: 10, S: 10}
	agg, _ := aggregate.NewMeanPool(dim, "fake-gn")
	for _, d := range docs {
		if strings.HasPrefix(d.ID, "bad:") {
			continue
		}
		ids := wordTokenizer{}.AppendEncode(nil, d.Text)
		var chunks [][]float32
		for _, w := range p.Windows(ids, 1, 2) {
			chunks = append(chunks, vectorOf(w))
		}
		want := make([]float32, dim)
		agg.Aggregate(chunks, want)
		v := got[d.ID]
		if v.NChunks != len(chunks) || v.NTokens != len(ids) || v.ContentHash != d.ContentHash() || v.Space != "gn-meanpool:fake-gn" {
			t.Fatalf("%s: %+v", d.ID, v)
		}
		for i := range want {
			if math.Abs(float64(want[i]-v.Vector[i])) > 1e-6 {
				t.Fatalf("%s vector %v want %v", d.ID, v.Vector, want)
			}
		}
		m, ok, err := rg.cache.Manifest(d.ID)
		if err != nil || !ok || len(m.Keys) != len(chunks) {
			t.Fatalf("%s manifest %+v %v %v", d.ID, m, ok, err)
		}
	}
}

func TestSecondRunSendsNothingToGN(t *testing.T) {
	dir := t.TempDir()
	docs := corpus(30)
	first := newRig(t, dir, docs, Options{})
	if err := first.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if first.gn.calls.Load() == 0 {
		t.Fatal("first run embedded nothing")
	}
	first.cache.Close()
	second := newRig(t, dir, docs, Options{})
	if err := second.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := second.gn.calls.Load(); n != 0 || second.r.C.GNWindows.Load() != 0 {
		t.Fatalf("second run sent %d windows to the GN", n)
	}
	if second.r.C.CacheHits.Load() != second.r.C.Windows.Load() || second.r.C.DocsWritten.Load() != 30 {
		t.Fatalf("hits %d of %d windows, %d written", second.r.C.CacheHits.Load(), second.r.C.Windows.Load(), second.r.C.DocsWritten.Load())
	}
	for i, v := range second.sink.durable {
		_ = i
		var w schemas.DocVector
		for _, x := range first.sink.durable {
			if x.DocID == v.DocID {
				w = x
			}
		}
		for j := range v.Vector {
			if v.Vector[j] != w.Vector[j] {
				t.Fatalf("%s: cached vector differs from computed one", v.DocID)
			}
		}
	}
}

// Interrupt a run, resume from its watermark: every document ends up written, none lost, and
// nothing already committed is read into the pipeline again.
func TestInterruptAndResume(t *testing.T) {
	dir := t.TempDir()
	docs := corpus(60)
	var wm atomic.Int64
	first := newRig(t, dir, docs, Options{CommitEvery: 3, OnCommit: func(w int64) error { wm.Store(w); return nil }})
	ctx, cancel := context.WithCancel(context.Background())
	first.src.cancelAt, first.src.cancel = 20, cancel
	if err := first.r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	w := wm.Load()
	if w > 20 {
		t.Fatalf("watermark after interrupt = %d (read %d written %d abandoned %d failed %d)", w, first.r.C.InputsRead.Load(), first.r.C.DocsWritten.Load(), first.r.C.Abandoned.Load(), first.r.C.DocsFailed.Load())
	}
	seen := map[string]int{}
	for _, v := range first.sink.durable {
		seen[v.DocID]++
	}
	first.cache.Close()
	second := newRig(t, dir, docs, Options{Resume: w})
	if err := second.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if second.r.C.Resumed.Load() != w {
		t.Fatalf("resumed %d, want %d", second.r.C.Resumed.Load(), w)
	}
	for _, v := range second.sink.durable {
		seen[v.DocID]++
	}
	for _, d := range docs {
		if seen[d.ID] == 0 {
			t.Fatalf("%s lost", d.ID)
		}
	}
	if second.r.C.DocsWritten.Load() != int64(60)-w {
		t.Fatalf("second run wrote %d, want %d", second.r.C.DocsWritten.Load(), 60-w)
	}
}

func TestGNFailureIsDeadLetteredAndRunContinues(t *testing.T) {
	docs := corpus(10)
	rg := newRig(t, t.TempDir(), docs, Options{})
	rg.gn.failOn = wordTokenizer{}.AppendEncode(nil, "w13")[0] // appears in some documents only
	if err := rg.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := &rg.r.C
	if c.DocsFailed.Load() == 0 || c.DocsWritten.Load()+c.DocsFailed.Load() != 10 {
		t.Fatalf("written %d failed %d", c.DocsWritten.Load(), c.DocsFailed.Load())
	}
	for _, d := range rg.dl.d {
		if d.Stage != "gn" || !strings.Contains(d.Err, "forward pass failed") || d.DocID == "" {
			t.Fatalf("dead letter %+v", d)
		}
	}
}

func TestSinkFailureIsFatal(t *testing.T) {
	rg := newRig(t, t.TempDir(), corpus(20), Options{})
	rg.sink.failOn = "t:7"
	err := rg.r.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("got %v", err)
	}
	if w := rg.r.C.Watermark.Load(); w >= 20 {
		t.Fatalf("watermark %d moved past the failed write", w)
	}
}

// stuckGN accepts windows and never finishes them until Abort, like a GN far too slow for the
// drain deadline.
type stuckGN struct {
	onFirst sync.Once
	first   func() // called when the first window gets stuck
	free    int    // windows whose token is this finish at once
	mu      sync.Mutex
	pending []func(error)
	aborted atomic.Bool
}

func (g *stuckGN) Submit(ctx context.Context, w []int32, out []float32, done func(error)) error {
	if g.aborted.Load() {
		return errors.New("closed")
	}
	if len(w) == 3 { // [CLS] one-word [SEP]: finishes at once
		copy(out, vectorOf(w))
		go done(nil)
		return nil
	}
	g.onFirst.Do(g.first)
	g.mu.Lock()
	g.pending = append(g.pending, done)
	g.mu.Unlock()
	return nil
}

func (g *stuckGN) Abort(err error) {
	g.aborted.Store(true)
	g.mu.Lock()
	p := g.pending
	g.pending = nil
	g.mu.Unlock()
	for _, done := range p {
		done(err)
	}
}

// The hard stop: after DrainTimeout the queued windows are dropped, the run returns, and the
// documents they belonged to are neither written, dead-lettered nor acked.
func TestHardStopAbandons(t *testing.T) {
	docs := append([]schemas.Document{{ID: "t:short", Text: "one"}}, corpus(10)...)
	rg := newRig(t, t.TempDir(), docs, Options{DrainTimeout: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	g := &stuckGN{first: cancel} // interrupted once a document is stuck at the GN
	rg.r.parts.Embedder = gnOf{g}
	rg.r.opt.TokenizeWorkers = 1 // keep source order: the short document reaches the GN first
	start := time.Now()
	if err := rg.r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("hard stop took %v", el)
	}
	c := &rg.r.C
	// The short document finished before the deadline: it is still written and committed.
	if !g.aborted.Load() || c.Abandoned.Load() == 0 || c.DocsWritten.Load() != 1 || c.DocsFailed.Load() != 0 {
		t.Fatalf("aborted %v abandoned %d written %d failed %d", g.aborted.Load(), c.Abandoned.Load(), c.DocsWritten.Load(), c.DocsFailed.Load())
	}
	if c.Watermark.Load() != 1 || rg.src.acked.Load() != 1 || len(rg.dl.d) != 0 || len(rg.sink.durable) != 1 {
		t.Fatalf("watermark %d acked %d dead letters %d", c.Watermark.Load(), rg.src.acked.Load(), len(rg.dl.d))
	}
}

// Anchored mode cuts windows at paragraph boundaries: an edited paragraph re-embeds only the
// windows it touches, where fixed windows after the edit would all shift.
func TestAnchoredModeReembedsOnlyTouchedWindows(t *testing.T) {
	var paras []string
	for i := 0; i < 60; i++ {
		paras = append(paras, fmt.Sprintf("p%d a%d b%d c%d", i, i%7, i%5, i%3))
	}
	doc := schemas.Document{ID: "t:1", Version: "1", Text: strings.Join(paras, "\n")}
	edited := doc
	edited.Version = "2"
	edited.Text = strings.Join(append([]string{"a new first paragraph"}, paras...), "\n")

	reembedded := func(anchored bool) int64 {
		dir := t.TempDir()
		first := newRig(t, dir, []schemas.Document{doc}, Options{})
		first.r.parts.Anchored = anchored
		if err := first.r.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		first.cache.Close()
		second := newRig(t, dir, []schemas.Document{edited}, Options{})
		second.r.parts.Anchored = anchored
		if err := second.r.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if second.r.C.DocsWritten.Load() != 1 {
			t.Fatal("edited document not written")
		}
		return second.r.C.GNWindows.Load()
	}
	fixed, anchored := reembedded(false), reembedded(true)
	if anchored >= fixed || anchored > 3 {
		t.Fatalf("after an insertion at the top: fixed re-embeds %d windows, anchored %d", fixed, anchored)
	}
}

// failingSource delivers its documents, then fails as a truncated file does.
type failingSource struct {
	sliceSource
	err error
}

func (s *failingSource) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	d, ack, err := s.sliceSource.Read(ctx)
	if errors.Is(err, io.EOF) {
		return d, nil, s.err
	}
	return d, ack, err
}

// A source that fails mid-run ends the reading, not the documents it already delivered: they
// are written and committed, nothing is dead-lettered, and Run reports the source's error.
func TestSourceErrorKeepsDeliveredDocuments(t *testing.T) {
	docs := corpus(7)
	rg := newRig(t, t.TempDir(), nil, Options{CommitEvery: 100})
	truncated := errors.New("bzip2: unexpected EOF")
	src := &failingSource{sliceSource: sliceSource{docs: docs}, err: truncated}
	rg.r.parts.Source = src
	err := rg.r.Run(context.Background())
	if !errors.Is(err, truncated) {
		t.Fatalf("Run = %v, want the source's error", err)
	}
	c := &rg.r.C
	if c.DocsWritten.Load() != 7 || c.DocsFailed.Load() != 0 || len(rg.dl.d) != 0 || c.Abandoned.Load() != 0 {
		t.Fatalf("written %d failed %d dead letters %v abandoned %d", c.DocsWritten.Load(), c.DocsFailed.Load(), rg.dl.d, c.Abandoned.Load())
	}
	if c.Watermark.Load() != 7 || src.acked.Load() != 7 || len(rg.sink.durable) != 7 {
		t.Fatalf("watermark %d acked %d durable %d", c.Watermark.Load(), src.acked.Load(), len(rg.sink.durable))
	}
}

// failingSink accepts writes and fails the first flush, as a full disk does.
type failingSink struct{ memSink }

func (f *failingSink) Flush(context.Context) error { return errors.New("no space left on device") }

// After a fatal error the summary still adds up: what was read is written (committed),
// failed, resumed or abandoned, and nothing uncommitted is reported as written.
func TestFatalErrorSummaryAddsUp(t *testing.T) {
	rg := newRig(t, t.TempDir(), corpus(30), Options{CommitEvery: 5})
	sink := &failingSink{}
	rg.r.parts.Sinks = []connectors.Sink{sink}
	if err := rg.r.Run(context.Background()); err == nil {
		t.Fatal("Run succeeded with a sink that cannot flush")
	}
	var s engine.Summary
	rg.r.Summarize(&s, rg.src.Stats())
	if s.DocsWritten != 0 || s.InputsRead == 0 {
		t.Fatalf("written %d of %d read, though no flush succeeded", s.DocsWritten, s.InputsRead)
	}
	if got := s.Accounted(); got != s.InputsRead {
		t.Fatalf("read %d, accounted %d (written %d failed %d resumed %d abandoned %d)",
			s.InputsRead, got, s.DocsWritten, s.DocsFailed, s.DocsResumed, s.Abandoned)
	}
	if rg.src.acked.Load() != 0 {
		t.Fatalf("%d inputs acked without a durable sink", rg.src.acked.Load())
	}
}

// At a soft stop every input read is accounted for, including one read while the stop came.
func TestSoftStopSummaryAddsUp(t *testing.T) {
	for _, at := range []int{1, 5, 17} {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			rg := newRig(t, t.TempDir(), corpus(40), Options{})
			ctx, cancel := context.WithCancel(context.Background())
			rg.src.cancelAt, rg.src.cancel = at, cancel
			if err := rg.r.Run(ctx); err != nil {
				t.Fatal(err)
			}
			var s engine.Summary
			rg.r.Summarize(&s, rg.src.Stats())
			if got := s.Accounted(); got != s.InputsRead {
				t.Fatalf("read %d, accounted %d (written %d abandoned %d)", s.InputsRead, got, s.DocsWritten, s.Abandoned)
			}
			if s.DocsWritten != rg.src.acked.Load() {
				t.Fatalf("written %d, acked %d", s.DocsWritten, rg.src.acked.Load())
			}
		})
	}
}

// A damaged row in the chunk cache costs one GN pass, not a dead letter: the window is
// embedded again, the row replaced, and the next run finds the cache whole.
func TestDamagedCacheRowIsReembedded(t *testing.T) {
	dir := t.TempDir()
	docs := corpus(20)
	rg := newRig(t, dir, docs, Options{})
	if err := rg.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	rg.cache.Close()
	vec := filepath.Join(dir, "shards", "shard-00000001.vec")
	data, err := os.ReadFile(vec)
	if err != nil {
		t.Fatal(err)
	}
	data[32+2*(16+4*dim)+20] ^= 0x40 // inside row 2's embedding
	if err := os.WriteFile(vec, data, 0o644); err != nil {
		t.Fatal(err)
	}
	rg2 := newRig(t, dir, docs, Options{})
	if err := rg2.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := &rg2.r.C
	// One row is damaged; documents sharing that window may each meet it before the first
	// re-embedded row is added, so each such read goes to the GN or, when another document's
	// pass for it is in flight, takes that pass's vector; nothing else reaches the GN.
	if c.DocsFailed.Load() != 0 || c.CacheCorrupt.Load() < 1 || c.GNWindows.Load() < 1 || c.GNWindows.Load()+c.GNShared.Load() != c.CacheCorrupt.Load() {
		t.Fatalf("second run: failed %d, corrupt %d, GN windows %d, shared %d; want 0 failed and each damaged read embedded or shared",
			c.DocsFailed.Load(), c.CacheCorrupt.Load(), c.GNWindows.Load(), c.GNShared.Load())
	}
	first := map[string][]float32{}
	for _, v := range rg.sink.durable {
		first[v.DocID] = v.Vector
	}
	for _, v := range rg2.sink.durable {
		if !slices.Equal(first[v.DocID], v.Vector) {
			t.Fatalf("%s: vector changed after the heal", v.DocID)
		}
	}
	rg2.cache.Close()
	rg3 := newRig(t, dir, docs, Options{})
	if err := rg3.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := rg3.r.C.GNWindows.Load() + rg3.r.C.CacheCorrupt.Load(); n != 0 {
		t.Fatalf("third run: %d windows to the GN or damaged; the cache did not heal", n)
	}
}

// chunk_rows_written counts rows the cache really stored: a window that two documents in
// flight both missed is embedded once (the second waits for the first's vector), and both
// documents hand it to the cache, which stores, and counts, it once.
func TestChunkRowsCountedOnce(t *testing.T) {
	docs := corpus(3)
	docs[1].Text = docs[0].Text // one window, the same in both
	rg := newRig(t, t.TempDir(), docs, Options{CommitEvery: 100})
	// Hold the GN until both copies were looked up, so both really miss.
	g := &gateGN{open: make(chan struct{})}
	rg.r.parts.Embedder = gnOf{g}
	errc := make(chan error, 1)
	go func() { errc <- rg.r.Run(context.Background()) }()
	c := &rg.r.C
	for deadline := time.Now().Add(10 * time.Second); c.CacheHits.Load()+c.GNWindows.Load()+c.GNShared.Load() < 5 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(g.open)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	g.wg.Wait()
	if c.Windows.Load() != 5 || c.GNShared.Load() != 1 || c.GNWindows.Load() != 4 || g.n.Load() != 4 {
		t.Fatalf("windows %d, shared %d, gn_windows %d, GN calls %d; want 5, 1, 4, 4", c.Windows.Load(), c.GNShared.Load(), c.GNWindows.Load(), g.n.Load())
	}
	if got, want := c.ChunkRowsNew.Load(), rg.cache.Stats().Rows; got != want || got != 4 {
		t.Fatalf("chunk_rows_written %d, the cache holds %d rows; want 4", got, want)
	}
}

// legacyGN is a test GN that takes a window, its output and its done callback.
type legacyGN interface {
	Submit(ctx context.Context, w []int32, out []float32, done func(error)) error
	Abort(error)
}

// gnOf makes a legacyGN the runner's engine.GN (it ignores Request.Ctx and Lookup, as a GN
// that runs every window it is given would).
type gnOf struct{ g legacyGN }

func (a gnOf) Submit(ctx context.Context, r gn.Request) error {
	return a.g.Submit(ctx, r.Tokens, r.Out, r.Done)
}
func (a gnOf) Abort(err error) { a.g.Abort(err) }
