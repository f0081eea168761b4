package main

import (
	"context"
	"fmt"
	"os"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/cluster"
)

// cmdMaterialize makes a chunk cache directory a copy of the cluster's chunk store as of now
// (cluster.Materialize), for reaggregate, train, eval and verify.
func cmdMaterialize(ctx context.Context, args []string) error {
	fs := newFlagSet("materialize", args)
	cacheDir := fs.String("cache-dir", "", "override cache.dir: the directory to materialise the store into")
	logFormat := fs.String("log-format", "text", "text or json")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("materialize", "give one pipeline file")
	}
	if err := setupLogger(*logFormat); err != nil {
		return err
	}
	cfg, err := pipelines.Load(pos[0])
	if err != nil {
		return err
	}
	if cfg.Transport.Type != "kafka" {
		return fmt.Errorf("%s: the chunk store is on Kafka: materialize needs transport.type: kafka (this pipeline is %s)", pos[0], cfg.Transport.Type)
	}
	if *cacheDir != "" {
		cfg.Cache.Dir = *cacheDir
	}
	sum, err := cluster.Materialize(ctx, cfg)
	if sum != nil {
		os.Stdout.Write(sum.JSON())
	}
	if err == nil && sum != nil && sum.Stopped == "interrupted" {
		return errInterrupted // the cache is not caught up: not the same as done
	}
	return err
}
