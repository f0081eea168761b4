// Command objstore measures reading and writing through S3 against local disk, side by side in
// one run on one machine: a multistream Wikipedia dump read from a bucket by ranged GETs and the
// same dump on disk (documents/s, with 1 and -workers streams at a time), and the parquet vector
// sink writing its parts to a bucket and to a folder (vectors/s, MB/s), with the process's
// resident memory during each.
//
//	ops/with-s3proxy go run ./ops/bench/objstore [-pages 20000] [-workers 4] [-vectors 200000]
//	    [-out ops/bench/results/objstore-DATE.md]
//
// The server is the one at REIGNPIPE_S3_ENDPOINT (ops/s3proxy: s3proxy storing buckets as
// folders on this machine's disk, so the bucket's figures are the S3 API's and HTTP's cost over
// the same disk, not a network's). The key pair is REIGNPIPE_S3_ACCESS_KEY_ID and
// REIGNPIPE_S3_SECRET_ACCESS_KEY (ops/with-s3proxy exports both). The dump is synthetic: pages of
// ordinary sentences, 100 pages a stream, written with its index the way Wikimedia lays them out.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsnet/compress/bzip2"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/connectors/wikipedia"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/ops/bench/benchenv"
	"github.com/reignpipe/reignpipe/schemas"
)

func main() {
	pages := flag.Int("pages", 20000, "pages in the synthetic dump")
	workers := flag.Int("workers", 4, "streams read at a time in the parallel trial (source.workers)")
	vectors := flag.Int("vectors", 200000, "vectors the sink trials write (dimension 384, a part every 10000)")
	out := flag.String("out", "", "results file to append the run's section to (default: print it)")
	flag.Parse()
	if err := run(*pages, *workers, *vectors, *out); err != nil {
		fmt.Fprintln(os.Stderr, "objstore:", err)
		os.Exit(1)
	}
}

