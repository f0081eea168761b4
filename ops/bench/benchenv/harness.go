package benchenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/reignpipe/reignpipe/pipelines"
)

// Main runs a harness's run and exits as a command does. run's context ends at SIGINT or
// SIGTERM, so a harness interrupted mid-measurement stops its children and still removes what
// it made (see Leftovers). flag.ErrHelp (-h, or words the flags do not take) exits 2 as the
// flag package does, having printed the usage; any other error is printed after name and
// exits 1.
func Main(name string, run func(ctx context.Context, args []string, stdout io.Writer) error) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	cancel()
	if err == nil {
		return
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, name+":", err)
	os.Exit(1)
}

// Flags is the flag set of the harness in pkg (ops/bench/NAME), its usage the `go run` line,
// then about (what it measures), then the flags.
func Flags(pkg, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(filepath.Base(pkg), flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./%s [flags]\n\n%s\n\nflags:\n", pkg, about)
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args into fs and refuses words after the flags: a harness takes none, and one
// left there is most often a flag's value that lost its flag.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return flag.ErrHelp
	}
	return nil
}

// Section is one run of a harness that measures a build before and after a change: the
// reignpipe binary it measures (-bin) and the section its report becomes in a results file
// (-out, -label).
type Section struct {
	Bin, Out, Label string
}

// Flags registers -bin, -out and -label on fs.
func (s *Section) Flags(fs *flag.FlagSet) {
	fs.StringVar(&s.Bin, "bin", "bin/reignpipe", "the reignpipe binary to measure")
	fs.StringVar(&s.Out, "out", "", "append the report as a section to this results file")
	fs.StringVar(&s.Label, "label", "", "the section's title (default: the binary's commit)")
}

// Resolve makes Bin absolute, since the children it starts run in directories of their own,
// and checks that it is there.
func (s *Section) Resolve() error {
	abs, err := filepath.Abs(s.Bin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("%w (build with go build -o bin/reignpipe ./cmd/reignpipe)", err)
	}
	s.Bin = abs
	return nil
}

// Header is the line a section opens with: the machine, the binary, the commit of the harness
// (root: the repository), where (what the harness ran against: the broker, the database), when
// it started and the load then.
func (s Section) Header(root, where string) string {
	started := time.Now().UTC()
	return fmt.Sprintf("Machine: %s. Binary %s. Harness from commit %s. %s. Started %s, load average %s.\n",
		Machine(), Binary(s.Bin), Tree(root), where, started.Format(time.RFC3339), LoadAvg())
}

// Heading is the start of the report: the section's title (Label, or what Bin was built from),
// the header and the command that runs the harness again.
func (s Section) Heading(header, command string) string {
	label := s.Label
	if label == "" {
		label = Binary(s.Bin)
	}
	return fmt.Sprintf("## %s\n\n%s\nCommand: `%s`\n\n", label, header, command)
}

// Write prints the report and, with Out, appends it to that results file (title heads the file
// when the file is new). A report that cannot be printed is still appended: the measurement
// took minutes.
func (s Section) Write(stdout io.Writer, title, report string) error {
	_, err := io.WriteString(stdout, report)
	if s.Out != "" {
		err = errors.Join(err, Append(s.Out, title, report))
	}
	return err
}

// Leftovers removes what one measurement made: its temp directory, and through remove what it
// made outside it (what names them: "topics P.*", "tables P_*"). remove gets a context of its
// own, a minute long, since the measurement's may have ended (a trial that timed out, Ctrl-C)
// and those must go all the same. With keep it removes nothing and says where they are. Its
// lines on stderr start with name.
func Leftovers(name string, keep bool, dir, what string, remove func(context.Context) error) {
	if keep {
		fmt.Fprintf(os.Stderr, "%s: kept %s and %s\n", name, dir, what)
		return
	}
	os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := remove(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "%s: removing %s: %v\n", name, what, err)
	}
}

// Pipeline writes a harness's pipeline file, text, into dir and loads it as every command
// does, so a pipeline the loader refuses stops the harness before it measures anything.
func Pipeline(dir, text string) (string, *pipelines.Config, error) {
	path := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return "", nil, err
	}
	cfg, err := pipelines.Load(path)
	if err != nil {
		return "", nil, err
	}
	return path, cfg, nil
}
