// Command reignpipe turns corpora of long documents into one vector per document.
//
// The commands, their usage lines and summaries are the table in commands.go: `reignpipe help`
// and `reignpipe CMD --help` print from it, so there is no second copy to drift.
//
// The pipeline wiring is package pipelines/launch; the component types it opens are the
// registry pipelines/components.Builtin returns (`reignpipe components` lists them): no package
// registers itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const version = "0.1.0"

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
