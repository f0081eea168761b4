// Command reignpipe turns corpora of long documents into one vector per document.
//
// The commands, their usage lines and summaries are the table in commands.go: `reignpipe help`
// and `reignpipe CMD --help` print from it, so there is no second copy to drift.
//
// Connectors and stages are registered explicitly here (sources below, sinks in run.go): no
// package registers itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/jsonl"
	"github.com/reignpipe/reignpipe/connectors/multifile"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	"github.com/reignpipe/reignpipe/connectors/watchdir"
	"github.com/reignpipe/reignpipe/connectors/wikipedia"
	"github.com/reignpipe/reignpipe/pipelines"
)

const version = "0.1.0"

// sources maps source.type to its constructor.
var sources = map[string]func(pipelines.SourceConfig) (connectors.Source, error){
	"wikipedia": func(c pipelines.SourceConfig) (connectors.Source, error) {
		return wikipedia.Open(wikipedia.Options{Path: c.Path, Index: c.Index, Source: c.Name, Workers: c.Workers, MaxPageBytes: int(markupBound(c.MaxDocBytes))})
	},
	// jsonl and uspto also take a directory or a glob (files read in name order), or watch a
	// directory (watch: true).
	"jsonl": func(c pipelines.SourceConfig) (connectors.Source, error) {
		return files(c, func(p string) (connectors.Source, error) {
			return jsonl.Open(jsonl.Options{Path: p, Source: c.Name, MaxLineBytes: jsonlLineBound(c.MaxDocBytes)})
		})
	},
	"uspto": func(c pipelines.SourceConfig) (connectors.Source, error) {
		if err := uspto.ValidateSections(c.Sections); err != nil {
			return nil, err
		}
		return files(c, func(p string) (connectors.Source, error) {
			return uspto.Open(uspto.Options{Path: p, Sections: c.Sections, MaxDocBytes: markupBound(c.MaxDocBytes)})
		})
	},
}

// jsonlLineBound is the longest JSONL line worth reading under source.max_doc_bytes: the text
// plus 1 MiB for the other fields and JSON syntax. A line past it is skipped as a bad input
// without being held, so an oversized document costs the reader this much memory, not its size.
// Text heavy in JSON escapes can make a line longer than its text: such a document is refused
// slightly early, with a reason that names the bound.
func jsonlLineBound(maxDocBytes int64) int {
	if maxDocBytes <= 0 {
		return 0 // the reader's own bound
	}
	return int(maxDocBytes) + 1<<20
}

// markupBound is the longest XML record (a patent, a Wikipedia page) worth reading under
// source.max_doc_bytes: twice the text bound, for the markup around the text (the default, 32 MiB
// of text, gives the patent splitter's own 64 MiB). A longer record is skipped as a bad input
// without being held.
func markupBound(maxDocBytes int64) int64 {
	if maxDocBytes <= 0 {
		return 0 // the reader's own bound
	}
	return min(2*maxDocBytes, math.MaxInt32)
}

// files opens a path of per-file sources: watched, or a fixed set read once.
func files(c pipelines.SourceConfig, open func(string) (connectors.Source, error)) (connectors.Source, error) {
	if c.Watch {
		return watchdir.Open(watchdir.Options{Dir: c.Path, Pattern: c.Pattern, Open: open, StateFile: c.StateFile, Poll: c.Poll.Duration, Settle: c.Settle.Duration})
	}
	return multifile.Open(c.Path, open)
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch name := os.Args[1]; name {
	case "help", "-h", "--help":
		usage(os.Stdout)
	case "--version":
		fmt.Println("reignpipe", version)
	default:
		c, ok := lookup(name)
		if !ok {
			usage(os.Stderr)
			fmt.Fprintf(os.Stderr, "reignpipe: unknown command %q\n", name)
			os.Exit(2)
		}
		err = c.run(ctx, os.Args[2:])
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0) // CMD --help: the usage went to stdout
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reignpipe:", err)
		os.Exit(1)
	}
}

// parseInterspersed lets flags come before or after positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func setupLogger(format string) error {
	var h slog.Handler
	switch strings.ToLower(format) {
	case "text", "":
		h = slog.NewTextHandler(os.Stderr, nil)
	case "json":
		h = slog.NewJSONHandler(os.Stderr, nil)
	default:
		return fmt.Errorf("--log-format %q: use text or json", format)
	}
	slog.SetDefault(slog.New(h))
	return nil
}
