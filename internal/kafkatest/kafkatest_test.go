package kafkatest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// kcat is Debian's librdkafka command-line client: a second, independent client that shows the
// broker serves ordinary Kafka clients, not only the JVM tools that come with it.
func kcat(t *testing.T) string {
	t.Helper()
	return testenv.Tool(t, "kcat", "kafkacat")
}

func runKcat(t *testing.T, bin, stdin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = errors.Join(err, errors.New(strings.TrimSpace(stderr.String())))
	}
	return stdout.String(), err
}

func produce(t *testing.T, bin, brokers, topic, keyed string) {
	t.Helper()
	if _, err := runKcat(t, bin, keyed, "-b", brokers, "-t", topic, "-P", "-K:"); err != nil {
		t.Fatalf("kcat produce to %s: %v", topic, err)
	}
}

// consume returns every record of the topic as key=value, sorted: across partitions the order
// is not defined.
func consume(t *testing.T, bin, brokers, topic string) []string {
	t.Helper()
	out, err := runKcat(t, bin, "", "-b", brokers, "-t", topic, "-C", "-e", "-q", "-o", "beginning", "-f", `%k=%s\n`)
	if err != nil {
		t.Fatalf("kcat consume from %s: %v", topic, err)
	}
	got := strings.Fields(out)
	slices.Sort(got)
	return got
}

func TestKcatRoundTrip(t *testing.T) {
	bin := kcat(t)
	brokers := Brokers(t)
	topic := Topic(t, "kafkatest-kcat")
	CreateTopic(t, topic, 3)

	out, err := runKcat(t, bin, "", "-b", brokers, "-L", "-J", "-t", topic)
	if err != nil {
		t.Fatalf("kcat metadata: %v", err)
	}
	var md struct {
		Topics []struct {
			Topic      string            `json:"topic"`
			Partitions []json.RawMessage `json:"partitions"`
		} `json:"topics"`
	}
	if err := json.Unmarshal([]byte(out), &md); err != nil {
		t.Fatalf("kcat metadata %q: %v", out, err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Topic != topic || len(md.Topics[0].Partitions) != 3 {
		t.Fatalf("metadata for %s: %s, want one topic with 3 partitions", topic, out)
	}

	produce(t, bin, brokers, topic, "k1:v1\nk2:v2\nk3:v3\n")
	if got, want := consume(t, bin, brokers, topic), []string{"k1=v1", "k2=v2", "k3=v3"}; !slices.Equal(got, want) {
		t.Fatalf("consumed %q, want %q", got, want)
	}
}

func TestTopicsAreNotCreatedOnUse(t *testing.T) {
	bin := kcat(t)
	brokers := Brokers(t)
	topic := Topic(t, "kafkatest-absent")
	// A producer asks the broker to create an unknown topic; ours must refuse, so a missing
	// topic is an error and not a topic with the broker's default partition count.
	if _, err := runKcat(t, bin, "k:v\n", "-b", brokers, "-t", topic, "-P", "-K:", "-X", "message.timeout.ms=3000"); err == nil {
		t.Fatalf("producing to the absent topic %s succeeded", topic)
	}
	out, err := runKcat(t, bin, "", "-b", brokers, "-L", "-J")
	if err != nil {
		t.Fatalf("kcat metadata: %v", err)
	}
	if strings.Contains(out, `"`+topic+`"`) {
		t.Fatalf("the broker created %s on first use: %s", topic, out)
	}
}

func TestRestartAndKillKeepData(t *testing.T) {
	bin := kcat(t)
	brokers := Brokers(t)
	topic := Topic(t, "kafkatest-restart")
	CreateTopic(t, topic, 1)

	produce(t, bin, brokers, topic, "a:1\n")
	Restart(t)
	produce(t, bin, brokers, topic, "b:2\n")
	Kill(t)
	Start(t)
	if got, want := consume(t, bin, brokers, topic), []string{"a=1", "b=2"}; !slices.Equal(got, want) {
		t.Fatalf("after a restart and a kill, consumed %q, want %q", got, want)
	}
}

func TestTopicNames(t *testing.T) {
	a, b := Topic(t, "x/y z"), Topic(t, "x/y z")
	if a == b {
		t.Fatalf("two calls gave the same topic %q", a)
	}
	if !strings.HasPrefix(a, "x_y_z-") || unsafeTopicChars.MatchString(a) {
		t.Fatalf("topic %q: want the prefix x_y_z- and only characters Kafka accepts", a)
	}
}
