package components

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/watchdir"
	"github.com/reignpipe/reignpipe/pipelines/registry"
	"github.com/reignpipe/reignpipe/stages/gn"
)

// An input path that names nothing is reported as source.path's, in the user's words: no
// package name, and where a relative path was looked for.
func TestSourcePathMessages(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "feed")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	reg := Builtin()
	cases := []struct {
		name string
		c    registry.SourceConfig
		want string
	}{
		{"jsonl, nothing there", registry.SourceConfig{Type: "jsonl", Path: "nonexist.jsonl"},
			`source.path: no input file matches "nonexist.jsonl" (relative paths are read from the directory reignpipe runs in, ` + wd + ")"},
		{"jsonl, a glob matching nothing", registry.SourceConfig{Type: "jsonl", Path: filepath.Join(dir, "*.jsonl")},
			`source.path: no input file matches "` + filepath.Join(dir, "*.jsonl") + `"`},
		{"jsonl, an empty folder", registry.SourceConfig{Type: "jsonl", Path: empty}, `source.path: the folder "` + empty + `" holds no input files`},
		{"uspto, nothing there", registry.SourceConfig{Type: "uspto", Path: filepath.Join(dir, "ipg*.zip")}, "source.path: no input file matches"},
		{"watched folder missing", registry.SourceConfig{Type: "jsonl", Path: filepath.Join(dir, "inbox"), Settings: &watchdir.Config{Watch: true}, StateFile: filepath.Join(dir, "s.json")},
			"source.path: \"" + filepath.Join(dir, "inbox") + "\" is not a folder (source.watch: true reads the files that arrive in a folder or an s3:// prefix)"},
		{"wikipedia dump missing", registry.SourceConfig{Type: "wikipedia", Path: filepath.Join(dir, "enwiki.xml.bz2")},
			`source.path: "` + filepath.Join(dir, "enwiki.xml.bz2") + `" does not exist`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			typ, _ := reg.Source(c.c.Type)
			_, err := typ.Open(context.Background(), c.c)
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("%v\nwant %q", err, c.want)
			}
			for _, pkg := range []string{"multifile:", "watchdir:", "wikipedia:", "jsonl:"} {
				if strings.Contains(err.Error(), pkg) {
					t.Fatalf("%v names a package", err)
				}
			}
		})
	}
}

// A REIGN checkpoint folder that is not there is named by its key, with what one holds and
// where one comes from.
func TestCheckpointMissing(t *testing.T) {
	a, _ := Builtin().Aggregator("reign")
	_, err := a.Build(registry.AggregatorEnv{
		Config: WithCheckpoint(registry.AggregateConfig{Type: "meanpool"}, "ckpt/best"),
		GN:     gn.Identity{Dim: 8, Fingerprint: "gn@x"},
	})
	if err == nil || !strings.HasPrefix(err.Error(), "aggregate.checkpoint: ckpt/best is not a folder (relative paths are read from") ||
		!strings.Contains(err.Error(), "reignpipe train --out DIR writes one") {
		t.Fatalf("%v", err)
	}
}
