package benchenv

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	const usage = "usage: go run ./ops/bench/x [flags]\n\nWhat x measures\n(see ops/bench/x/main.go).\n\nflags:\n  -n int\n    \tcount (default 1)\n"
	for _, tc := range []struct {
		name    string
		args    []string
		help    bool   // the error is flag.ErrHelp
		fails   bool   // any other error
		usage   bool   // the usage was printed
		n       int    // -n after parsing
		message string // in what the flag set printed
	}{
		{name: "no flags", n: 1},
		{name: "a flag", args: []string{"-n", "3"}, n: 3},
		{name: "-h", args: []string{"-h"}, help: true, usage: true, n: 1},
		{name: "a word after the flags", args: []string{"-n", "3", "extra"}, help: true, usage: true, n: 3},
		{name: "a flag's value without its flag", args: []string{"3"}, help: true, usage: true, n: 1},
		{name: "an unknown flag", args: []string{"-m", "3"}, fails: true, usage: true, n: 1, message: "flag provided but not defined: -m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := Flags("ops/bench/x", "What x measures\n(see ops/bench/x/main.go).")
			var out bytes.Buffer
			fs.SetOutput(&out)
			n := fs.Int("n", 1, "count")
			err := Parse(fs, tc.args)
			if got := errors.Is(err, flag.ErrHelp); got != tc.help {
				t.Errorf("Parse(%q) = %v, want flag.ErrHelp: %v", tc.args, err, tc.help)
			}
			if got := err != nil && !errors.Is(err, flag.ErrHelp); got != tc.fails {
				t.Errorf("Parse(%q) = %v, want another error: %v", tc.args, err, tc.fails)
			}
			if *n != tc.n {
				t.Errorf("Parse(%q): -n is %d, want %d", tc.args, *n, tc.n)
			}
			if tc.usage != strings.HasSuffix(out.String(), usage) {
				t.Errorf("Parse(%q) printed %q, want the usage: %v", tc.args, out.String(), tc.usage)
			}
			if !strings.Contains(out.String(), tc.message) {
				t.Errorf("Parse(%q) printed %q, want %q in it", tc.args, out.String(), tc.message)
			}
			if fs.Name() != "x" {
				t.Errorf("the flag set is named %q, want x", fs.Name())
			}
		})
	}
}

func TestSectionFlags(t *testing.T) {
	var s Section
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	s.Flags(fs)
	if err := fs.Parse([]string{"-out", "r.md", "-label", "after (commit abc)"}); err != nil {
		t.Fatal(err)
	}
	want := Section{Bin: "bin/reignpipe", Out: "r.md", Label: "after (commit abc)"}
	if s != want {
		t.Errorf("parsed %+v, want %+v", s, want)
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "reignpipe"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	s := Section{Bin: "reignpipe"}
	if err := s.Resolve(); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "reignpipe"); s.Bin != want {
		t.Errorf("Bin = %s, want %s", s.Bin, want)
	}
	missing := Section{Bin: "bin/reignpipe"}
	err := missing.Resolve()
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "go build -o bin/reignpipe ./cmd/reignpipe") {
		t.Errorf("a missing binary: %v, want not-exist and how to build it", err)
	}
}

func TestHeading(t *testing.T) {
	for _, tc := range []struct {
		s    Section
		want string
	}{
		{Section{Bin: "/nonexistent/reignpipe", Label: "before (commit e677ebe)"},
			"## before (commit e677ebe)\n\nMachine: m.\n\nCommand: `go run ./ops/bench/x`\n\n"},
		// Without a label the title is what the binary was built from. The header's own line
		// end and one more: a blank line before the command, as in the results files.
		{Section{Bin: "/nonexistent/reignpipe"},
			"## " + Binary("/nonexistent/reignpipe") + "\n\nMachine: m.\n\nCommand: `go run ./ops/bench/x`\n\n"},
	} {
		if got := tc.s.Heading("Machine: m.\n", "go run ./ops/bench/x"); got != tc.want {
			t.Errorf("%+v: Heading = %q, want %q", tc.s, got, tc.want)
		}
	}
}

