package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/verify"
)

func cmdVerify(_ context.Context, args []string) error {
	fs := newFlagSet("verify", args)
	repair := fs.Bool("repair", false, "quarantine damaged shards, drop their and stale index entries, remove crash-left temp files")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("verify", "give exactly one pipeline file")
	}
	cfg, err := pipelines.Load(pos[0])
	if err != nil {
		return err
	}
	rep, err := verify.Run(cfg, *repair)
	if err != nil {
		return err
	}
	out, _ := json.MarshalIndent(rep, "", "  ")
	fmt.Println(string(out))
	if !rep.OK() {
		return fmt.Errorf("verify: %s has problems (see the report; --repair fixes what it can)", pos[0])
	}
	if rep.ReembedWindows > 0 {
		fmt.Fprintf(os.Stderr, "reignpipe: the next run embeds %d windows again\n", rep.ReembedWindows)
	}
	return nil
}
