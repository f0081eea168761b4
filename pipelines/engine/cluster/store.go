package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/promtext"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/pipelines/engine/launch"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/pipelines/engine/replica"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// The cluster's chunk store (pipelines/engine/replica): every embed worker's cache is a replica of
// <topics>.windows + <topics>.manifests; `stage replica` keeps one without a GN, and
// Materialize catches one up and exits.

// DefaultReplicaMaxLag is how many records (windows and manifests, over all partitions) an embed
// worker's replica may still be behind the end offsets taken at its start when it joins the
// embed consumer group: small, so a new or wiped worker starts warm.
const DefaultReplicaMaxLag = 1000

// lingerWindows is how soon a window the GN embedded is on the broker, and so in the other
// workers' replicas, for their embed step's lookup when their batch forms (Publisher.Linger).
const lingerWindows = 250 * time.Millisecond

func storeTopics(k pipelines.KafkaConfig) replica.Topics {
	return replica.Topics{Windows: k.WindowsTopic(), Manifests: k.ManifestsTopic()}
}

func cacheSpace(c *shardcache.Cache) schemas.Space {
	o := c.Options()
	return schemas.Space{Fingerprint: o.Fingerprint, Dim: o.Dim, K: o.K, S: o.S}
}

// storeProducers are the producers of the two store topics: never fragmenting (a compacted
// topic would keep only a key's last fragment), so an oversize value is refused whole.
func (e *stageEnv) storeProducers() (windows, manifests *kafkaclient.Producer, err error) {
	k := e.cfg.Transport.Kafka
	windows, err = kafkaclient.NewProducer(e.client, kafkaclient.ProducerOptions{Topic: k.WindowsTopic(), MaxRecordBytes: k.MaxRecordBytes,
		Compression: k.Compression, NoFragment: true, Logger: e.log})
	if err != nil {
		return nil, nil, err
	}
	maxManifest := k.MaxRecordBytes
	if n, err := ManifestMaxBytes(e.cfg); err == nil && int(n) > maxManifest {
		maxManifest = int(n)
	}
	manifests, err = kafkaclient.NewProducer(e.client, kafkaclient.ProducerOptions{Topic: k.ManifestsTopic(), MaxRecordBytes: maxManifest,
		Compression: k.Compression, NoFragment: true, Logger: e.log})
	if err != nil {
		windows.Close(context.Background())
		return nil, nil, err
	}
	return windows, manifests, nil
}

// storeWorker is an embed worker's side of the store: the follower that keeps its cache a
// replica, and the publisher its runner writes through.
type storeWorker struct {
	e            *stageEnv
	maxLag       int64
	flushRecords int
	follower     *replica.Follower
	pub          *replica.Publisher
	ordered      *replica.OrderedChunkSink
}

