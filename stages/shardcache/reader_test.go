package shardcache

import (
	"bufio"
	"errors"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

func readerOpts(o Options) ReaderOptions {
	return ReaderOptions{Dir: o.Dir, Fingerprint: o.Fingerprint, Dim: o.Dim, K: o.K, S: o.S}
}

// readerHas reports whether r serves every row bit-exactly, failing on any error or wrong bit.
func readerHas(t *testing.T, r *Reader, rows []Row) bool {
	t.Helper()
	dst := make([]float32, testDim)
	all := true
	for _, row := range rows {
		ok, err := r.Get(row.Key, dst)
		if err != nil {
			t.Fatalf("reader Get(%x): %v", row.Key, err)
		}
		if !ok {
			all = false
			continue
		}
		for j := range dst {
			if math.Float32bits(dst[j]) != math.Float32bits(row.Embedding[j]) {
				t.Fatalf("reader Get(%x)[%d] = %v, want %v", row.Key, j, dst[j], row.Embedding[j])
			}
		}
	}
	return all
}

// A Reader opened on a directory its writer has not even created yet sees every shard the
// writer commits afterwards -- across table doublings, which replace the table file under it
// -- while both run at once, and never a row that is not flushed. Its reads never return a
// wrong vector or an error, whatever the writer is doing to the pages it reads.
func TestReaderBesideWriter(t *testing.T) {
	old := minTableBits
	minTableBits = 0 // one bucket: the writer doubles the table several times below
	defer func() { minTableBits = old }()
	o := testOpts(t, t.TempDir()+"/cache", nil)
	r, err := OpenReader(readerOpts(o))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rows := testRows(2000, testDim, 77)
	if ok, err := r.Get(rows[0].Key, make([]float32, testDim)); ok || err != nil {
		t.Fatalf("Get before any cache exists = %v, %v", ok, err)
	}
	c := mustOpen(t, o)
	defer c.Close()

	var flushed atomic.Int64 // rows[:flushed] are durable
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // reads beside the writer, checking only that nothing read is wrong
		defer wg.Done()
		dst := make([]float32, testDim)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			row := rows[i%len(rows)]
			ok, err := r.Get(row.Key, dst)
			if err != nil {
				t.Errorf("reader Get beside the writer: %v", err)
				return
			}
			if ok && math.Float32bits(dst[0]) != math.Float32bits(row.Embedding[0]) {
				t.Errorf("reader Get(%x) read a wrong vector", row.Key)
				return
			}
		}
	}()
	for i, row := range rows {
		if _, err := c.Add(row); err != nil {
			t.Fatal(err)
		}
		if i%250 == 249 {
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			flushed.Store(int64(i + 1))
			if !readerHas(t, r, rows[:i+1]) {
				t.Fatalf("after the writer flushed %d rows the reader misses some", i+1)
			}
		}
	}
	close(stop)
	wg.Wait()
	st := r.Stats()
	if st.Reopens == 0 {
		t.Errorf("the table doubled under the reader but it never reopened it: %+v", st)
	}
	if c.tab.Bits() < 3 {
		t.Fatalf("the table has %d bits: the test did not make it double", c.tab.Bits())
	}
	// Rows the writer holds in memory are not visible: only what is on disk is served.
	extra := testRows(3, testDim, 991)
	for _, row := range extra {
		if _, err := c.Add(row); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := c.Get(extra[0].Key, make([]float32, testDim)); !ok {
		t.Fatal("writer does not hold its own buffered row")
	}
	if ok, err := r.Get(extra[0].Key, make([]float32, testDim)); ok || err != nil {
		t.Fatalf("reader served a row still in the writer's memory: %v, %v", ok, err)
	}
}

// A Reader of another space is refused as Open refuses it.
func TestReaderSpaceMismatch(t *testing.T) {
	o := testOpts(t, t.TempDir(), nil)
	writeStore(t, o, testRows(20, testDim, 5))
	ro := readerOpts(o)
	ro.K = 256
	if _, err := OpenReader(ro); !errors.Is(err, ErrSpaceMismatch) {
		t.Fatalf("reader of another K: %v", err)
	}
	r, err := OpenReader(readerOpts(o))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(1, make([]float32, testDim)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}

// TestWriterHelper is the writing process of TestReaderBesideWriterProcess: it opens the cache
// named by SHARDCACHE_WRITE, and for every line on its standard input adds the next batch of
// rows, flushes and says "flushed N", until its standard input closes.
func TestWriterHelper(t *testing.T) {
	dir := os.Getenv("SHARDCACHE_WRITE")
	if dir == "" {
		t.Skip("run by TestReaderBesideWriterProcess")
	}
	c, err := Open(Options{Dir: dir, Fingerprint: "gn-test@abc123", Dim: testDim, K: 510, S: 256, RowsPerShard: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rows := testRows(writerBatches*writerBatch, testDim, 31)
	in := bufio.NewReader(os.Stdin)
	for b := 0; ; b++ {
		if _, err := in.ReadString('\n'); err != nil {
			return
		}
		for _, r := range rows[b*writerBatch : (b+1)*writerBatch] {
			if _, err := c.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("flushed " + strconv.Itoa((b+1)*writerBatch) + "\n")
	}
}

const writerBatches, writerBatch = 3, 100

// The point of the Reader: another process holds the cache open as its writer (its index
// locked, as a running pipeline holds it), and this one reads what it committed -- also what
// it commits after the Reader opened -- without the lock.
func TestReaderBesideWriterProcess(t *testing.T) {
	dir := t.TempDir()
	_, stdin, out := child(t, "TestWriterHelper", "SHARDCACHE_WRITE="+dir)
	step := func(want int) {
		t.Helper()
		if _, err := stdin.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		if line, _ := out.ReadString('\n'); line != "flushed "+strconv.Itoa(want)+"\n" {
			t.Fatalf("the writer did not flush: %q", line)
		}
	}
	step(writerBatch)
	o := Options{Dir: dir, Fingerprint: "gn-test@abc123", Dim: testDim, K: 510, S: 256}
	if _, err := Open(o); !errors.As(err, new(*InUseError)) {
		t.Fatalf("the writer does not hold the cache: %v", err)
	}
	r, err := OpenReader(readerOpts(o))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rows := testRows(writerBatches*writerBatch, testDim, 31)
	if !readerHas(t, r, rows[:writerBatch]) {
		t.Fatal("reader misses rows the writer committed before it opened")
	}
	if readerHas(t, r, rows[writerBatch:2*writerBatch]) {
		t.Fatal("reader has rows the writer never wrote")
	}
	step(2 * writerBatch)
	if !readerHas(t, r, rows[:2*writerBatch]) {
		t.Fatal("reader misses rows the writer committed after it opened")
	}
}
