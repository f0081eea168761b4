// Command reignpipe turns corpora of long documents into one vector per document.
//
// The commands, their usage lines and summaries are the table in commands.go: `reignpipe help`
// and `reignpipe CMD --help` print from it, so there is no second copy to drift.
//
// The pipeline wiring is in pipelines/engine/launch (one process) and pipelines/engine/cluster
// (the stages); the component types it opens are the registry pipelines/components.Builtin
// returns (`reignpipe components` lists them): no package registers itself.
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
	"sync/atomic"
	"syscall"
)

const version = "0.1.0"

// Exit codes: 0 a command that completed (a run whose inputs all went to the vectors or the
// dead-letter file included; --help), 1 a failure, 2 a usage error, 128+N a command stopped by
// signal N before it completed: 130 for Ctrl-C (SIGINT), 143 for SIGTERM. A run so stopped drains
// and commits what is in flight first (its summary says "stopped": "interrupted"): the code lets
// a script or scheduler tell it from a completed run. The commands that run until stopped --
// the distributed stages and serve -- exit 0 on SIGTERM or Ctrl-C after draining: that is their
// normal end (ops/DISTRIBUTED.md).
const (
	exitFailed = 1
	exitUsage  = 2
)

// errInterrupted is what a command returns when a signal stopped it before it completed.
var errInterrupted = errors.New("interrupted")

// runsUntilStopped are the commands a signal ends normally.
var runsUntilStopped = map[string]bool{"stage": true, "serve": true}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(exitUsage)
	}
	ctx, received := notifyStop()
	var err error
	name := os.Args[1]
	switch name {
	case "help", "-h", "--help":
		usage(os.Stdout)
	case "--version":
		fmt.Println("reignpipe", version)
	default:
		c, ok := lookup(name)
		if !ok {
			usage(os.Stderr)
			fmt.Fprintf(os.Stderr, "reignpipe: unknown command %q\n", name)
			os.Exit(exitUsage)
		}
		name = c.name
		err = c.run(ctx, os.Args[2:])
	}
	code, msg := exitCode(name, err, received())
	if msg != "" {
		fmt.Fprintln(os.Stderr, "reignpipe:", msg)
	}
	os.Exit(code)
}

// exitCode is the process's exit code for what command name returned, and the message to print;
// sig is the stop signal received (nil: none).
func exitCode(name string, err error, sig os.Signal) (int, string) {
	var ue *usageErr
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0, "" // CMD --help: the usage went to stdout
	case errors.As(err, &ue):
		return exitUsage, err.Error()
	case sig != nil && !runsUntilStopped[name] && (errors.Is(err, errInterrupted) || errors.Is(err, context.Canceled)):
		code := 128 + int(sig.(syscall.Signal))
		msg := fmt.Sprintf("%s interrupted by %s (exit %d)", name, signalName(sig), code)
		if name == "run" {
			msg += ": what was in flight is committed or left unacknowledged; the next run resumes after the last commit"
		}
		return code, msg
	}
	return exitFailed, err.Error()
}

func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT (Ctrl-C)"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// notifyStop cancels the returned context on the first SIGINT or SIGTERM (the soft stop) and
// remembers which came, for the exit code. Later signals are taken too, so a second Ctrl-C does
// not kill the process mid-commit; run.drain_timeout bounds the drain instead.
func notifyStop() (context.Context, func() os.Signal) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	var got atomic.Value
	go func() {
		s := <-ch
		got.Store(s)
		cancel()
	}()
	return ctx, func() os.Signal {
		s, _ := got.Load().(os.Signal)
		return s
	}
}

// parseInterspersed lets flags come before or after positional arguments. --help anywhere
// (before "--") prints the command's help and returns flag.ErrHelp; a flag it cannot parse is a
// usage error.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	if wantsHelp(args) {
		printHelp(fs)
		return nil, flag.ErrHelp
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, flagError(fs, err)
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
