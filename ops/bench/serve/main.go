// Command serve measures `reignpipe serve` as a client sees it: /v1/search and /v1/embeddings
// latency (p50, p99) at 1, 4 and 16 concurrent clients over a pgvector table of -n vectors, for a
// stored id, a corpus document (its windows cached) and an uncached document; and the server
// process's RSS and CPU while idle, while four clients send bodies at 1 byte/s, and while 200
// clients ask at once.
//
//	go run ./ops/bench/serve [-bin bin/reignpipe] [-dsn URL] [-n 100000] [-requests 100] [-out FILE]
//
// The corpus is -docs real-looking documents run through `reignpipe run` into a pgvector table
// of its own (prefix servebench_PID); the rest of the -n rows are synthetic unit vectors in the
// same space, written through the pgvector sink, so the search ranks the full table. The server
// is the binary, a process of its own, so its RSS and CPU are its own. The table is dropped at
// the end unless -keep.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reignpipe/reignpipe/connectors/pgvector"
	"github.com/reignpipe/reignpipe/ops/bench/benchenv"
	"github.com/reignpipe/reignpipe/schemas"
)

const pkg = "ops/bench/serve"

func main() { benchenv.Main("serve", run) }

type options struct {
	sec            benchenv.Section
	dsn, gn        string
	n, docs, reqs  int
	keep           bool
	work, prefix   string
	base, addr     string
	space          string
	dim            int
	corpus         []string
	storedIDs      []string
	client         *http.Client
	serverPID      int
	uncachedSerial int
	mu             sync.Mutex
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := benchenv.Flags(pkg, "Latency of /v1/search and /v1/embeddings over pgvector, and the server's RSS and CPU under slow and many clients.")
	o.sec.Flags(fs)
	fs.StringVar(&o.dsn, "dsn", os.Getenv("REIGNPIPE_PG_DSN"), "PostgreSQL with pgvector (default $REIGNPIPE_PG_DSN; ops/postgres start prints one)")
	fs.StringVar(&o.gn, "gn", "bge-small-en-v15", "the GN")
	fs.IntVar(&o.n, "n", 100_000, "vectors in the table")
	fs.IntVar(&o.docs, "docs", 30, "real documents run through the pipeline (the rest of -n are synthetic)")
	fs.IntVar(&o.reqs, "requests", 100, "requests per measured cell")
	fs.BoolVar(&o.keep, "keep", false, "keep the work folder and the table")
	if err := benchenv.Parse(fs, args); err != nil {
		return err
	}
	if o.dsn == "" {
		return fmt.Errorf("no -dsn and no REIGNPIPE_PG_DSN (ops/postgres start prints one)")
	}
	if err := o.sec.Resolve(); err != nil {
		return err
	}
	root, err := benchenv.Root()
	if err != nil {
		return err
	}
	if o.work, err = os.MkdirTemp("", "servebench-"); err != nil {
		return err
	}
	o.prefix = fmt.Sprintf("servebench_%d", os.Getpid())
	defer benchenv.Leftovers("serve", o.keep, o.work, "tables "+o.prefix+"_*", func(ctx context.Context) error { return dropTables(ctx, o.dsn, o.prefix) })
	header := o.sec.Header(root, "PostgreSQL at -dsn")
	pipeline, err := o.setup(ctx)
	if err != nil {
		return err
	}
	srv, err := o.startServer(ctx, pipeline)
	if err != nil {
		return err
	}
	defer func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() }()
	if err := o.fill(ctx); err != nil {
		return err
	}
	var rep strings.Builder
	rep.WriteString(o.sec.Heading(header, benchenv.Command(pkg, args)))
	fmt.Fprintf(&rep, "Table: %d vectors (%d documents through `reignpipe run`, the rest synthetic unit vectors in the same space, dimension %d), pgvector index hnsw (built after the load); serve --max-concurrent 16. %d requests per cell; latency is the client's, over loopback HTTP.\n\n", o.n, o.docs, o.dim, o.reqs)
	if err := o.latencies(ctx, &rep); err != nil {
		return err
	}
	if err := o.resources(ctx, &rep); err != nil {
		return err
	}
	return o.sec.Write(stdout, "# serve: latency and resources", rep.String())
}

