// Command domains is the evidence behind `reignpipe tune`: three real domains from Debian's
// packages (the kernel's documentation, Python's, and the King James Bible by chapter), each
// tuned on its own, scored on chunk-level halves (what tune decides on) and on the text-level
// `benchdata --kind halves` benchmark of the same held-out documents, and a general checkpoint
// trained on the other domains scored on each (leave one domain out). run.sh drives it.
//
//	domains corpora -linuxdoc DIR -pydoc DIR -bible FILE -out DIR [-min-chars 2500] [-max-chars 16000] [-max-docs 600]
//	domains lodo -pipeline YAML -out DIR -domains a,b,c [-sizes small-l2,base-l3] [-seeds 1,2,3] [-epochs 10]
//	domains heldout -summary tune-summary.json -corpus DOMAIN.jsonl -out FILE
//	domains table -work DIR
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: domains corpora|lodo|heldout|table [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "corpora":
		err = corpora(os.Args[2:])
	case "lodo":
		err = lodo(ctx, os.Args[2:])
	case "heldout":
		err = heldout(os.Args[2:])
	case "table":
		err = table(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "domains:", err)
		os.Exit(1)
	}
}

func corpora(args []string) error {
	fs := flag.NewFlagSet("corpora", flag.ContinueOnError)
	linuxdoc := fs.String("linuxdoc", "", "linux-doc-6.1's Documentation directory (*.rst.gz)")
	pydoc := fs.String("pydoc", "", "python3.11-doc's html/_sources directory (*.rst.txt)")
	bible := fs.String("bible", "", "the KJV as the bible program prints it")
	out := fs.String("out", "", "output directory: DOMAIN.jsonl and corpora.json")
	minChars := fs.Int("min-chars", 2500, "fewest characters a document may have")
	maxChars := fs.Int("max-chars", 16000, "most characters a document may have")
	maxDocs := fs.Int("max-docs", 600, "most documents per domain (a sample by id hash)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *linuxdoc == "" || *pydoc == "" || *bible == "" {
		return fmt.Errorf("corpora: -linuxdoc, -pydoc, -bible and -out are required")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	type src struct {
		domain, source string
		read           func() ([]doc, error)
	}
	srcs := []src{
		{"linuxdoc", "Debian linux-doc-6.1: Documentation/**/*.rst", func() ([]doc, error) { return readTree(*linuxdoc, ".rst") }},
		{"pydoc", "Debian python3.11-doc: html/_sources/**/*.rst.txt", func() ([]doc, error) { return readTree(*pydoc, ".rst.txt") }},
		{"kjv", "Debian bible-kjv-text: one document per chapter", func() ([]doc, error) { return readBible(*bible) }},
	}
	var stats []corpusStats
	for _, s := range srcs {
		docs, err := s.read()
		if err != nil {
			return fmt.Errorf("%s: %w", s.domain, err)
		}
		st := corpusStats{Domain: s.domain, Source: s.source, MinChars: *minChars, MaxChars: *maxChars}
		docs = keep(docs, &st, *maxDocs)
		if err := writeJSONL(filepath.Join(*out, s.domain+".jsonl"), docs); err != nil {
			return err
		}
		stats = append(stats, st)
		fmt.Printf("%s: read %d, short %d, long %d, in range %d, kept %d\n", s.domain, st.Read, st.Short, st.Long, st.InRange, st.Kept)
	}
	b, _ := json.MarshalIndent(stats, "", "  ")
	return os.WriteFile(filepath.Join(*out, "corpora.json"), append(b, '\n'), 0o644)
}
