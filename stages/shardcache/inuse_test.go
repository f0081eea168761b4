package shardcache

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestHoldCacheHelper is the other process of TestCacheInUseByAnotherProcess: it opens the
// cache named by SHARDCACHE_HOLD, says so, and keeps it open until its standard input closes.
func TestHoldCacheHelper(t *testing.T) {
	dir := os.Getenv("SHARDCACHE_HOLD")
	if dir == "" {
		t.Skip("run by TestCacheInUseByAnotherProcess")
	}
	c, err := Open(Options{Dir: dir, Fingerprint: "gn-test@abc123", Dim: testDim, K: 510, S: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	os.Stdout.WriteString("holding\n")
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// A cache another process holds open is refused with a message that names the directory, the
// process holding it and what to do -- not the lock's "resource temporarily unavailable".
func TestCacheInUseByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	cmd, _, stdout := child(t, "TestHoldCacheHelper", "SHARDCACHE_HOLD="+dir)
	if line, _ := stdout.ReadString('\n'); line != "holding\n" {
		t.Fatalf("the other process did not open the cache: %q", line)
	}

	_, err := Open(Options{Dir: dir, Fingerprint: "gn-test@abc123", Dim: testDim, K: 510, S: 256})
	var inUse *InUseError
	if !errors.As(err, &inUse) || !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("open of a held cache: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"the chunk cache at " + dir + " is in use by another reignpipe process (pid " + strconv.Itoa(cmd.Process.Pid) + ": shardcache.test",
		"a running pipeline, stage or materialize", "cache.dir", "search and serve read a cache in use",
	} {
		if !strings.Contains(msg, want) {
			t.Fatalf("%q\ndoes not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "shardcache:") || strings.Contains(msg, "temporarily unavailable") {
		t.Fatalf("%q speaks the lock's language", msg)
	}
}

// child runs this test binary's test run as another process, with env added to its
// environment, and returns it with its standard input and output. When the test ends its
// standard input is closed (the helpers' signal to stop) and it is waited for.
func child(t *testing.T, run string, env ...string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	return cmd, stdin, bufio.NewReader(stdout)
}
