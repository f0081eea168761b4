package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Every command's --help prints its usage line from the command table on stdout and exits 0;
// `reignpipe help` lists every command; a usage error exits non-zero and shows the same line.
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
		if !strings.HasPrefix(string(out), "usage: "+usageLine(c.name)+"\n") || !strings.Contains(string(out), "flags:") {
			t.Errorf("reignpipe %s --help printed:\n%s", c.name, out)
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
