package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines/quality/benchdata"
)

func TestBenchdataFlags(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "c.jsonl")
	var b strings.Builder
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		line, _ := json.Marshal(map[string]string{"id": id, "text": strings.Repeat("Words about "+id+". ", 20) + "\n\n" + strings.Repeat("More on "+id+". ", 20)})
		b.Write(append(line, '\n'))
	}
	os.WriteFile(input, []byte(b.String()), 0o644)
	out := filepath.Join(dir, "out")
	tests := []struct {
		name string
		args []string
		want string // "" = success
	}{
		{"no kind", []string{"--source", "jsonl", "--input", input, "--out", out}, "--kind is required"},
		{"no source", []string{"--kind", "halves", "--input", input, "--out", out}, "--source is required"},
		{"no input", []string{"--kind", "halves", "--source", "jsonl", "--out", out}, "--input is required"},
		{"no out", []string{"--kind", "halves", "--source", "jsonl", "--input", input}, "--out is required"},
		{"bad kind", []string{"--kind", "thirds", "--source", "jsonl", "--input", input, "--out", out}, `kind "thirds"`},
		{"patents from jsonl", []string{"--kind", "patent-claims", "--source", "jsonl", "--input", input, "--out", out}, "needs source uspto"},
		{"negative min-chars", []string{"--kind", "halves", "--source", "jsonl", "--input", input, "--out", out, "--min-chars", "-5"}, "must not be negative"},
		{"stray argument", []string{"--kind", "halves", "--source", "jsonl", "--input", input, "--out", out, "extra"}, `unexpected argument "extra"`},
		{"bad seed", []string{"--kind", "halves", "--seed", "-1"}, `--seed: "-1" is not a whole number >= 0`},
		{"ok", []string{"--kind", "halves", "--source", "jsonl", "--input", input, "--out", out, "--min-chars", "100", "--seed", "7"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := cmdBenchdata(context.Background(), tc.args)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	var sum benchdata.Summary
	data, err := os.ReadFile(filepath.Join(out, benchdata.SummaryFile))
	if err != nil || json.Unmarshal(data, &sum) != nil || sum.Seed != 7 || sum.MinChars != 100 || sum.Docs != 5 {
		t.Fatalf("benchdata.json: %v\n%s", err, data)
	}
}

// TestBenchdataThroughEval builds a halves benchmark from four short articles and evaluates
// its test split with the real GN: the output is a dataset `reignpipe eval` accepts, the
// queries of other splits are neither encoded nor scored, and each query finds its other half.
func TestBenchdataThroughEval(t *testing.T) {
	model, tokPath := testenv.GN(t, "all-minilm-l6-v2")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	dir := t.TempDir()
	src := filepath.Join(dir, "docs")
	articles := map[string]string{
		"volcano.rst": "A volcano erupts molten rock from a magma chamber.\n\nLava and ash leave the volcano in an eruption.",
		"piano.rst":   "The piano is a keyboard instrument with hammers.\n\nPressing a piano key makes a hammer strike the strings.",
		"bread.rst":   "Bread dough is flour, water and yeast.\n\nThe yeast ferments, the dough rises and the bread is baked in an oven.",
		"orbit.txt":   "A satellite orbits the planet under gravity.\n\nThe satellite keeps circling because its speed balances gravity.",
	}
	for name, text := range articles {
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "bench")
	if err := cmdBenchdata(context.Background(), []string{"--kind", "halves", "--source", "textdir", "--input", src, "--out", data, "--min-chars", "0"}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, dir, filepath.Join(dir, "unused.jsonl"))
	cfg.GN.Name, cfg.GN.Model, cfg.GN.Tokenizer = "all-minilm-l6-v2", model, tokPath
	sum, err := evaluateDir(context.Background(), cfg, data, "test", 3, true, filepath.Join(dir, "eval"))
	if err != nil {
		t.Fatal(err)
	}
	// Four documents split 2 train, 0 val, 2 test: the whole corpus is encoded, and only the
	// two test queries.
	if sum.Corpus != 4 || sum.Queries != 2 || sum.SkippedQueries != 0 {
		t.Fatalf("summary %+v", sum)
	}
	for _, s := range sum.Systems {
		if s.Queries != 2 || s.NDCG < 0.99 {
			t.Errorf("%s: %+v", s.System, s)
		}
	}
}
