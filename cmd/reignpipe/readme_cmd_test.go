package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsnet/compress/bzip2"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// readmeNotRun lists the README commands this test does not run, each with the reason. Every
// other command of a ```sh block runs as written; an entry that no longer matches a README
// command fails the test, so the list cannot hide a command the README dropped or changed.
var readmeNotRun = map[string]string{
	"make demo": "downloads the Wikipedia sample from PyPI and embeds 1,244 windows (minutes); " +
		"the test runs the demo's own pipeline run (ops/demo's `run --from-scratch pipelines/wikipedia.yaml`) on a fixture dump at the sample's path instead",
	"make test":          "the whole suite, this test included",
	"ops/postgres start": "starts a PostgreSQL server; make test starts it (ops/with-postgres) for the pgvector tests",
	"ops/kafka start":    "starts a Kafka broker; make test starts it (ops/with-kafka) for the stage tests",
	"make train-deps":    "builds the trainer's 4.8 GB PyTorch venv; make test builds it",
	"bin/reignpipe tune pipelines/jsonl.yaml --out out/tune --apply": "needs a corpus of several-window documents, enough for " +
		"train, validation and test splits; cmd/reignpipe TestTune runs tune and --apply on one under make test",
	"bin/reignpipe stage process pipelines/uspto-kafka.yaml": "a stage runs until it is stopped and needs the broker; " +
		"cmd/reignpipe TestStage* run the stages against the real broker under make test",
}

// readmeCommands returns the commands of README.md's ```sh blocks, one a line (a line ending
// in a backslash continues on the next), in the order the README gives them.
func readmeCommands(t *testing.T, readme string) []string {
	t.Helper()
	var cmds []string
	in, cont := false, ""
	for _, line := range strings.Split(readme, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```sh":
			in = true
		case in && strings.TrimSpace(line) == "```":
			in = false
		case in:
			if strings.HasSuffix(line, "\\") {
				cont += strings.TrimSuffix(line, "\\") + " "
				continue
			}
			if c := strings.TrimSpace(cont + line); c != "" && !strings.HasPrefix(c, "#") {
				cmds = append(cmds, c)
			}
			cont = ""
		}
	}
	if in {
		t.Fatal("README.md has a ```sh block that is never closed")
	}
	return cmds
}

// stripComment removes a trailing `# comment` that is outside quotes.
func stripComment(cmd string) string {
	var quote rune
	for i, r := range cmd {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && i > 0 && (cmd[i-1] == ' ' || cmd[i-1] == '\t'):
			return strings.TrimSpace(cmd[:i])
		}
	}
	return strings.TrimSpace(cmd)
}

var background = regexp.MustCompile(`[^&]&$`)

// The README cannot drift: every command of its ```sh blocks runs as written, in order, in a
// folder laid out like a checkout (bin/reignpipe built from this tree, pipelines/ and the
// committed REIGN checkpoint in ops/checkpoints) holding the inputs the README names, written
// here: a JSONL corpus, a folder of JSONL files with a bad line, a Wikipedia dump at the demo's
// sample path and at the README's own-dump path, a folder of USPTO patents and one patent file.
// A command fails the test when it exits non-zero or prints a JSON error; one that cannot run
// here must be in readmeNotRun with its reason.
func TestREADMECommands(t *testing.T) {
	testenv.GN(t, "bge-small-en-v15")
	ort := testenv.ORTLibrary(t)
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "%s not on PATH: the README's commands need it", tool)
		}
	}
	root := testenv.Root()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds := readmeCommands(t, string(b))
	if len(cmds) < 10 {
		t.Fatalf("read only %d commands from README.md's sh blocks", len(cmds))
	}
	listed := map[string]bool{}
	for _, c := range cmds {
		listed[stripComment(c)] = true
	}
	for c := range readmeNotRun {
		if !listed[c] {
			t.Errorf("readmeNotRun lists %q, which no sh block of README.md holds any more: remove it", c)
		}
	}
	demo, err := os.ReadFile(filepath.Join(root, "ops", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	const demoRun = "bin/reignpipe run --from-scratch pipelines/wikipedia.yaml"
	if !strings.Contains(string(demo), demoRun) {
		t.Fatalf("ops/demo no longer runs %q: make this test's stand-in for make demo do what it does", demoRun)
	}

	dir := readmeWorkspace(t, root)
	env := []string{"REIGNPIPE_ORT_LIB=" + ort}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "REIGNPIPE_INPUT", name == "REIGNPIPE_OUT", name == "REIGNPIPE_DUMP",
			name == "REIGNPIPE_CHECKPOINT", name == "REIGNPIPE_ORT_LIB", strings.HasPrefix(name, "PG"):
			// the README's commands see the defaults a new user sees
		default:
			env = append(env, kv)
		}
	}
	if ln, err := net.Listen("tcp", "127.0.0.1:8321"); err != nil {
		t.Fatalf("127.0.0.1:8321, where the README's serve example listens, is in use: %v", err)
	} else {
		ln.Close()
	}

	var groups []int // process groups of the commands, stopped when the test ends
	t.Cleanup(func() {
		for _, pg := range groups {
			_ = syscall.Kill(-pg, syscall.SIGTERM)
		}
		deadline := time.Now().Add(40 * time.Second)
		for _, pg := range groups {
			for syscall.Kill(-pg, 0) == nil && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			_ = syscall.Kill(-pg, syscall.SIGKILL)
		}
	})
	run := func(cmd string, timeout time.Duration) (string, error) {
		log, err := os.CreateTemp(t.TempDir(), "out")
		if err != nil {
			t.Fatal(err)
		}
		defer log.Close()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		c := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", cmd)
		c.Dir, c.Env, c.Stdout, c.Stderr = dir, env, log, log
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		groups = append(groups, c.Process.Pid)
		err = c.Wait()
		out, _ := os.ReadFile(log.Name())
		if ctx.Err() != nil {
			err = fmt.Errorf("still running after %s", timeout)
		}
		return string(out), err
	}

	// make demo's run, on the fixture dump at the sample's path: the README's commands on
	// out/demo read what it writes.
	if out, err := run(demoRun, 5*time.Minute); err != nil {
		t.Fatalf("the demo's run (%s): %v\n%s", demoRun, err, out)
	}
	ran := 0
	for _, cmd := range cmds {
		if why, ok := readmeNotRun[stripComment(cmd)]; ok {
			t.Logf("not run: %s\n    why: %s", cmd, why)
			continue
		}
		start := time.Now()
		out, err := run(cmd, 3*time.Minute)
		ran++
		if err == nil && strings.Contains(out, `{"error"`) {
			err = fmt.Errorf("it printed an error")
		}
		if err != nil {
			t.Errorf("README command failed: %s\n    %v\n%s", cmd, err, out)
			continue
		}
		if background.MatchString(stripComment(cmd)) {
			t.Logf("started in the background: %s", cmd)
			continue
		}
		t.Logf("ok (%.1fs): %s", time.Since(start).Seconds(), cmd)
	}
	if ran+len(readmeNotRun) != len(cmds) {
		t.Errorf("ran %d and skipped %d of %d commands", ran, len(readmeNotRun), len(cmds))
	}
}

