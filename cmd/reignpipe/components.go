package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/registry"
)

func cmdComponents(_ context.Context, args []string) error {
	fs := newFlagSet("components", args)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError("components", "takes no arguments")
	}
	printComponents(os.Stdout, components.Builtin())
	return nil
}

// printComponents lists every registered type with the keys it reads, their defaults and docs.
func printComponents(w io.Writer, r *registry.Registry) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	keys := func(prefix string, ks []registry.Key) {
		for _, k := range ks {
			fmt.Fprintf(tw, "      %s%s\t%s\t%s\n", prefix, k.Name, k.Default, k.Doc)
		}
	}
	fmt.Fprintln(tw, "sources (source.type); every source reads:")
	keys("source.", r.SourceKeys())
	for _, s := range r.Sources {
		fmt.Fprintf(tw, "  %s: %s\n", s.Type, s.Doc)
		keys("source.", s.Keys())
	}
	fmt.Fprintln(tw, "\nsinks (sinks[].type):")
	for _, s := range r.Sinks {
		fmt.Fprintf(tw, "  %s: %s\n", s.Type, s.Doc)
		keys("sinks[].", s.Keys())
	}
	fmt.Fprintln(tw, "\naggregations (aggregate.type):")
	for _, a := range r.Aggregators {
		fmt.Fprintf(tw, "  %s: %s\n", a.Type, a.Doc)
		keys("aggregate.", a.Keys())
	}
	tw.Flush()
}

// componentTypes is help's summary of the registered types.
func componentTypes(w io.Writer, r *registry.Registry) {
	fmt.Fprintln(w, "\ncomponent types (`reignpipe components` lists their keys):")
	fmt.Fprintf(w, "  %-15s %s\n", "source.type", strings.Join(r.SourceTypes(), ", "))
	fmt.Fprintf(w, "  %-15s %s\n", "sinks[].type", strings.Join(r.SinkTypes(), ", "))
	fmt.Fprintf(w, "  %-15s %s\n", "aggregate.type", strings.Join(r.AggregatorTypes(), ", "))
}
