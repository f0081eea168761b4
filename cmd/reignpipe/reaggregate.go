package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/engine/launch"
	"github.com/reignpipe/reignpipe/pipelines/engine/reaggregate"
)

// cmdReaggregate recomputes every document vector of a pipeline's corpus from its chunk cache
// with the pipeline's aggregation, e.g. a new REIGN checkpoint (pipelines/engine/reaggregate).
func cmdReaggregate(ctx context.Context, args []string) error {
	fs := newFlagSet("reaggregate", args)
	out := fs.String("out", "", "directory for the new Parquet vector parts")
	toSinks := fs.Bool("sinks", false, "write to the pipeline's configured sinks instead of --out (keyed writes: the same id and version replace what is there)")
	checkpoint := fs.String("checkpoint", "", "REIGN checkpoint (overrides aggregate.checkpoint and sets aggregate.type: reign)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (*out == "") == !*toSinks {
		return usageError("reaggregate", "one pipeline file and either --out or --sinks are required")
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
		cfg.Aggregate = components.WithCheckpoint(cfg.Aggregate, *checkpoint)
	}
	sinks := reaggregate.ParquetSinks(*out)
	if *toSinks {
		sinks = launch.ConfiguredSinks(ctx, cfg)
	}
	sum, err := reaggregate.RunInto(ctx, cfg, sinks)
	if err != nil && sum.Documents == 0 {
		return err // nothing was read: a summary of zeros would only hide the error
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	fmt.Println(string(b))
	return err
}