func run(pages, workers, vectors int, out string) error {
	ep := os.Getenv("REIGNPIPE_S3_ENDPOINT")
	if ep == "" {
		return errors.New("REIGNPIPE_S3_ENDPOINT is not set: run under ops/with-s3proxy")
	}
	os.Setenv("AWS_ACCESS_KEY_ID", os.Getenv("REIGNPIPE_S3_ACCESS_KEY_ID"))
	os.Setenv("AWS_SECRET_ACCESS_KEY", os.Getenv("REIGNPIPE_S3_SECRET_ACCESS_KEY"))
	set := objstore.S3Settings{Region: "us-east-1", Endpoint: ep, PathStyle: true}
	ctx := context.Background()
	bucket := fmt.Sprintf("bench-objstore-%d", time.Now().UnixNano()%1_000_000_000)
	if err := objstore.CreateBucket(ctx, set, bucket); err != nil {
		return err
	}
	defer objstore.RemoveBucket(context.Background(), set, bucket)
	st := objstore.New(set)
	dir, err := os.MkdirTemp("", "bench-objstore-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	dump, index, err := writeDump(dir, pages)
	if err != nil {
		return err
	}
	for _, p := range []string{dump, index} {
		tmp := p + ".copy"
		if err := copyFile(p, tmp); err != nil {
			return err
		}
		if err := st.Publish(ctx, tmp, "s3://"+bucket+"/"+filepath.Base(p)); err != nil {
			return err
		}
	}
	fi, _ := os.Stat(dump)

	var rows []string
	for _, w := range []int{1, workers} {
		for _, where := range []struct{ name, path string }{{"local disk", dump}, {"bucket (s3proxy)", "s3://" + bucket + "/" + filepath.Base(dump)}} {
			n, d, rss, err := readDump(ctx, st, where.path, w)
			if err != nil {
				return fmt.Errorf("%s, %d workers: %w", where.name, w, err)
			}
			rows = append(rows, fmt.Sprintf("| read the dump | %s | %d | %d docs in %.2f s | **%.0f docs/s** | %.0f MiB |", where.name, w, n, d.Seconds(), float64(n)/d.Seconds(), rss))
		}
	}
	for _, where := range []struct{ name, dir string }{{"local disk", filepath.Join(dir, "vectors")}, {"bucket (s3proxy)", "s3://" + bucket + "/vectors"}} {
		bytes, d, rss, err := writeVectors(ctx, st, where.dir, vectors)
		if err != nil {
			return fmt.Errorf("sink to %s: %w", where.name, err)
		}
		rows = append(rows, fmt.Sprintf("| parquet sink | %s | – | %d vectors, %.0f MB in %.2f s | **%.0f vectors/s** (%.1f MB/s) | %.0f MiB |",
			where.name, vectors, float64(bytes)/1e6, d.Seconds(), float64(vectors)/d.Seconds(), float64(bytes)/1e6/d.Seconds(), rss))
	}
	section := fmt.Sprintf("Machine: %s. Load average at the end: %s. Dump: %d synthetic pages, %.1f MB bz2, 100 pages a stream. S3: s3proxy 2.6.0 on 127.0.0.1 (filesystem backend, the same disk).\n\n"+
		"| trial | where | streams | work | rate | peak RSS of the trial |\n|---|---|---|---|---|---|\n%s\n",
		benchenv.Machine(), benchenv.LoadAvg(), pages, float64(fi.Size())/1e6, strings.Join(rows, "\n"))
	if out == "" {
		fmt.Print(section)
		return nil
	}
	return benchenv.Append(out, "Object storage: a bucket beside local disk", section)
}

// readDump reads every document of the dump at path with w streams at a time.
func readDump(ctx context.Context, st *objstore.Store, path string, w int) (int, time.Duration, float64, error) {
	stop := watchRSS()
	start := time.Now()
	r, err := wikipedia.OpenIn(ctx, wikipedia.Options{Path: path, Workers: w, Store: st})
	if err != nil {
		return 0, 0, 0, err
	}
	n := 0
	for {
		_, ack, err := r.Read(ctx)
		if err == io.EOF {
			break
		}
		var bad *connectors.BadInputError
		if err != nil && !errors.As(err, &bad) {
			return 0, 0, 0, err
		}
		if ack != nil {
			_ = ack(ctx, nil)
		}
		n++
	}
	d := time.Since(start)
	_ = r.Close(ctx)
	return n, d, stop(), nil
}

// writeVectors writes n vectors of dimension 384 to dir through the parquet sink, committing
// every 10,000, and returns the bytes of the parts.
func writeVectors(ctx context.Context, st *objstore.Store, dir string, n int) (int64, time.Duration, float64, error) {
	stop := watchRSS()
	start := time.Now()
	s, err := vectorfile.NewParquet(vectorfile.ParquetOptions{Dir: dir, Store: st, Dim: 384})
	if err != nil {
		return 0, 0, 0, err
	}
	vec := make([]float32, 384)
	for i := range n {
		for j := range vec {
			vec[j] = float32(math.Sin(float64(i*384 + j)))
		}
		v := schemas.DocVector{DocID: "bench:" + strconv.Itoa(i), Source: "bench", Version: "1", NChunks: 1, NTokens: 100, Space: "gn-meanpool:bench", Vector: vec}
		if err := s.Write(ctx, v); err != nil {
			return 0, 0, 0, err
		}
		if (i+1)%10000 == 0 {
			if err := s.Flush(ctx); err != nil {
				return 0, 0, 0, err
			}
		}
	}
	if err := s.Close(ctx); err != nil {
		return 0, 0, 0, err
	}
	d := time.Since(start)
	objs, err := st.List(ctx, dir)
	if err != nil {
		return 0, 0, 0, err
	}
	var total int64
	for _, o := range objs {
		total += o.Size
	}
	return total, d, stop(), nil
}

// watchRSS samples the process's resident memory every 50 ms until the returned function is
// called, which returns the largest sample in MiB.
func watchRSS() func() float64 {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if kb := rssKB(); kb > peak.Load() {
				peak.Store(kb)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 {
		close(done)
		wg.Wait()
		return float64(peak.Load()) / 1024
	}
}

func rssKB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}

const siteinfo = `<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>benchwiki</dbname>
    <namespaces><namespace key="0" case="first-letter" /></namespaces>
  </siteinfo>
`

// writeDump writes a multistream dump of n pages, 100 a stream, and its bz2 index.
func writeDump(dir string, n int) (dump, index string, err error) {
	var file, idx bytes.Buffer
	if err := bz2(&file, siteinfo); err != nil {
		return "", "", err
	}
	for i := 0; i < n; i += 100 {
		off := file.Len()
		var pages strings.Builder
		for j := i; j < min(i+100, n); j++ {
			fmt.Fprintf(&idx, "%d:%d:Page %d\n", off, 10+j, j)
			var text strings.Builder
			for k := range 12 {
				fmt.Fprintf(&text, "Sentence %d of page %d tells of the river %d and the town of %d, which lies on it. ", k, j, (j*7+k)%997, (j*13+k)%991)
			}
			fmt.Fprintf(&pages, "  <page>\n    <title>Page %d</title>\n    <ns>0</ns>\n    <id>%d</id>\n    <revision>\n      <id>%d</id>\n      <text bytes=\"%d\" xml:space=\"preserve\">%s</text>\n    </revision>\n  </page>\n",
				j, 10+j, 1000+j, text.Len(), text.String())
		}
		if err := bz2(&file, pages.String()); err != nil {
			return "", "", err
		}
	}
	if err := bz2(&file, "</mediawiki>\n"); err != nil {
		return "", "", err
	}
	var ib bytes.Buffer
	if err := bz2(&ib, idx.String()); err != nil {
		return "", "", err
	}
	dump = filepath.Join(dir, "benchwiki-multistream.xml.bz2")
	index = filepath.Join(dir, "benchwiki-multistream-index.txt.bz2")
	if err := os.WriteFile(dump, file.Bytes(), 0o644); err != nil {
		return "", "", err
	}
	return dump, index, os.WriteFile(index, ib.Bytes(), 0o644)
}

func bz2(dst *bytes.Buffer, s string) error {
	w, err := bzip2.NewWriter(dst, &bzip2.WriterConfig{Level: 6})
	if err != nil {
		return err
	}
	if _, err := io.WriteString(w, s); err != nil {
		return err
	}
	return w.Close()
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}
