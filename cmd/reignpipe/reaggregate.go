package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/reaggregate"
)

// cmdReaggregate recomputes every document vector of a pipeline's corpus from its chunk cache
// with the pipeline's aggregation, e.g. a new REIGN checkpoint (pipelines/reaggregate).
func cmdReaggregate(ctx context.Context, args []string) error {
	fs := newFlagSet("reaggregate", args)
	out := fs.String("out", "", "directory for the new Parquet vector parts (required)")
	checkpoint := fs.String("checkpoint", "", "REIGN checkpoint (overrides aggregate.checkpoint and sets aggregate.type: reign)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *out == "" {
		return usageError("reaggregate", "--out and one pipeline file are required")
	}
	cfg, err := pipelines.Load(pos[0])
	if err != nil {
		return err
	}
	if *checkpoint != "" {
		if fi, err := os.Stat(*checkpoint); err != nil || !fi.IsDir() {
			return usageError("reaggregate", fmt.Sprintf("--checkpoint %s is not a folder (a REIGN checkpoint: config.json and model.safetensors, "+
				"as reignpipe train --out DIR writes; ops/checkpoints holds the committed ones)", *checkpoint))
		}
		cfg.Aggregate.Type, cfg.Aggregate.Checkpoint = "reign", *checkpoint
	}
	sum, err := reaggregate.Run(ctx, cfg, *out)
	if err != nil && sum.Documents == 0 {
		return err // nothing was read: a summary of zeros would only hide the error
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	fmt.Println(string(b))
	return err
}