// readmeWorkspace lays out a folder like a checkout after `make build` and `make demo`, with the
// inputs the README's examples name.
func readmeWorkspace(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "bin", "reignpipe"), ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, link := range []string{"pipelines", "ops/checkpoints"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, link)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(root, link), filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(rel string, data []byte) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	jsonl := func(docs ...map[string]string) []byte {
		var buf bytes.Buffer
		for _, d := range docs {
			line, _ := json.Marshal(d)
			buf.Write(append(line, '\n'))
		}
		return buf.Bytes()
	}
	// ./corpus.jsonl, what pipelines/jsonl.yaml reads by default: one two-window document.
	write("corpus.jsonl", jsonl(
		map[string]string{"id": "bread", "title": "Baking bread", "text": strings.Repeat("Bread is baked in a hot oven until its crust is brown. ", 50)},
		map[string]string{"id": "oven", "title": "Steam ovens", "text": "A steam injector keeps the crust of bread soft while it bakes."},
		map[string]string{"id": "sea", "title": "The sea", "text": "Waves roll on the shore and ships sail the sea."},
	))
	// docs/: a folder of JSONL files, one with BEIR's _id and a line that is not JSON (dead-lettered).
	write("docs/notes.jsonl", jsonl(map[string]string{"id": "1", "title": "One", "text": "The first note."}))
	write("docs/more.jsonl", append(jsonl(map[string]string{"_id": "7", "text": "A BEIR style line."}), "not json\n"...))

	// A Wikipedia dump, at the demo sample's path (pipelines/wikipedia.yaml's default) and at the
	// README's own-dump path.
	page := func(id int, title, text string) string {
		return fmt.Sprintf("<page><title>%s</title><ns>0</ns><id>%d</id><revision><id>%d</id><text>%s</text></revision></page>\n", title, id, id+1000, text)
	}
	dump := "<mediawiki><siteinfo><dbname>enwiki</dbname></siteinfo>\n" +
		page(12, "Anarchism", strings.Repeat("'''Anarchism''' is a political philosophy that rejects the authority of the state. ", 50)) +
		page(25, "Autism", "'''Autism''' is a neurodevelopmental condition.") +
		page(39, "Albedo", "'''Albedo''' is the fraction of sunlight that a surface reflects.") +
		page(40, "Alps", "#REDIRECT [[Alps (mountains)]]") +
		"</mediawiki>\n"
	var bz bytes.Buffer
	w, err := bzip2.NewWriter(&bz, &bzip2.WriterConfig{Level: 1})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(dump))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	write("out/demo/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2", bz.Bytes())
	write("enwiki-latest-pages-articles.xml.bz2", bz.Bytes())

	// feed/: a USPTO weekly grant file of two patents, and one patent file to query with.
	patent := func(number, title, text string) string {
		return `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE us-patent-grant SYSTEM "us-patent-grant-v42-2006-08-23.dtd" [ ]>
<us-patent-grant lang="EN" dtd-version="v4.2 2006-08-23">
<us-bibliographic-data-grant>
<publication-reference><document-id><country>US</country><doc-number>` + number + `</doc-number><kind>B2</kind><date>20060103</date></document-id></publication-reference>
<invention-title>` + title + `</invention-title>
</us-bibliographic-data-grant>
<abstract><p>` + text + `</p></abstract>
<description><p>` + text + `</p></description>
<claims><claim><claim-text>1. ` + title + `.</claim-text></claim></claims>
</us-patent-grant>
`
	}
	write("feed/ipg060103.xml", []byte(patent("07000001", "Bread oven", "An oven that bakes bread evenly with steam.")+
		patent("07000002", "Ship hull", "A hull that keeps waves out of a ship.")))
	write("US07000003-B2.xml", []byte(patent("07000003", "Steam bread oven", "A steam injector keeps the crust soft.")))
	return dir
}
