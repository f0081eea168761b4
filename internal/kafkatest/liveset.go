package kafkatest

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// Live is one document a vector topic still holds once compacted.
type Live struct {
	Version     string `json:"version"`
	ContentHash uint64 `json:"content_hash"`
	Space       string `json:"space"`
}

// LiveSet reads a vector topic of the given format (rpdv, json, connect-json) with kafka-python
// as compaction leaves it, through ops/oracles/kafka_live_set.py: doc id → the last record of
// that key, the keys whose last record is a tombstone left out. A reader that is not reignpipe
// and decodes from schemas/WIRE.md alone.
func LiveSet(t testing.TB, brokers, topic, format string) map[string]Live {
	t.Helper()
	py := testenv.Python(t, "kafka", "zstandard")
	cmd := exec.Command(py, filepath.Join(testenv.Root(), "ops", "oracles", "kafka_live_set.py"), brokers, topic, format, "60")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kafka_live_set.py %s: %v\n%s", topic, err, stderr.String())
	}
	got := map[string]Live{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		var r struct {
			Live
			Key   string `json:"key"`
			DocID string `json:"doc_id"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Key != r.DocID {
			t.Fatalf("kafka_live_set.py line %q: %v (the key must be the doc id)", line, err)
		}
		got[r.Key] = r.Live
	}
	t.Logf("kafka_live_set.py %s: %s", topic, strings.TrimSpace(stderr.String()))
	return got
}
