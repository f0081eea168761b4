package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Every command's --help prints its usage line from the command table on stdout and exits 0;
// `reignpipe help` lists every command; a usage error exits 2 and shows the same line, once.
func TestHelpComesFromTheCommandTable(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "reignpipe")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	help, err := exec.Command(bin, "help").Output()
	if err != nil {
		t.Fatalf("reignpipe help: %v", err)
	}
	for _, c := range commands() {
		if !strings.Contains(string(help), usageLine(c.name)) {
			t.Errorf("help does not list %q", usageLine(c.name))
		}
		if c.name == "version" {
			continue
		}
		cmd := exec.Command(bin, c.name, "--help")
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("reignpipe %s --help: %v", c.name, err)
			continue
		}
		if !strings.HasPrefix(string(out), "usage: "+usageLine(c.name)+"\n") || !strings.Contains(string(out), "flags:") ||
			strings.Count(string(out), "usage:") != 1 {
			t.Errorf("reignpipe %s --help printed:\n%s", c.name, out)
		}
		// A flag the command does not have: the usage once, the error once, exit 2.
		out, err = exec.Command(bin, c.name, "--input-file", "x").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Count(string(out), "usage: ") != 1 ||
			strings.Count(string(out), "unknown flag --input-file") != 1 || strings.Contains(string(out), "flag provided") {
			t.Errorf("reignpipe %s --input-file x: %v\n%s", c.name, err, out)
		}
	}
	out, err := exec.Command(bin, "run").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "usage: "+usageLine("run")) {
		t.Errorf("reignpipe run without a file: %v\n%s", err, out)
	}
	if err := exec.Command(bin, "no-such-command").Run(); err == nil {
		t.Error("an unknown command exited 0")
	}
}

// What the flag package finds wrong is said in the command line's words, with the nearest flag.
func TestFlagErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--inpt", "x"}, "run: unknown flag --inpt; did you mean --input?"},
		{[]string{"--input-file", "x"}, "run: unknown flag --input-file (reignpipe run --help lists the flags)"},
		{[]string{"--input"}, "run: --input needs a value"},
		{[]string{"--from-scratch=maybe"}, `run: --from-scratch: "maybe" is not true or false`},
		{[]string{"--k", "x"}, `run: --k: "x" is not a whole number`},
		{[]string{"--wait", "5"}, `run: --wait: "5" is not a duration like 5s or 2m`},
	}
	for _, c := range cases {
		fs := newFlagSet("run", c.args)
		fs.String("input", "", "")
		fs.Bool("from-scratch", false, "")
		fs.Int("k", 5, "")
		fs.Duration("wait", 0, "")
		_, err := parseInterspersed(fs, c.args)
		var ue *usageErr
		if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), c.want+"\nusage: reignpipe run ") {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