// attach is launch.Options.Store: start following, wait for the catch-up, then publish
// through the cache.
func (w *storeWorker) attach(ctx context.Context, c *shardcache.Cache) (engine.Cache, func() error, func() any, error) {
	f, err := replica.Start(ctx, replica.Options{
		Client: w.e.client, Topics: storeTopics(w.e.cfg.Transport.Kafka), Cache: c, Space: cacheSpace(c), Dir: w.e.cfg.Cache.Dir,
		FlushRecords: w.flushRecords, Logger: w.e.log,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("chunk store replica: %w", err)
	}
	start := time.Now()
	if w.maxLag < 0 {
		// No wait: the worker joins at once and its store fills while it embeds.
	} else if err := f.CatchUp(ctx, w.maxLag); err != nil {
		return nil, nil, nil, errors.Join(fmt.Errorf("chunk store replica catching up: %w", err), f.Stop())
	}
	st := f.Stats()
	w.e.log.Info("chunk store replica caught up; joining the embed consumer group", "seconds", time.Since(start).Seconds(),
		"windows_applied", st.WindowsApplied, "manifests_applied", st.ManifestsApplied, "records_behind", st.Lag)
	wp, mp, err := w.e.storeProducers()
	if err != nil {
		return nil, nil, nil, errors.Join(err, f.Stop())
	}
	w.follower, w.pub = f, replica.NewPublisher(c, wp, mp, cacheSpace(c))
	if w.ordered != nil {
		w.ordered.Pub = w.pub
	}
	stopLinger := w.pub.Linger(lingerWindows, w.e.log)
	closeAll := func() error {
		// The runner has committed (or abandoned) everything: nothing queued is unacked.
		stopLinger()
		return errors.Join(wp.Close(context.Background()), mp.Close(context.Background()), f.Stop())
	}
	return w.pub, closeAll, w.summary, nil
}

// storeSummary is the store's part of a summary.
type storeSummary struct {
	replica.Stats
	replica.PublisherStats
}

func (w *storeWorker) summary() any {
	s := storeSummary{}
	if w.follower != nil {
		s.Stats = w.follower.Stats()
	}
	if w.pub != nil {
		s.PublisherStats = w.pub.Stats()
	}
	return s
}

func (w *storeWorker) metrics(m map[string]float64) {
	if w.follower == nil {
		return
	}
	replicaMetrics(w.follower.Stats(), m)
	ps := w.pub.Stats()
	m["reignpipe_store_windows_published_total"] = float64(ps.WindowsPublished)
	m["reignpipe_store_manifests_published_total"] = float64(ps.ManifestsPublished)
	m["reignpipe_store_manifest_tombstones_published_total"] = float64(ps.TombstonesPublished)
}

func replicaMetrics(s replica.Stats, m map[string]float64) {
	m["reignpipe_replica_windows_applied_total"] = float64(s.WindowsApplied)
	m["reignpipe_replica_windows_known_total"] = float64(s.WindowsKnown)
	m["reignpipe_window_conflicts_total"] = float64(s.WindowConflicts)
	m["reignpipe_replica_manifests_applied_total"] = float64(s.ManifestsApplied)
	m["reignpipe_replica_manifests_deleted_total"] = float64(s.ManifestsDeleted)
	m["reignpipe_replica_records_skipped_total"] = float64(s.Foreign + s.Bad)
	m["reignpipe_replica_flushes_total"] = float64(s.Flushes)
}

// MaterializeSummary is what `reignpipe materialize` prints.
type MaterializeSummary struct {
	Pipeline string `json:"pipeline"`
	CacheDir string `json:"cache_dir"`
	replica.Stats
	Seconds       float64 `json:"seconds"`
	WindowsPerSec float64 `json:"windows_per_second"`
	Stopped       string  `json:"stopped"`
	Error         string  `json:"error,omitempty"`
}

// Materialize makes cfg.Cache.Dir a replica of the cluster's chunk store as of now: it applies
// the store topics up to the end offsets taken at its start, flushes, writes the checkpoint and
// returns. reaggregate, train, eval and verify then read the directory as any chunk cache.
func Materialize(ctx context.Context, cfg *pipelines.Config) (*MaterializeSummary, error) {
	return followStore(ctx, cfg, true, 0, 0)
}

// replicaStage is `stage replica`: a store kept in step with the topics until stopped.
func (e *stageEnv) replicaStage(ctx context.Context, o StageOptions) (Summary, error) {
	sum, err := followStore(ctx, e.cfg, false, o.IdleExit, o.ReplicaCheckpointEvery)
	if sum == nil {
		return nil, err
	}
	return sum, err
}

func followStore(ctx context.Context, cfg *pipelines.Config, once bool, idleExit time.Duration, flushRecords int) (*MaterializeSummary, error) {
	log := slog.Default().With("replica", cfg.Cache.Dir)
	if _, err := kafkaClient(cfg.Transport.Kafka); err != nil {
		return nil, fmt.Errorf("transport.kafka: %w", err)
	}
	// The GN is identified for the store's space; no session is made, nothing is embedded.
	pp, err := parts.Open(cfg, parts.Want{Cache: true})
	if err != nil {
		return nil, err
	}
	defer pp.Close()
	start := time.Now()
	f, err := FollowStore(ctx, cfg, pp.Cache, flushRecords, log)
	if err != nil {
		return nil, err
	}
	sum := &MaterializeSummary{Pipeline: cfg.Name, CacheDir: cfg.Cache.Dir, Stopped: engine.Completed}
	var runErr error
	if once {
		runErr = f.CatchUp(ctx, 0)
	} else {
		var stopMetrics func()
		if cfg.Run.MetricsAddr != "" {
			stopMetrics, runErr = promtext.Serve(cfg.Run.MetricsAddr, promtext.Handler(promtext.Labels{Pipeline: cfg.Name, Stage: "replica"}, func() ([]promtext.Metric, map[string]float64) {
				m := map[string]float64{}
				replicaMetrics(f.Stats(), m)
				return nil, m
			}))
		}
		if runErr == nil {
			runErr = follow(ctx, f, idleExit)
			if stopMetrics != nil {
				stopMetrics()
			}
		}
	}
	if err := f.Stop(); runErr == nil {
		runErr = err
	}
	sum.Stats = f.Stats()
	sum.Seconds = time.Since(start).Seconds()
	if sum.Seconds > 0 {
		sum.WindowsPerSec = float64(sum.WindowsApplied+sum.WindowsKnown+sum.WindowConflicts) / sum.Seconds
	}
	switch {
	case runErr != nil && !errors.Is(runErr, context.Canceled):
		sum.Stopped, sum.Error = engine.Failed, runErr.Error()
	case ctx.Err() != nil:
		// materialize was cut short; the replica stage ends this way normally.
		sum.Stopped, runErr = engine.StopOf(ctx, nil, !once), nil
	}
	launch.WriteSummary(cfg, sum.JSON(), log)
	return sum, runErr
}

// follow runs until ctx ends, the follower fails, or (idle > 0) nothing new was applied for
// idle.
func follow(ctx context.Context, f *replica.Follower, idle time.Duration) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, lastChange := f.Stats(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.Done():
			return f.Err()
		case <-t.C:
			s := f.Stats()
			if s != last {
				last, lastChange = s, time.Now()
			} else if idle > 0 && time.Since(lastChange) >= idle {
				return nil
			}
		}
	}
}

// JSON renders the summary.
func (s *MaterializeSummary) JSON() []byte { return jsonIndent(s) }

func jsonIndent(v any) []byte {
	b, _ := json.MarshalIndent(v, "", "  ")
	return append(b, '\n')
}
