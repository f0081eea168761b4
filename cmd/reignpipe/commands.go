package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/reignpipe/reignpipe/pipelines/components"
)

// command is one entry of the command table: its synopsis is the one place its usage is
// written, for `reignpipe help`, `reignpipe CMD --help` and usage errors alike.
type command struct {
	name     string
	aliases  []string
	synopsis string // flags and arguments, after "reignpipe NAME"
	summary  string
	run      func(ctx context.Context, args []string) error
}

// commands is the command table, in the order help lists it. (A function, not a variable: the
// commands' own usage errors read the table.)
func commands() []command {
	return []command{
		{name: "run", summary: "run a pipeline in this process (embedded mode)",
			synopsis: "[--from-scratch] [--input PATH] [--log-format text|json] PIPELINE.yaml", run: cmdRun},
		{name: "stage", summary: "run one stage of a pipeline against Kafka (distributed mode)",
			synopsis: "ingest|embed|aggregate|process|replica [--idle-exit D] [--cache-dir D] [--metrics-addr A] [--replica-max-lag N] [--from-scratch] [--log-format text|json] PIPELINE.yaml", run: cmdStage},
		{name: "materialize", summary: "catch a chunk cache up to the cluster's chunk store on Kafka (<topics>.windows, .manifests) and exit",
			synopsis: "[--cache-dir D] [--log-format text|json] PIPELINE.yaml", run: cmdMaterialize},
		{name: "eval", summary: "BM25, GN truncated, GN mean-pool and REIGN on a benchmark",
			synopsis: "--data DIR [--format auto|beir|loco|dapfam] [--subset NAME|all] [--view V] [--split test] [--k N] [--keep-self] [--out DIR] [--checkpoint DIR] PIPELINE.yaml", run: cmdEval},
		{name: "train", summary: "train REIGN over the cached chunk embeddings",
			synopsis: "--data BEIR_DIR --out DIR [--size small-l2] [--epochs 50] [--seed 42] [--loss cosine3|infonce] [--self-supervised] PIPELINE.yaml [-- TRAINER FLAGS]", run: cmdTrain},
		{name: "reaggregate", summary: "rebuild every document vector from the chunk cache",
			synopsis: "--out DIR [--checkpoint DIR] PIPELINE.yaml", run: cmdReaggregate},
		{name: "verify", summary: "check the chunk cache, vector outputs and state folder; --repair fixes what the next run can heal (stop the pipeline first)",
			synopsis: "[--repair] PIPELINE.yaml", run: cmdVerify},
		{name: "neighbors", aliases: []string{"neighbours"}, summary: "nearest documents to one document, from a vector sink",
			synopsis: "--vectors DIR [--doc ID|--title TITLE] [--k 5]", run: func(_ context.Context, a []string) error { return cmdNeighbors(os.Stdout, a) }},
		{name: "search", summary: "the documents nearest to a query document, from the pipeline's pgvector table or vector files",
			synopsis: "--doc FILE|--text TEXT|--id DOC_ID [--k 10] [--exact] [--gn] [--format text|json] PIPELINE.yaml", run: cmdSearch},
		{name: "serve", summary: "an HTTP API: POST /v1/embed and /v1/search, /healthz, /metrics",
			synopsis: "[--addr 127.0.0.1:8321] [--max-concurrent 4] [--timeout 60s] [--no-cache] PIPELINE.yaml", run: cmdServe},
		{name: "benchdata", summary: "build a benchmark from real documents",
			synopsis: "--kind patent-claims|halves --source wikipedia|jsonl|uspto|textdir --input PATH --out DIR [--seed 42] [--min-chars 2000]", run: cmdBenchdata},
		{name: "importdata", summary: "rewrite a published benchmark (LoCoV1, DAPFAM, MTEB) as BEIR",
			synopsis: "--data DIR --out DIR [--format auto|beir|loco|dapfam] [--subset NAME] [--view V] [--seed 42]", run: func(_ context.Context, a []string) error { return cmdImportdata(a) }},
		{name: "components", summary: "list the source, sink and aggregation types with their keys, defaults and docs", run: cmdComponents},
		{name: "version", summary: "print the version", run: func(context.Context, []string) error {
			fmt.Println("reignpipe", version)
			return nil
		}},
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
		for _, a := range c.aliases {
			if a == name {
				return c, true
			}
		}
	}
	return command{}, false
}

// usageLine is "reignpipe NAME SYNOPSIS".
func usageLine(name string) string {
	c, _ := lookup(name)
	return strings.TrimSpace("reignpipe " + c.name + " " + c.synopsis)
}

// usageError is the error a command returns for arguments it cannot use.
func usageError(name, why string) error {
	return fmt.Errorf("%s: %s\nusage: %s", name, why, usageLine(name))
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "reignpipe: one vector per long document (REIGN-style pipeline)")
	fmt.Fprintln(w, "\nusage:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %s\n", strings.TrimSpace("reignpipe "+c.name+" "+c.synopsis))
	}
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	componentTypes(w, components.Builtin())
	fmt.Fprintln(w, "\n`reignpipe CMD --help` lists a command's flags.")
}

// newFlagSet is a command's flag set: its usage is the table's synopsis and the flags, printed
// to stdout when help is asked for (then the command exits 0) and to stderr otherwise.
func newFlagSet(name string, args []string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	out := io.Writer(os.Stderr)
	if wantsHelp(args) {
		out = os.Stdout
	}
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: %s\n", usageLine(name))
		if c, _ := lookup(name); c.summary != "" {
			fmt.Fprintf(out, "\n%s.\n", strings.ToUpper(c.summary[:1])+c.summary[1:])
		}
		fmt.Fprintln(out, "\nflags:")
		fs.PrintDefaults()
	}
	return fs
}

func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}
