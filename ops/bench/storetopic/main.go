// Command storetopic measures how fast a chunk store replica is materialised from Kafka
// (pipelines/engine/replica, what `reignpipe materialize` and every embed worker's follower do)
// against the local store's own write rate (shardcache Add + Flush) in the same run.
//
//	go run ./ops/bench/storetopic -brokers 127.0.0.1:19092 -n 100000
//
// It produces n synthetic windows (random unit vectors, dim 384 as all-minilm and bge-small)
// to a fresh <prefix>.windows topic, then times (1) Add+Flush of the same rows into an empty
// cache, (2) reading the topic alone to its end (the fetch path), (3) a replica catching up
// from the topic into another empty cache. The row is a line of the results table
// (ops/bench/results/storetopic-*.md).
//
//	go run ./ops/bench/storetopic -steady 2000 -seconds 20
//
// measures the replication lag instead: windows produced steadily at that rate while a replica
// follows, and the time from each tick's acknowledgement to its last window being a hit in the
// replica (steady.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkaadmin"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/pipelines/engine/replica"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:19092", "bootstrap broker")
	n := flag.Int("n", 100_000, "windows")
	dim := flag.Int("dim", 384, "embedding dimension")
	parts := flag.Int("partitions", 3, "partitions of the window topic")
	dir := flag.String("dir", "", "scratch directory (default: a temp dir, removed)")
	flag.StringVar(&compression, "compression", "zstd", "compression of the produced window records (transport.kafka.compression)")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the materialise phase to this file (go tool pprof)")
	steadyRate := flag.Int("steady", 0, "instead: windows/s produced steadily while a replica follows; prints the ack-to-hit lag")
	steadySecs := flag.Float64("seconds", 20, "with -steady: how long to produce")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	run := run
	if *steadyRate > 0 {
		run = func(brokers string, _ int, dim, parts int, dir string) error {
			if dir == "" {
				d, err := os.MkdirTemp("", "storetopic-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				dir = d
			}
			return steady(brokers, *steadyRate, *steadySecs, dim, parts, dir)
		}
	}
	if err := run(*brokers, *n, *dim, *parts, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "storetopic:", err)
		os.Exit(1)
	}
}

var cpuProfile, compression string

func run(brokers string, n, dim, parts int, dir string) error {
	ctx := context.Background()
	if dir == "" {
		d, err := os.MkdirTemp("", "storetopic-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	cc := kafkaclient.ClientConfig{Brokers: []string{brokers}}
	topics, err := newTopics(ctx, cc, "bench-store", parts)
	if err != nil {
		return err
	}
	sp := schemas.Space{Fingerprint: "bench-fingerprint", Dim: dim, K: 512, S: 512}
	rows := make([]shardcache.Row, n)
	r := rand.New(rand.NewPCG(1, 2))
	emb := make([]float32, n*dim)
	for i := range rows {
		e := emb[i*dim : (i+1)*dim]
		var s float64
		for j := range e {
			e[j] = float32(r.NormFloat64())
			s += float64(e[j]) * float64(e[j])
		}
		for j := range e {
			e[j] /= float32(math.Sqrt(s))
		}
		rows[i] = shardcache.Row{Key: r.Uint64(), DocID: fmt.Sprintf("bench:%d", i/8), ChunkIndex: int32(i % 8), NTokens: 510, Embedding: e}
	}

	// Produce.
	p, err := kafkaclient.NewProducer(cc, kafkaclient.ProducerOptions{Topic: topics.Windows, NoFragment: true, Compression: compression})
	if err != nil {
		return err
	}
	hs := replica.SpaceHeaders(sp)
	t0 := time.Now()
	var bytes int64
	for _, row := range rows {
		m := replica.WindowMessage(row, hs)
		bytes += int64(len(m.Value))
		if err := p.Send(ctx, m); err != nil {
			return err
		}
	}
	if err := p.Close(ctx); err != nil {
		return err
	}
	produce := time.Since(t0)

	open := func(name string) (*shardcache.Cache, error) {
		return shardcache.Open(shardcache.Options{Dir: filepath.Join(dir, name), Fingerprint: sp.Fingerprint, Dim: dim, K: sp.K, S: sp.S})
	}
	// The store's own write rate.
	base, err := open("direct")
	if err != nil {
		return err
	}
	t0 = time.Now()
	for _, row := range rows {
		if _, err := base.Add(row); err != nil {
			return err
		}
	}
	if err := base.Flush(); err != nil {
		return err
	}
	direct := time.Since(t0)
	if err := base.Close(); err != nil {
		return err
	}

	// Reading the topic alone (a Tail to the end offsets, nothing applied): the fetch path's
	// own rate, which bounds materialize's.
	t0 = time.Now()
	end, err := kafkaclient.EndOffsets(ctx, cc, topics.Windows)
	if err != nil {
		return err
	}
	tail, err := kafkaclient.NewTail(ctx, cc, kafkaclient.TailOptions{Topics: []string{topics.Windows}})
	if err != nil {
		return err
	}
	left := int64(0)
	for _, e := range end {
		left += e
	}
	for ; left > 0; left-- {
		if _, err := tail.Next(ctx); err != nil {
			tail.Close()
			return err
		}
	}
	tail.Close()
	fetch := time.Since(t0)

	// Materialise.
	c, err := open("replica")
	if err != nil {
		return err
	}
	if cpuProfile != "" {
		pf, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
	}
	t0 = time.Now()
	f, err := replica.Start(ctx, replica.Options{Client: cc, Topics: topics, Cache: c, Space: sp, Dir: filepath.Join(dir, "replica")})
	if err != nil {
		return err
	}
	if err := f.CatchUp(ctx, 0); err != nil {
		return err
	}
	if err := f.Stop(); err != nil {
		return err
	}
	mat := time.Since(t0)
	if cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	st := f.Stats()
	if err := c.Close(); err != nil {
		return err
	}
	if st.WindowsApplied != int64(n) {
		return fmt.Errorf("replica applied %d windows, want %d (%+v)", st.WindowsApplied, n, st)
	}
	mb := float64(bytes) / 1e6
	fmt.Printf("| %d | %d | %d | %.0f | %.0f | %.1f | %.0f | %.0f | %.1f | %.2f | %d |\n", n, dim, parts,
		float64(n)/produce.Seconds(), float64(n)/direct.Seconds(), mb/direct.Seconds(), float64(n)/fetch.Seconds(),
		float64(n)/mat.Seconds(), mb/mat.Seconds(), mat.Seconds()/direct.Seconds(), runtime.NumCPU())
	return nil
}

// newTopics creates a fresh pair of compacted store topics named after prefix and the time.
func newTopics(ctx context.Context, cc kafkaclient.ClientConfig, prefix string, parts int) (replica.Topics, error) {
	name := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	topics := replica.Topics{Windows: name + ".windows", Manifests: name + ".manifests"}
	conf := map[string]string{"cleanup.policy": "compact"}
	return topics, kafkaadmin.EnsureTopics(ctx, cc,
		kafkaadmin.TopicSpec{Name: topics.Windows, Partitions: parts, ReplicationFactor: 1, Config: conf},
		kafkaadmin.TopicSpec{Name: topics.Manifests, Partitions: parts, ReplicationFactor: 1, Config: conf})
}
