package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/reignpipe/reignpipe/pipelines"
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
			synopsis: "ingest|embed|aggregate|process|replica [--idle-exit D] [--cache-dir D] [--metrics-addr A] [--replica-max-lag N] [--replica-checkpoint-every N] [--from-scratch] [--log-format text|json] PIPELINE.yaml", run: cmdStage},
		{name: "materialize", summary: "catch a chunk cache up to the cluster's chunk store on Kafka (<topics>.windows, .manifests) and exit",
			synopsis: "[--cache-dir D] [--log-format text|json] PIPELINE.yaml", run: cmdMaterialize},
		{name: "eval", summary: "BM25, GN truncated, GN mean-pool and REIGN on a benchmark",
			synopsis: "--data DIR [--format auto|beir|loco|dapfam] [--subset NAME|all] [--view V] [--split test] [--k N] [--keep-self] [--out DIR] [--checkpoint DIR] PIPELINE.yaml", run: cmdEval},
		{name: "train", summary: "train REIGN over the cached chunk embeddings",
			synopsis: "--data BEIR_DIR --out DIR [--size small-l2] [--epochs 50] [--seed 42] [--loss cosine3|infonce] [--self-supervised] PIPELINE.yaml [-- TRAINER FLAGS]", run: cmdTrain},
		{name: "tune", summary: "adapt REIGN to the cached corpus; promote it only when it beats the mean-pool on held-out documents",
			synopsis: "--out DIR [--size SIZE] [--epochs 50] [--seed 42] [--val-pct 10] [--test-pct 10] [--only PREFIX] [--checkpoint CKPT] [--apply] PIPELINE.yaml [-- TRAINER FLAGS]", run: cmdTune},
		{name: "reaggregate", summary: "rebuild every document vector from the chunk cache",
			synopsis: "--out DIR | --sinks [--checkpoint DIR] PIPELINE.yaml", run: cmdReaggregate},
		{name: "verify", summary: "check the chunk cache, vector outputs and state folder; --repair fixes what the next run can heal (stop the pipeline first)",
			synopsis: "[--repair] PIPELINE.yaml", run: cmdVerify},
		{name: "neighbors", aliases: []string{"neighbours"}, summary: "nearest documents to one document, from a vector sink",
			synopsis: "--vectors DIR [--doc ID|--title TITLE] [--k 5]", run: func(_ context.Context, a []string) error { return cmdNeighbors(os.Stdout, a) }},
		{name: "search", summary: "the documents nearest to a query document, from the pipeline's pgvector table or vector files",
			synopsis: "--doc FILE|--text TEXT|--id DOC_ID [--k 10] [--exact] [--gn] [--format text|json] PIPELINE.yaml", run: cmdSearch},
		{name: "serve", summary: "an HTTP API: POST /v1/embed, /v1/search, /v1/embeddings (OpenAI); GET /info, /healthz, /metrics",
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

// usageError is the error a command returns for arguments it cannot use; it exits 2.
func usageError(name, why string) error {
	return &usageErr{cmd: name, why: why}
}

type usageErr struct{ cmd, why string }

func (e *usageErr) Error() string {
	return fmt.Sprintf("%s: %s\nusage: %s", e.cmd, e.why, usageLine(e.cmd))
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
	fmt.Fprintln(w, "\nexit codes: 0 completed (inputs that failed are in the dead-letter file), 1 failed, 2 usage error,")
	fmt.Fprintln(w, "  130 stopped by Ctrl-C and 143 by SIGTERM before completing (what was in flight is committed first);")
	fmt.Fprintln(w, "  stage and serve run until stopped and exit 0 when a signal stops them.")
	fmt.Fprintln(w, "\n`reignpipe CMD --help` lists a command's flags.")
}

// newFlagSet is a command's flag set. The flag package prints nothing itself: help (-h or
// --help anywhere before "--") is printed once by parseInterspersed, and a flag it cannot parse
// becomes a usage error that main prints once, with the usage line. (The second argument, the
// command line, is the one parseInterspersed reads; the callers pass it here too.)
func newFlagSet(name string, _ []string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// printHelp is a command's --help: the table's synopsis and summary, and its flags, on stdout.
func printHelp(fs *flag.FlagSet) {
	name := fs.Name()
	fmt.Fprintf(os.Stdout, "usage: %s\n", usageLine(name))
	if c, _ := lookup(name); c.summary != "" {
		fmt.Fprintf(os.Stdout, "\n%s.\n", strings.ToUpper(c.summary[:1])+c.summary[1:])
	}
	fmt.Fprintln(os.Stdout, "\nflags:")
	fs.SetOutput(os.Stdout)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

var (
	flagUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	flagNoValue   = regexp.MustCompile(`^flag needs an argument: -+(.+)$`)
	flagBadValue  = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-+([^:]+): (.*)$`)
)

// flagError says what the flag package found wrong with the arguments in the words of the
// command line (--name), with the nearest defined flag for a typo.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if m := flagUndefined.FindStringSubmatch(msg); m != nil {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		why := "unknown flag --" + m[1]
		if near := pipelines.Nearest(m[1], names); near != "" {
			why += "; did you mean --" + near + "?"
		} else {
			why += fmt.Sprintf(" (reignpipe %s --help lists the flags)", fs.Name())
		}
		return usageError(fs.Name(), why)
	}
	if m := flagNoValue.FindStringSubmatch(msg); m != nil {
		return usageError(fs.Name(), "--"+m[1]+" needs a value")
	}
	if m := flagBadValue.FindStringSubmatch(msg); m != nil {
		why := fmt.Sprintf("--%s: %q is not %s", m[2], m[1], flagKind(fs.Lookup(m[2])))
		if m[3] != "parse error" && m[3] != "value out of range" {
			why = fmt.Sprintf("--%s %q: %s", m[2], m[1], m[3]) // the flag's own reason
		}
		return usageError(fs.Name(), why)
	}
	return usageError(fs.Name(), msg)
}

// flagKind names the value a flag takes, from the flag package's value types.
func flagKind(f *flag.Flag) string {
	if f == nil {
		return "a value it takes"
	}
	switch t := fmt.Sprintf("%T", f.Value); {
	case strings.Contains(t, "duration"):
		return "a duration like 5s or 2m"
	case strings.Contains(t, "bool"):
		return "true or false"
	case strings.Contains(t, "uint"):
		return "a whole number >= 0"
	case strings.Contains(t, "int"):
		return "a whole number"
	case strings.Contains(t, "float"):
		return "a number"
	}
	return "a value it takes"
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