// texts are the corpus: paragraphs of a few hundred tokens on distinct topics, some several
// windows long.
func texts(n int) []string {
	topics := []string{"bread ovens with steam injectors", "rocket engine nozzles", "violin bows of horsehair", "mitochondrial ATP synthesis",
		"tidal turbines in estuaries", "wave energy converters", "sourdough starter cultures", "printed circuit board etching",
		"gear trains in clocks", "glacier melt and sea level"}
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		t := topics[i%len(topics)]
		for p := 0; p < 2+i%7; p++ {
			fmt.Fprintf(&b, "Document %d, paragraph %d, is about %s: the device described comprises a housing, a controller and a sensor, arranged so that %s work reliably at scale number %d.\n", i, p, t, t, i*31+p)
		}
		out[i] = b.String()
	}
	return out
}

func (o *options) setup(ctx context.Context) (string, error) {
	o.corpus = texts(o.docs)
	var b bytes.Buffer
	for i, t := range o.corpus {
		line, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("d%d", i), "text": t})
		b.Write(append(line, '\n'))
		o.storedIDs = append(o.storedIDs, fmt.Sprintf("corpus:d%d", i))
	}
	corpus := filepath.Join(o.work, "corpus.jsonl")
	if err := os.WriteFile(corpus, b.Bytes(), 0o644); err != nil {
		return "", err
	}
	path, _, err := benchenv.Pipeline(o.work, fmt.Sprintf(`version: 1
name: bench-serve
source: {type: jsonl, path: %q, name: corpus}
gn: {name: %s, provider: cpu}
cache: {dir: %q}
sinks: [{type: pgvector, dsn: %q, table: %s, index: none}]
run: {state_dir: %q, progress: off}
`, corpus, o.gn, filepath.Join(o.work, "cache"), o.dsn, o.prefix, filepath.Join(o.work, "state")))
	if err != nil {
		return "", err
	}
	if out, err := exec.CommandContext(ctx, o.sec.Bin, "run", path).CombinedOutput(); err != nil {
		return "", fmt.Errorf("reignpipe run: %v\n%s", err, out)
	}
	return path, nil
}

