// Package benchenv says where a benchmark ran (the machine, the binary it measured, the load)
// and appends a run's section to its results file. The harnesses that measure a change before
// and after it (ops/bench/embedonce, ops/bench/reaggregate) run the same code against two
// binaries, so each run is a section of its own in one file, with the figures that make the
// two comparable: the machine, the load average, the commit the binary was built from.
//
// It also holds what those harnesses share around their measurement (harness.go): main and
// its signals and exit codes, the flags and usage, the -bin/-out/-label section, the header
// and heading of the report, the pipeline file and the removal of a trial's leftovers; so
// a second harness written like the first differs from it only in what it measures.
package benchenv

import (
	"bufio"
	"crypto/sha256"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Machine is one line naming the machine: CPUs, the lscpu model name, RAM and the harness's Go.
func Machine() string {
	return fmt.Sprintf("%d CPUs (nproc), lscpu `Model name: %s`, %s RAM (MemTotal); harness built with %s",
		runtime.NumCPU(), cpuModel(), memTotal(), runtime.Version())
}

func cpuModel() string {
	if out, err := exec.Command("lscpu").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(l, "Model name:"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
			}
		}
	}
	return "unknown"
}

func memTotal() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			if kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64); err == nil {
				return fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	}
	return "unknown"
}

// LoadAvg is the 1, 5 and 15 minute load averages: on a shared machine they say how far a
// wall time is to be trusted.
func LoadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Binary names what a binary was built from (Go version, VCS revision, whether the tree had
// uncommitted changes), read from its embedded build information, and its sha256, which tells
// two binaries apart where the build stamped no revision (GOFLAGS=-buildvcs=false).
func Binary(path string) string {
	sum := "unreadable"
	if data, err := os.ReadFile(path); err == nil {
		sum = fmt.Sprintf("%x", sha256.Sum256(data))[:16]
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("%s (sha256 %s…; build info unreadable: %v)", path, sum, err)
	}
	rev, modified := "not stamped (built with -buildvcs=false)", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
			if len(rev) > 12 {
				rev = rev[:12]
			}
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", with uncommitted changes"
			}
		}
	}
	return fmt.Sprintf("%s (sha256 %s…): %s, VCS revision %s%s", path, sum, bi.GoVersion, rev, modified)
}

// KafkaVersion asks ops/kafka (under root, the repository) which Kafka it runs; the jars are
// already there once a broker was started, so this downloads nothing.
func KafkaVersion(root string) string {
	out, err := exec.Command(filepath.Join(root, "ops", "kafka"), "fetch").Output()
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(strings.TrimSpace(string(out)))
	if len(f) >= 2 && f[0] == "kafka" {
		return "Apache Kafka " + f[1] + " (ops/kafka, one KRaft node on this machine)"
	}
	return "unknown"
}

// Root is the repository root: the nearest directory above the working directory that holds
// go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory: run from the repository")
		}
		dir = parent
	}
}

// Tree is the repository's HEAD commit and whether its tracked files differ from it: where the
// harness itself comes from.
func Tree(root string) string {
	head, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown (no git)"
	}
	st, _ := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
	dirty := ""
	if len(strings.TrimSpace(string(st))) > 0 {
		dirty = " with uncommitted changes to tracked files"
	}
	return strings.TrimSpace(string(head)) + dirty
}

// Command is how to run the harness again: `go run ./PKG ARGS`, with the value of a -dsn
// flag left out (it may hold a password).
func Command(pkg string, args []string) string {
	out := []string{"go", "run", "./" + pkg}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "dsn" {
			out = append(out, "-dsn=…")
			if !hasValue {
				i++
			}
			continue
		}
		out = append(out, shellQuote(a))
	}
	return strings.Join(out, " ")
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain word characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./,:@%+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Append adds section to the results file at path, creating it (and its folder) with title as
// its first line when it does not exist yet.
func Append(path, title, section string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if os.IsNotExist(statErr) {
		if _, err := fmt.Fprintf(f, "# %s\n\n", title); err != nil {
			f.Close()
			return err
		}
	}
	if _, err := f.WriteString(section); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
