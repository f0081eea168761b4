// Package searchtest gives the query-side tests a real corpus: a few documents on distinct
// topics, run through the real pipeline (our tokenizer, the fetched GN on ONNX Runtime, the
// chunk cache, parquet vectors), so that search and serve are checked against what a run wrote.
package searchtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/launch"
)

// Texts are the corpus documents by id (before the source's "t:" prefix). "long" cuts into
// several windows; "twin" has the same text as "bread" under another id.
func Texts() map[string]string {
	bread := "Bread is baked from a dough of flour and water, leavened with yeast, kneaded, proofed and baked in a hot oven until the crust browns."
	return map[string]string{
		"bread":  bread,
		"twin":   bread,
		"rocket": "A rocket engine burns fuel with an oxidiser in a combustion chamber and expels the hot exhaust through a nozzle to produce thrust.",
		"violin": "The violin is a bowed string instrument with four strings tuned in fifths; the player draws a bow of horsehair across the strings.",
		"cells":  "Mitochondria produce most of the chemical energy a cell needs, in the form of ATP, by oxidative phosphorylation in their inner membrane.",
		"long": strings.Repeat("Sourdough starters keep wild yeast and lactic acid bacteria alive in flour and water; "+
			"bakers feed them daily and use them to leaven bread without commercial yeast. ", 50),
	}
}

// Corpus writes the corpus and a pipeline over it into dir (the pipeline file as
// dir/pipeline.yaml), runs the pipeline once and returns its config (GN paths resolved, ONNX
// Runtime located for the test process). sinks is the YAML
// of the sinks list; "" writes parquet vectors to dir/vectors.
func Corpus(t testing.TB, dir, sinks string) *pipelines.Config {
	t.Helper()
	model, tok := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	input := filepath.Join(dir, "corpus.jsonl")
	var b strings.Builder
	for _, id := range []string{"bread", "twin", "rocket", "violin", "cells", "long"} {
		line, _ := json.Marshal(map[string]string{"id": id, "title": "doc " + id, "text": Texts()[id]})
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(input, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if sinks == "" {
		sinks = fmt.Sprintf("[{type: parquet, dir: %q}]", filepath.Join(dir, "vectors"))
	}
	yaml := fmt.Sprintf(`version: 1
name: searchtest
source: {type: jsonl, path: %q, name: t}
gn: {name: bge-small-en-v15, model: %q, tokenizer: %q}
batching: {max_wait: 5ms}
cache: {dir: %q}
sinks: %s
run: {state_dir: %q, progress: off}
`, input, model, tok, filepath.Join(dir, "cache"), sinks, filepath.Join(dir, "state"))
	if err := os.WriteFile(filepath.Join(dir, "pipeline.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := pipelines.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := launch.Run(context.Background(), cfg, launch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.DocsWritten != 6 {
		t.Fatalf("corpus run wrote %d documents, want 6", sum.DocsWritten)
	}
	return cfg
}