func (o *options) startServer(ctx context.Context, pipeline string) (*exec.Cmd, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o.addr = l.Addr().String()
	l.Close()
	o.base = "http://" + o.addr
	cmd := exec.Command(o.sec.Bin, "serve", "--addr", o.addr, "--max-concurrent", "16", "--body-timeout", "5s", "--log-format", "json", pipeline)
	logf, err := os.Create(filepath.Join(o.work, "serve.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	o.serverPID = cmd.Process.Pid
	o.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 2 * time.Minute}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := o.client.Get(o.base + "/info")
		if err == nil {
			var info struct {
				Space     string `json:"space"`
				Dimension int    `json:"dimension"`
			}
			err = json.NewDecoder(resp.Body).Decode(&info)
			resp.Body.Close()
			if err == nil {
				o.space, o.dim = info.Space, info.Dimension
				return cmd, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			cmd.Process.Kill()
			return nil, fmt.Errorf("serve did not answer /info: %v (log: %s)", err, filepath.Join(o.work, "serve.log"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fill writes synthetic unit vectors in the pipeline's space until the table holds -n, and
// builds the HNSW index over all of them at the end (the run wrote with index: none), as a
// backfill with index: deferred does.
func (o *options) fill(ctx context.Context) error {
	s, err := pgvector.Open(ctx, pgvector.Options{Config: pgvector.Config{DSN: o.dsn, Table: o.prefix, Index: pgvector.IndexDeferred, BatchRows: 2000}, Dim: o.dim})
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(29, 1))
	start := time.Now()
	for i := o.docs; i < o.n; i++ {
		v := make([]float32, o.dim)
		var norm float64
		for j := range v {
			x := rng.NormFloat64()
			v[j], norm = float32(x), norm+x*x
		}
		for j := range v {
			v[j] /= float32(math.Sqrt(norm))
		}
		id := fmt.Sprintf("syn:%d", i)
		if err := s.Write(ctx, schemas.DocVector{DocID: id, Source: "syn", Version: "1", Space: o.space, Vector: v, NChunks: 1, NTokens: 1}); err != nil {
			return err
		}
		if (i+1)%10000 == 0 {
			if err := s.Flush(ctx); err != nil {
				return err
			}
		}
	}
	if err := s.Flush(ctx); err != nil {
		return err
	}
	err = s.Close(ctx)
	fmt.Fprintf(os.Stderr, "serve bench: %d synthetic vectors written and the HNSW index built in %s\n", o.n-o.docs, time.Since(start).Round(time.Second))
	return err
}

func dropTables(ctx context.Context, dsn, prefix string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE tablename LIKE $1", prefix+"_%")
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE"); err != nil {
			return err
		}
	}
	_, err = conn.Exec(ctx, "DROP FUNCTION IF EXISTS "+pgx.Identifier{prefix + "_version_cmp"}.Sanitize()+"(text, text)")
	return err
}

// request makes the i-th request of a cell: its route, content type and body.
func (o *options) request(route, kind string, i int) (string, []byte) {
	text := o.corpus[i%len(o.corpus)]
	if kind == "uncached" {
		o.mu.Lock()
		o.uncachedSerial++
		n := o.uncachedSerial
		o.mu.Unlock()
		text = fmt.Sprintf("An uncached query document number %d about %s.\n%s", n, strconv.Itoa(n*7919), strings.Repeat(fmt.Sprintf("Fresh words %d. ", n), 40))
	}
	var body any
	switch {
	case route == "/v1/embeddings":
		body = map[string]any{"model": o.space, "input": text}
	case kind == "stored id":
		body = map[string]any{"stored_id": o.storedIDs[i%len(o.storedIDs)], "k": 10}
	default:
		body = map[string]any{"text": text, "k": 10}
	}
	b, _ := json.Marshal(body)
	return route, b
}

func (o *options) post(route string, body []byte) (int, error) {
	resp, err := o.client.Post(o.base+route, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (o *options) latencies(ctx context.Context, rep *strings.Builder) error {
	rep.WriteString("| route | query | clients | p50 ms | p99 ms | requests/s |\n|---|---|---:|---:|---:|---:|\n")
	for _, cell := range []struct{ route, kind string }{
		{"/v1/search", "stored id"}, {"/v1/search", "corpus document"}, {"/v1/search", "uncached document"},
		{"/v1/embeddings", "corpus document"}, {"/v1/embeddings", "uncached document"},
	} {
		for _, conc := range []int{1, 4, 16} {
			lat, wall, err := o.cell(ctx, cell.route, cell.kind, conc)
			if err != nil {
				return err
			}
			fmt.Fprintf(rep, "| %s | %s | %d | %.1f | %.1f | %.1f |\n", cell.route, cell.kind, conc, ms(pct(lat, 0.5)), ms(pct(lat, 0.99)), float64(len(lat))/wall.Seconds())
		}
	}
	rep.WriteString("\n")
	return nil
}

// cell runs o.reqs requests with conc clients and returns their latencies.
func (o *options) cell(ctx context.Context, route, kind string, conc int) ([]time.Duration, time.Duration, error) {
	if kind == "uncached document" {
		kind = "uncached"
	}
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r, body := o.request(route, kind, i)
				t := time.Now()
				code, err := o.post(r, body)
				d := time.Since(t)
				mu.Lock()
				if err == nil && code != 200 {
					err = fmt.Errorf("%s %s: status %d", route, kind, code)
				}
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < o.reqs && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, time.Since(start), firstErr
}

// proc is the server process's CPU seconds and RSS (MiB) now.
func (o *options) proc() (cpu float64, rss float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", o.serverPID))
	if err == nil {
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		cpu = (ut + st) / 100 // USER_HZ
	}
	if s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", o.serverPID)); err == nil {
		for _, l := range strings.Split(string(s), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				rss = kb / 1024
			}
		}
	}
	return cpu, rss
}

// watch samples the server's RSS every 100ms while f runs and returns its CPU use (cores) and
// the largest RSS.
func (o *options) watch(f func()) (cores, maxRSS float64) {
	cpu0, rss := o.proc()
	maxRSS = rss
	done := make(chan struct{})
	go func() { f(); close(done) }()
	start := time.Now()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			cpu1, rss := o.proc()
			return (cpu1 - cpu0) / time.Since(start).Seconds(), max(maxRSS, rss)
		case <-t.C:
			_, rss := o.proc()
			maxRSS = max(maxRSS, rss)
		}
	}
}

func (o *options) resources(ctx context.Context, rep *strings.Builder) error {
	rep.WriteString("| server state (5 s) | CPU (cores) | max RSS MiB | what the clients got |\n|---|---:|---:|---|\n")
	cores, rss := o.watch(func() { time.Sleep(5 * time.Second) })
	fmt.Fprintf(rep, "| idle | %.2f | %.0f | |\n", cores, rss)

	var slowCodes []int
	var mu sync.Mutex
	var normal, normalOK int
	normalCodes := map[int]int{}
	cores, rss = o.watch(func() {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code := o.slow()
				mu.Lock()
				slowCodes = append(slowCodes, code)
				mu.Unlock()
			}()
		}
		stop := time.Now().Add(5 * time.Second)
		for time.Now().Before(stop) {
			_, body := o.request("/v1/search", "stored id", normal)
			code, err := o.post("/v1/search", body)
			if err != nil {
				code = 0
			}
			normal++
			normalCodes[code]++
			if code == 200 {
				normalOK++
			}
		}
		wg.Wait()
	})
	fmt.Fprintf(rep, "| 4 clients sending 1 byte/s (--body-timeout 5s) beside one normal client | %.2f | %.0f | slow: %v; normal: %d of %d answered 200 (status counts %v) |\n", cores, rss, slowCodes, normalOK, normal, normalCodes)

	codes := map[int]int{}
	cores, rss = o.watch(func() {
		var wg sync.WaitGroup
		stop := time.Now().Add(5 * time.Second)
		for c := range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := c; time.Now().Before(stop) && ctx.Err() == nil; i += 200 {
					_, body := o.request("/v1/search", "corpus document", i)
					code, err := o.post("/v1/search", body)
					if err != nil {
						code = 0
					}
					mu.Lock()
					codes[code]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	})
	fmt.Fprintf(rep, "| 200 clients searching corpus documents at once | %.2f | %.0f | status counts %v (0: no answer) |\n\n", cores, rss, codes)
	return o.serverErrors(rep)
}

