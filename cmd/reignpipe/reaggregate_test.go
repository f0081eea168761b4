package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A --checkpoint folder that is not there is a usage error said at once, before any work and
// without a summary of zeros.
func TestReaggregateCheckpointMissing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "p.yaml")
	y := "version: 1\nname: t\nsource: {type: jsonl, path: in.jsonl}\nsinks: [{type: parquet, dir: out}]\n"
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	err := cmdReaggregate(context.Background(), []string{"--out", filepath.Join(dir, "o"), "--checkpoint", "ckpt/best", p})
	var ue *usageErr
	if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "reaggregate: --checkpoint ckpt/best is not a folder") {
		t.Fatalf("%v", err)
	}
}
