package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/pipelines/engine/replica"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// steady measures the replication lag under a steady load: a producer publishes windows at
// rate per second for secs seconds, as embed workers would, while a replica follows the topic;
// for the last window of every 50 ms tick, the time from the broker's acknowledgement to the
// window being a hit in the replica's store is the lag a worker on another machine sees.
func steady(brokers string, rate int, secs float64, dim, parts int, dir string) error {
	ctx := context.Background()
	cc := kafkaclient.ClientConfig{Brokers: []string{brokers}}
	topics, err := newTopics(ctx, cc, "bench-steady", parts)
	if err != nil {
		return err
	}
	sp := schemas.Space{Fingerprint: "bench-fingerprint", Dim: dim, K: 512, S: 512}
	c, err := shardcache.Open(shardcache.Options{Dir: filepath.Join(dir, fmt.Sprintf("steady-%d", rate)), Fingerprint: sp.Fingerprint, Dim: dim, K: sp.K, S: sp.S})
	if err != nil {
		return err
	}
	defer c.Close()
	f, err := replica.Start(ctx, replica.Options{Client: cc, Topics: topics, Cache: c, Space: sp, Dir: filepath.Join(dir, fmt.Sprintf("steady-%d", rate))})
	if err != nil {
		return err
	}
	p, err := kafkaclient.NewProducer(cc, kafkaclient.ProducerOptions{Topic: topics.Windows, NoFragment: true, Compression: compression})
	if err != nil {
		f.Stop()
		return err
	}
	type probe struct {
		key   uint64
		acked time.Time
	}
	probes := make(chan probe, 1<<12)
	lags := make(chan []time.Duration, 1)
	go func() { // the prober: owned by steady, ends when probes is closed
		var got []time.Duration
		dst := make([]float32, dim)
		for pr := range probes {
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
				if hit, _ := c.Get(pr.key, dst); hit {
					got = append(got, time.Since(pr.acked))
					break
				}
			}
		}
		lags <- got
	}()
	r := rand.New(rand.NewPCG(3, 4))
	hs := replica.SpaceHeaders(sp)
	tick, perTick := 50*time.Millisecond, max(1, rate/20)
	emb := make([]float32, dim)
	start, sent := time.Now(), 0
	var produceErr error
	for next := start; time.Since(start).Seconds() < secs; next = next.Add(tick) {
		time.Sleep(time.Until(next))
		var last uint64
		for range perTick {
			var s float64
			for j := range emb {
				emb[j] = float32(r.NormFloat64())
				s += float64(emb[j]) * float64(emb[j])
			}
			for j := range emb {
				emb[j] /= float32(math.Sqrt(s))
			}
			last = r.Uint64()
			if produceErr = p.Send(ctx, replica.WindowMessage(shardcache.Row{Key: last, DocID: "bench:steady", NTokens: 510, Embedding: emb}, hs)); produceErr != nil {
				break
			}
		}
		if produceErr == nil {
			produceErr = p.Flush(ctx)
		}
		if produceErr != nil {
			break
		}
		sent += perTick
		probes <- probe{last, time.Now()}
	}
	elapsed := time.Since(start)
	close(probes)
	got := <-lags
	err = produceErr
	if cerr := p.Close(ctx); err == nil {
		err = cerr
	}
	if serr := f.Stop(); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	slices.Sort(got)
	q := func(p float64) float64 {
		if len(got) == 0 {
			return math.NaN()
		}
		return float64(got[min(len(got)-1, int(p*float64(len(got))))].Microseconds()) / 1000
	}
	fmt.Printf("| %d | %.0f | %.0f | %d | %.1f | %.1f | %.1f | %.1f |\n", rate, elapsed.Seconds(), float64(sent)/elapsed.Seconds(), len(got), q(0.5), q(0.95), q(0.99), q(1))
	return nil
}
