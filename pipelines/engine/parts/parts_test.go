package parts

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/stages/gn"
)

func config(t *testing.T, extra string) *pipelines.Config {
	t.Helper()
	model, tok := testenv.GN(t, "all-minilm-l6-v2")
	lib := testenv.ORTLibrary(t)
	dir := t.TempDir()
	cfg, err := pipelines.Parse([]byte(`version: 1
name: p
source: {type: jsonl, path: in.jsonl}
runtime: {ort_library: ` + lib + `}
gn: {name: all-minilm-l6-v2, model: ` + model + `, tokenizer: ` + tok + `}
chunking: {k: 128, s: 128}
cache: {dir: ` + filepath.Join(dir, "cache") + `}
sinks: [{type: parquet, dir: ` + filepath.Join(dir, "vectors") + `}]
run: {state_dir: ` + filepath.Join(dir, "state") + `}
` + extra))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Open opens what is asked for and nothing else, in the GN's space; Close releases it all.
func TestOpen(t *testing.T) {
	cfg := config(t, "")
	for _, want := range []Want{{}, {Tokenizer: true}, {Cache: true, Aggregator: true}, {Embed: true, Tokenizer: true, Cache: true, Aggregator: true}} {
		p, err := Open(cfg, want)
		if err != nil {
			t.Fatalf("%+v: %v", want, err)
		}
		if p.GN.Dim != 384 || len(p.GN.Fingerprint) != 64 || p.Params.K != 128 {
			t.Errorf("%+v: GN identity or params missing: %+v", want, p)
		}
		// Only a part that runs a session (here the embedding GN) makes the runtime.
		if (p.Runtime != nil) != want.Embed || (p.Model != nil) != want.Embed {
			t.Errorf("%+v: runtime %v, GN session %v", want, p.Runtime != nil, p.Model != nil)
		}
		if p.Model != nil && p.Model.Identity().Fingerprint != p.GN.Fingerprint {
			t.Errorf("loaded GN fingerprint %s, identity %s", p.Model.Fingerprint(), p.GN.Fingerprint)
		}
		if (p.Tokenizer != nil) != want.Tokenizer || (p.Cache != nil) != want.Cache || (p.Aggregator != nil) != want.Aggregator {
			t.Errorf("%+v: opened tokenizer %v, cache %v, aggregator %v", want, p.Tokenizer != nil, p.Cache != nil, p.Aggregator != nil)
		}
		if want.Aggregator && (p.Companion != nil || !strings.Contains(p.Aggregator.Space(), p.GN.Fingerprint)) {
			t.Errorf("mean-pool aggregator in space %q, companion %v", p.Aggregator.Space(), p.Companion)
		}
		if err := p.Close(); err != nil {
			t.Errorf("%+v: close: %v", want, err)
		}
		if err := p.Close(); err != nil {
			t.Errorf("%+v: second close: %v", want, err)
		}
	}
}

// A part that cannot be opened fails Open with its reason, and what was opened before it is
// closed again: the cache (opened before the aggregator) can be opened by the next caller.
func TestOpenFailureClosesWhatWasOpened(t *testing.T) {
	cfg := config(t, "aggregate: {type: reign, checkpoint: /nonexistent-reign-checkpoint}\n")
	if _, err := Open(cfg, Want{Cache: true, Aggregator: true}); err == nil || !strings.Contains(err.Error(), "REIGN checkpoint") {
		t.Fatalf("want a REIGN checkpoint error, got %v", err)
	}
	cfg.Aggregate = pipelines.AggregateConfig{Type: "meanpool"}
	p, err := Open(cfg, Want{Cache: true})
	if err != nil {
		t.Fatalf("the cache was left open by the failed Open: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	bad := config(t, "")
	bad.Runtime.ORTLibrary = filepath.Join(t.TempDir(), "no-such-libonnxruntime.so")
	if _, err := os.Stat(bad.Runtime.ORTLibrary); err == nil {
		t.Fatal("test setup")
	}
	if _, err := Open(bad, Want{Embed: true}); err == nil {
		t.Error("Open with a missing ONNX Runtime library succeeded")
	}
}

// A mean-pool pipeline over the cache needs no ONNX Runtime: with the library path pointing
// nowhere, Open still opens the cache and the aggregator in the GN's space, as Identify names it.
func TestOpenWithoutRuntime(t *testing.T) {
	cfg := config(t, "")
	cfg.Runtime.ORTLibrary = filepath.Join(t.TempDir(), "no-such-libonnxruntime.so")
	for _, want := range []Want{{Cache: true}, {Cache: true, Aggregator: true}} {
		p, err := Open(cfg, want)
		if err != nil {
			t.Fatalf("%+v: %v", want, err)
		}
		if p.Runtime != nil || p.Model != nil || p.Cache == nil {
			t.Errorf("%+v: runtime %v, GN session %v, cache %v", want, p.Runtime != nil, p.Model != nil, p.Cache != nil)
		}
		model, tok := cfg.GN.ModelPaths()
		id, err := gn.Identify(gn.Config{Name: cfg.GN.Name, Model: model, Tokenizer: tok})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p.GN, id) {
			t.Errorf("%+v: GN %+v, Identify %+v", want, p.GN, id)
		}
		if want.Aggregator && p.Aggregator.Space() != "gn-meanpool:"+id.Fingerprint {
			t.Errorf("aggregator in space %q", p.Aggregator.Space())
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// A REIGN aggregator runs a session, so it does need the library.
	cfg.Aggregate = components.WithCheckpoint(cfg.Aggregate, t.TempDir())
	if _, err := Open(cfg, Want{Aggregator: true}); err == nil || !strings.Contains(err.Error(), "no-such-libonnxruntime.so") {
		t.Errorf("REIGN without the ONNX Runtime library: %v", err)
	}
}
