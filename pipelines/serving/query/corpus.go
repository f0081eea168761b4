package query

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/cluster"
	"github.com/reignpipe/reignpipe/pipelines/engine/parts"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// openCorpus opens the corpus's chunk store for reading and says, in note, which one it is.
//
//   - One process (transport.type: embedded): cache.dir, through a shardcache.Reader: what the
//     pipeline writing it has committed, and what it commits later, without its lock.
//   - Distributed (transport.type: kafka): no worker fills cache.dir on this machine unless it
//     is a replica of the cluster's store, so the query side makes it one: it opens cache.dir
//     as a replica and follows the windows and manifests topics from its checkpoint (bounded as
//     any worker's replica: the store's size on disk, the follower's flush interval in memory),
//     waiting up to wait for it to catch up. When another process keeps cache.dir already (a
//     worker, `stage replica`, materialize, another serve), it reads that one beside it.
func openCorpus(ctx context.Context, cfg *pipelines.Config, pp *parts.Parts, wait time.Duration, log *slog.Logger) (corpus, string, func() error, error) {
	ro := shardcache.ReaderOptions{Dir: cfg.Cache.Dir, Fingerprint: pp.GN.Fingerprint, Dim: pp.GN.Dim, K: pp.Params.K, S: pp.Params.S}
	reader := func(note string) (corpus, string, func() error, error) {
		r, err := shardcache.OpenReader(ro)
		if err != nil {
			return nil, "", nil, err
		}
		return r, note, r.Close, nil
	}
	if cfg.Transport.Type != "kafka" {
		return reader(fmt.Sprintf("%s, read beside any pipeline writing it (what it has committed)", cfg.Cache.Dir))
	}
	c, err := shardcache.Open(shardcache.Options{Dir: ro.Dir, Fingerprint: ro.Fingerprint, Dim: ro.Dim, K: ro.K, S: ro.S, RowsPerShard: cfg.Cache.RowsPerShard})
	var inUse *shardcache.InUseError
	if errors.As(err, &inUse) {
		who := "another process"
		if inUse.PID > 0 {
			who = fmt.Sprintf("pid %d", inUse.PID)
		}
		return reader(fmt.Sprintf("%s, the replica of the cluster's chunk store that %s keeps, read beside it", cfg.Cache.Dir, who))
	}
	if err != nil {
		return nil, "", nil, err
	}
	f, err := cluster.FollowStore(ctx, cfg, c, 0, log.With("replica", cfg.Cache.Dir))
	if err != nil {
		return nil, "", nil, errors.Join(fmt.Errorf("chunk store replica: %w", err), c.Close())
	}
	stop := func() error { return errors.Join(f.Stop(), c.Close()) }
	if wait == 0 {
		wait = DefaultReplicaWait
	}
	if wait > 0 {
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, wait)
		// To the end offsets taken now, all of them: a worker may join a few records behind
		// (cluster.DefaultReplicaMaxLag) and lose nothing by it, a query would embed them.
		err := f.CatchUp(wctx, 0)
		cancel()
		switch st := f.Stats(); {
		case err == nil:
			log.Info("chunk store replica caught up", "dir", cfg.Cache.Dir, "seconds", time.Since(start).Seconds(), "windows_applied", st.WindowsApplied)
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			log.Warn("chunk store replica still catching up; corpus windows it has not applied yet go to the GN",
				"dir", cfg.Cache.Dir, "waited", wait.String(), "records_behind", st.Lag, "windows_applied", st.WindowsApplied)
		default:
			return nil, "", nil, errors.Join(fmt.Errorf("chunk store replica catching up: %w", err), stop())
		}
	}
	k := cfg.Transport.Kafka
	return c, fmt.Sprintf("%s, a replica of the cluster's chunk store (%s, %s) this process keeps", cfg.Cache.Dir, k.WindowsTopic(), k.ManifestsTopic()), stop, nil
}
