package main

import (
	"fmt"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/reign"
)

// buildAggregator makes the configured document aggregation. REIGN checkpoints are checked
// against the GN and window setting in use before anything runs; close releases the REIGN
// session (a no-op for mean-pool).
//
// companion is the GN mean-pool aggregator whose vector is published beside each REIGN vector
// (nil for mean-pool pipelines, whose vector already is that one).
func buildAggregator(rt *gn.Runtime, cfg *pipelines.Config, model *gn.Model, p chunk.Params) (agg, companion aggregate.Aggregator, close func(), err error) {
	meanPool, err := aggregate.NewMeanPool(model.Dim(), model.Fingerprint())
	if err != nil {
		return nil, nil, nil, err
	}
	if cfg.Aggregate.Type == "meanpool" {
		return meanPool, nil, func() {}, nil
	}
	dir := cfg.Aggregate.Checkpoint
	ck, err := reign.Load(dir)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("REIGN checkpoint: %w", err)
	}
	space := reign.Space{GNName: cfg.GN.Name, GNFingerprint: model.Fingerprint(), GNDim: model.Dim(), K: p.K, S: p.S}
	if err := reign.CheckSpace(dir, ck, space, cfg.Aggregate.TrainedOn); err != nil {
		return nil, nil, nil, err
	}
	st, err := reign.NewStage(rt, ck, reign.StageOptions{
		Provider: cfg.GN.Provider, IntraOpThreads: cfg.GN.IntraOpThreads, InterOpThreads: cfg.GN.InterOpThreads,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	closeStage := func() { st.Close() }
	if cfg.Aggregate.SingleChunk == "gn" {
		return aggregate.SingleChunkRouter{Multi: st, Single: meanPool}, meanPool, closeStage, nil
	}
	return st, meanPool, closeStage, nil
}
