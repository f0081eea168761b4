package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/pipelines/engine/launch"
)

func cmdRun(ctx context.Context, args []string) error {
	fs := newFlagSet("run", args)
	fromScratch := fs.Bool("from-scratch", false, "forget the checkpoint and the vector outputs (the chunk cache is kept), then run")
	input := fs.String("input", "", "override source.path")
	logFormat := fs.String("log-format", "text", "text or json")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the run to this file (go tool pprof)")
	memProfile := fs.String("memprofile", "", "write a Go heap profile to this file when the run ends (go tool pprof)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("run", "give exactly one pipeline file")
	}
	if err := setupLogger(*logFormat); err != nil {
		return err
	}
	cfg, err := pipelines.Load(pos[0])
	if err != nil {
		return err
	}
	if *input != "" {
		cfg.Source.Path = *input
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	sum, err := run(ctx, cfg, *fromScratch)
	if *memProfile != "" {
		if perr := writeHeapProfile(*memProfile); err == nil {
			err = perr
		}
	}
	if err == nil && sum != nil && sum.Stopped == "interrupted" {
		return errInterrupted // drained and committed, but not complete: a distinct exit code
	}
	return err
}

// writeHeapProfile records what the Go heap still holds after the run (in-use) and what the
// run allocated (alloc), after a GC so that in-use is live data only.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// run executes one pipeline in this process and prints its summary on stdout.
func run(ctx context.Context, cfg *pipelines.Config, fromScratch bool) (*engine.Summary, error) {
	started := time.Now().UTC()
	sum, err := launch.Run(ctx, cfg, launch.Options{FromScratch: fromScratch})
	if sum == nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// Stopped by a signal before the run started -- a sink still waiting for its database
		// (sinks[].retry_timeout) -- with nothing read or written: said as an interrupted run
		// is, on stdout and in run.summary, so that a script reading either does not take an
		// earlier run's summary for this one's.
		slog.Info("stopped before the run started", "why", err)
		sum = &engine.Summary{Pipeline: cfg.Name, Started: started, WallSeconds: time.Since(started).Seconds(), Stopped: engine.Interrupted,
			Skipped: map[string]int64{}, TextRepairs: map[string]int64{}, Outputs: []string{}}
		launch.WriteSummary(cfg, sum.JSON(), slog.Default())
		err = nil
	}
	return printed(sum, err)
}

// runFrom runs cfg from scratch on documents the caller brings (eval's corpus and queries), and
// prints its summary like run.
func runFrom(ctx context.Context, cfg *pipelines.Config, src connectors.Source) (*engine.Summary, error) {
	return printed(launch.Run(ctx, cfg, launch.Options{FromScratch: true, Source: src}))
}

// printed writes a started run's summary on stdout.
func printed(sum *engine.Summary, err error) (*engine.Summary, error) {
	if sum != nil {
		os.Stdout.Write(sum.JSON())
	}
	return sum, err
}
