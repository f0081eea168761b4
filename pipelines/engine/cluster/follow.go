package cluster

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/replica"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// FollowStore starts keeping c, opened on cfg.Cache.Dir, a replica of the cluster's chunk store
// (the windows and manifests topics), from the checkpoint in that directory; it follows until
// the Follower is stopped. materialize, `stage replica` and the query side in distributed mode
// (serve, search: a corpus document's windows are then cache hits there too) keep theirs so.
func FollowStore(ctx context.Context, cfg *pipelines.Config, c *shardcache.Cache, flushRecords int, log *slog.Logger) (*replica.Follower, error) {
	client, err := kafkaClient(cfg.Transport.Kafka)
	if err != nil {
		return nil, fmt.Errorf("transport.kafka: %w", err)
	}
	return replica.Start(ctx, replica.Options{
		Client: client, Topics: storeTopics(cfg.Transport.Kafka), Cache: c, Space: cacheSpace(c), Dir: cfg.Cache.Dir,
		FlushRecords: flushRecords, Logger: log,
	})
}
