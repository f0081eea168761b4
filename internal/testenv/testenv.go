// Package testenv finds the real parts that tests need (shared data files, fetched GN models,
// the ONNX Runtime library, the Python oracles) and skips the test with a clear message when
// one is missing. Under `make test` REIGNPIPE_STRICT=1 is set: a missing part then fails the
// test instead, so an oracle test can never pass by skipping where it should have run.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Root is the repository root (found from this file's location).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Missing skips a test whose required part is absent, or fails it under REIGNPIPE_STRICT=1
// (make test), so nothing passes by not running.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	missing(t, true, format, args...)
}

func missing(t testing.TB, strict bool, format string, args ...any) {
	t.Helper()
	if strict && os.Getenv("REIGNPIPE_STRICT") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// SharedDataDir is the shared data root: REIGNPIPE_SHARED_DATA when set (.ci/run points it at
// an empty folder for one pass, so that a fresh clone's behaviour is tested too), else
// ../shared/data beside the repository. It may not exist: use SharedData to require a file.
func SharedDataDir() string {
	if dir := os.Getenv("REIGNPIPE_SHARED_DATA"); dir != "" {
		return dir
	}
	return filepath.Join(Root(), "..", "shared", "data")
}

// SharedData returns SharedDataDir()/<rel>, skipping the test when it is absent (shared data is
// never copied into the repository, so it is not strict).
func SharedData(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(SharedDataDir(), rel)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("shared data %s not present (%v); this test reads the real files in ../shared/data", p, err)
	}
	return p
}

// Home is the directory ops/fetch fills (REIGNPIPE_HOME, default ~/.cache/reignpipe).
func Home() string {
	if h := os.Getenv("REIGNPIPE_HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return filepath.Join(h, ".cache", "reignpipe")
}

// Tool returns the path of a command-line tool the suite uses beside its own code (kcat): the
// copy ops/tools unpacked into REIGNPIPE_HOME/tools/bin first, then one on PATH under any of
// names. Missing, it skips (fails under REIGNPIPE_STRICT=1) naming the command that fetches it.
func Tool(t testing.TB, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p := filepath.Join(Home(), "tools", "bin", n); isExecutable(p) {
			return p
		}
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	missing(t, true, "%s not found in %s or on PATH: run ops/tools (make test does)", names[0], filepath.Join(Home(), "tools", "bin"))
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// GN returns the model.onnx and tokenizer.json paths of a fetched GN, e.g. "bge-small-en-v15".
func GN(t testing.TB, name string) (model, tokenizer string) {
	t.Helper()
	dir := filepath.Join(Home(), "gn", name)
	model, tokenizer = filepath.Join(dir, "model.onnx"), filepath.Join(dir, "tokenizer.json")
	for _, p := range []string{model, tokenizer} {
		if _, err := os.Stat(p); err != nil {
			missing(t, true, "GN %s not fetched (%s missing): run ops/fetch", name, p)
		}
	}
	return model, tokenizer
}

// Tokenizer returns only the tokenizer.json of a fetched GN.
func Tokenizer(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Home(), "gn", name, "tokenizer.json")
	if _, err := os.Stat(p); err != nil {
		missing(t, true, "GN %s not fetched (%s missing): run ops/fetch", name, p)
	}
	return p
}

// ORTLibrary returns the path of the fetched ONNX Runtime shared library.
func ORTLibrary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("REIGNPIPE_ORT_LIB"); p != "" {
		return p
	}
	matches, _ := filepath.Glob(filepath.Join(Home(), "ort", "*", "libonnxruntime.so"))
	if len(matches) == 0 {
		missing(t, true, "ONNX Runtime library not fetched under %s/ort: run ops/fetch", Home())
		return ""
	}
	return matches[len(matches)-1]
}

// Python returns a Python interpreter that imports every module named, or skips (fails under
// REIGNPIPE_STRICT=1). REIGNPIPE_PYTHON picks the interpreter (make test points it at the
// project's virtual environment).
func Python(t testing.TB, modules ...string) string {
	t.Helper()
	py := os.Getenv("REIGNPIPE_PYTHON")
	if py == "" {
		py = "python3"
	}
	script := "import " + strings.Join(modules, ", ")
	if out, err := exec.Command(py, "-c", script).CombinedOutput(); err != nil {
		missing(t, true, "python oracle %s cannot import %v: %v\n%s(make test installs them from ops/requirements-test.txt)", py, modules, err, out)
	}
	return py
}
