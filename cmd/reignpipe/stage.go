package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/cluster"
)

type stageFlags struct {
	idleExit    time.Duration
	cacheDir    string
	metricsAddr string
	fromScratch bool
	maxLag      int64
	ckptEvery   int
}

func cmdStage(ctx context.Context, args []string) error {
	fs := newFlagSet("stage", args)
	var f stageFlags
	fs.DurationVar(&f.idleExit, "idle-exit", 0, "exit after no input arrived for this long (0: run until SIGTERM)")
	fs.StringVar(&f.cacheDir, "cache-dir", "", "override cache.dir (each embed worker keeps its own chunk cache)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "override run.metrics_addr (one port per process)")
	fs.BoolVar(&f.fromScratch, "from-scratch", false, "ingest: forget the source checkpoint")
	fs.Int64Var(&f.maxLag, "replica-max-lag", cluster.DefaultReplicaMaxLag, "embed, process: store records the chunk cache replica may be behind when the worker joins its consumer group")
	fs.IntVar(&f.ckptEvery, "replica-checkpoint-every", 0, "embed, process, replica: store records applied between two checkpoints of the chunk cache replica (default 100000, and every 2s); lower makes a killed restore resume closer to where it stopped")
	logFormat := fs.String("log-format", "text", "text or json")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || cluster.StageNames[pos[0]] == "" {
		return usageError("stage", "give a stage name and one pipeline file")
	}
	if err := setupLogger(*logFormat); err != nil {
		return err
	}
	cfg, err := pipelines.Load(pos[1])
	if err != nil {
		return err
	}
	if cfg.Transport.Type != "kafka" {
		return fmt.Errorf("%s: stages run with transport.type: kafka (this pipeline is %s; use reignpipe run)", pos[1], cfg.Transport.Type)
	}
	if f.cacheDir != "" {
		cfg.Cache.Dir = f.cacheDir
	}
	if f.metricsAddr != "" {
		cfg.Run.MetricsAddr = f.metricsAddr
	}
	sum, err := cluster.Stage(ctx, cfg, pos[0], cluster.StageOptions{IdleExit: f.idleExit, FromScratch: f.fromScratch, ReplicaMaxLag: f.maxLag, ReplicaCheckpointEvery: f.ckptEvery})
	if sum != nil {
		os.Stdout.Write(sum.JSON())
	}
	return err
}
