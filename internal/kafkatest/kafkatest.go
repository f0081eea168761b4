// Package kafkatest gives tests the real Kafka broker that ops/kafka runs (`make test` starts it
// and sets REIGNPIPE_KAFKA_BROKERS). Without a broker a test skips, or fails under
// REIGNPIPE_STRICT=1, so nothing Kafka-related passes by not running.
//
// Every test package shares the one broker, and `go test ./...` runs packages at the same time.
// Hence the lock: Brokers holds it shared for the test's lifetime, while Restart, Kill and Start
// hold it exclusively, so a test that takes the broker down waits for the tests using it to
// finish, and tests that need it wait until it is back. Topic gives each test its own topic.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// Brokers returns the bootstrap address of the test broker (REIGNPIPE_KAFKA_BROKERS).
func Brokers(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("REIGNPIPE_KAFKA_BROKERS")
	if addr == "" {
		testenv.Missing(t, "REIGNPIPE_KAFKA_BROKERS not set: integration tests against a real Kafka broker run under make test")
	}
	lock.Acquire(t, addr, syscall.LOCK_SH)
	return addr
}

// SecureBroker is the test broker's second listener, which requires TLS and SASL/SCRAM
// (`ops/kafka start --secure`): its address, the CA that signed its certificate, and a SCRAM user.
type SecureBroker struct {
	Brokers, CAFile, User, Password string
}

// Secure returns the secure listener of the test broker (REIGNPIPE_KAFKA_SECURE_BROKERS and the
// rest, which ops/with-kafka exports when the broker has it), holding the broker lock as
// Brokers does. Without it a test skips, or fails under REIGNPIPE_STRICT=1.
func Secure(t testing.TB) SecureBroker {
	t.Helper()
	Brokers(t)
	s := SecureBroker{Brokers: os.Getenv("REIGNPIPE_KAFKA_SECURE_BROKERS"), CAFile: os.Getenv("REIGNPIPE_KAFKA_CA"),
		User: os.Getenv("REIGNPIPE_KAFKA_USER"), Password: os.Getenv("REIGNPIPE_KAFKA_PASSWORD")}
	if s.Brokers == "" || s.CAFile == "" || s.User == "" {
		testenv.Missing(t, "REIGNPIPE_KAFKA_SECURE_BROKERS, _CA and _USER not set: the broker has no TLS + SASL/SCRAM listener (ops/with-kafka starts it with one; a broker kept running needs `ops/kafka restart --secure`)")
	}
	return s
}

// Restart stops the broker and starts it again on the same data.
func Restart(t testing.TB) { disrupt(t, "restart") }

// Kill ends the broker with SIGKILL, as a crash would; the data stays for Start. The broker is
// started again when the test ends, so a test cannot leave it down for the others.
func Kill(t testing.TB) { disrupt(t, "kill") }

// lock is held shared by every test using the broker and exclusively by one taking it down.
var lock = testenv.NewServerLock("kafka")

// Start starts the broker if it is not running (after Kill) and waits until it serves.
func Start(t testing.TB) { disrupt(t, "start") }

func disrupt(t testing.TB, verb string) {
	t.Helper()
	addr := Brokers(t)
	lock.Acquire(t, addr, syscall.LOCK_EX)
	if verb != "start" {
		// Registered after the cleanup that releases the lock, so it runs first: the broker is
		// up again before another test may use it. A start on a running broker costs nothing.
		t.Cleanup(func() {
			if out, err := run(addr, "start"); err != nil {
				t.Errorf("%s start after the test: %v\n%s", Ctl(), err, out)
			}
		})
	}
	ctl(t, addr, verb)
}

// CreateTopic creates a topic with the given number of partitions (replication factor 1). The
// broker does not create topics on first use: code that forgets to create one fails.
func CreateTopic(t testing.TB, name string, partitions int) {
	t.Helper()
	ctl(t, Brokers(t), "topic", "create", name, fmt.Sprint(partitions))
}

var unsafeTopicChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// Topic returns a topic name no other test uses: the prefix (characters Kafka does not accept in
// a name become '_') and a random suffix.
func Topic(t testing.TB, prefix string) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return unsafeTopicChars.ReplaceAllString(prefix, "_") + "-" + hex.EncodeToString(b)
}

// Ctl is the ops/kafka script that runs the broker (REIGNPIPE_KAFKA_CTL, else the repository's).
func Ctl() string {
	if p := os.Getenv("REIGNPIPE_KAFKA_CTL"); p != "" {
		return p
	}
	return filepath.Join(testenv.Root(), "ops", "kafka")
}

func ctl(t testing.TB, addr string, args ...string) {
	t.Helper()
	if out, err := run(addr, args...); err != nil {
		t.Fatalf("%s %s: %v\n%s", Ctl(), strings.Join(args, " "), err, out)
	}
}

func run(addr string, args ...string) ([]byte, error) {
	// A restart on a 2-core machine takes about 15s; the limit is for a broker that hangs.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, Ctl(), args...)
	cmd.Env = os.Environ()
	// ops/kafka must act on the broker the tests were given, whatever its default port.
	first, _, _ := strings.Cut(addr, ",")
	if _, port, err := net.SplitHostPort(first); err == nil {
		cmd.Env = append(cmd.Env, "REIGNPIPE_KAFKA_PORT="+port)
	}
	return cmd.CombinedOutput()
}