func TestHeader(t *testing.T) {
	h := Section{Bin: "/nonexistent/reignpipe"}.Header(t.TempDir(), "Database: PostgreSQL 17")
	for _, want := range []string{"Machine: ", ". Binary /nonexistent/reignpipe (", ". Harness from commit unknown (no git). Database: PostgreSQL 17. Started ", ", load average "} {
		if !strings.Contains(h, want) {
			t.Errorf("Header = %q, want %q in it", h, want)
		}
	}
	if !strings.HasSuffix(h, ".\n") || strings.Count(h, "\n") != 1 {
		t.Errorf("Header = %q, want one line ending in a full stop", h)
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	results := filepath.Join(dir, "results", "x.md")
	for _, tc := range []struct {
		s      Section
		report string
		file   string // the results file afterwards; "" = none
	}{
		{Section{}, "## a\n\n", ""},
		{Section{Out: results}, "## b\n\n", "# Title\n\n## b\n\n"},
		// The title heads a new file only: a second run is one more section.
		{Section{Out: results}, "## c\n\n", "# Title\n\n## b\n\n## c\n\n"},
	} {
		var stdout bytes.Buffer
		if err := tc.s.Write(&stdout, "Title", tc.report); err != nil {
			t.Fatal(err)
		}
		if stdout.String() != tc.report {
			t.Errorf("printed %q, want %q", stdout.String(), tc.report)
		}
		data, err := os.ReadFile(results)
		if tc.file == "" {
			if err == nil {
				t.Errorf("without Out the results file exists: %q", data)
			}
			continue
		}
		if string(data) != tc.file {
			t.Errorf("the results file holds %q (%v), want %q", data, err, tc.file)
		}
	}
}

// A report that cannot be printed still reaches its results file.
func TestWriteAppendsWhenStdoutFails(t *testing.T) {
	results := filepath.Join(t.TempDir(), "x.md")
	err := Section{Out: results}.Write(failingWriter{}, "Title", "## a\n\n")
	if err == nil || !strings.Contains(err.Error(), "stdout gone") {
		t.Errorf("Write = %v, want the stdout error", err)
	}
	if data, _ := os.ReadFile(results); string(data) != "# Title\n\n## a\n\n" {
		t.Errorf("the results file holds %q", data)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("stdout gone") }

func TestLeftovers(t *testing.T) {
	for _, keep := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "trial")
		if err := os.MkdirAll(filepath.Join(dir, "cache"), 0o755); err != nil {
			t.Fatal(err)
		}
		called := false
		Leftovers("x", keep, dir, "topics p.*", func(ctx context.Context) error {
			called = true
			deadline, ok := ctx.Deadline()
			if !ok || time.Until(deadline) < 50*time.Second || ctx.Err() != nil {
				t.Errorf("remove got a context ending %v (has deadline %v, err %v), want a live one of about a minute", deadline, ok, ctx.Err())
			}
			return errors.New("broker gone")
		})
		_, err := os.Stat(dir)
		if kept := err == nil; kept != keep {
			t.Errorf("keep %v: the directory kept: %v", keep, kept)
		}
		if called == keep {
			t.Errorf("keep %v: remove called: %v", keep, called)
		}
	}
}

func TestPipeline(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		refused    string // in the error; "" = loads
	}{
		{"loads", "version: 1\nname: x\nsource: {type: jsonl, path: in.jsonl}\ngn: {name: bge-small-en-v15}\nsinks:\n  - {type: parquet, dir: out}\n", ""},
		{"an unknown key", "version: 1\nname: x\nsource: {type: jsonl, path: in.jsonl}\ngn: {name: bge-small-en-v15}\nsinks:\n  - {type: parquet, dir: out}\nbogus: 1\n", "bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path, cfg, err := Pipeline(dir, tc.text)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), filepath.Join(dir, "pipeline.yaml")) {
					t.Errorf("Pipeline = %v, want an error naming the file and %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if path != filepath.Join(dir, "pipeline.yaml") || cfg.Name != "x" || cfg.Source.Path != "in.jsonl" {
				t.Errorf("Pipeline = %s, name %q, source.path %q", path, cfg.Name, cfg.Source.Path)
			}
			if data, _ := os.ReadFile(path); string(data) != tc.text {
				t.Errorf("the file holds %q, want %q", data, tc.text)
			}
		})
	}
}