// serverErrors reports what the server logged for the requests it answered 5xx.
func (o *options) serverErrors(rep *strings.Builder) error {
	b, err := os.ReadFile(filepath.Join(o.work, "serve.log"))
	if err != nil {
		return err
	}
	errs := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		var e struct{ Msg, Err string }
		if json.Unmarshal([]byte(l), &e) == nil && e.Msg == "request failed" {
			errs[e.Err]++
		}
	}
	if len(errs) > 0 {
		rep.WriteString("Server errors logged (request failed), by message:\n\n")
		for m, n := range errs {
			fmt.Fprintf(rep, "- %d × `%s`\n", n, m)
		}
		rep.WriteString("\n")
	}
	return nil
}

// slow sends a search whose body arrives at 1 byte/s and returns the status it got.
func (o *options) slow() int {
	c, err := net.Dial("tcp", o.addr)
	if err != nil {
		return -1
	}
	defer c.Close()
	body := `{"text": "` + strings.Repeat("slow ", 40) + `"}`
	fmt.Fprintf(c, "POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	got := make(chan int, 1)
	go func() {
		var proto string
		var code int
		fmt.Fscan(c, &proto, &code)
		got <- code
	}()
	for i := 0; i < len(body); i++ {
		select {
		case code := <-got:
			return code
		case <-time.After(time.Second):
		}
		if _, err := c.Write([]byte{body[i]}); err != nil {
			break
		}
	}
	return <-got
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(math.Ceil(p*float64(len(ds))))-1)]
}
