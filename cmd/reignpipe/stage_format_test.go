package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/schemas"
)

// TestStageJSONVectorSink: a process stage with two kafka sinks, one rpdv and one with
// format: json, on the real broker and GN. kafka-python reads the JSON topic and finds the very
// vectors of the RPDV topic; a document whose title makes its JSON record larger than
// max_record_bytes reaches the RPDV topic (fragmented) but not the JSON one, and is on the
// dead-letter topic under stage "sink" with the reason, beside the corpus's broken line.
func TestStageJSONVectorSink(t *testing.T) {
	s := newStageSetup(t)
	input, ids := stageCorpus(t, s.dir, 6)
	big, _ := json.Marshal(map[string]string{"id": "huge-title", "title": strings.Repeat("t", 300_000), "text": "a short text about ovens"})
	f, err := os.OpenFile(input, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(append(big, '\n'))
	f.Close()
	jsonTopic := s.topics + ".json"
	cfg := s.config(t, "fmt", input, "kafka", fmt.Sprintf("  - {type: kafka}\n  - {type: kafka, format: json, topic: %q}", jsonTopic))

	if err := s.start(t, "ingest", "ingest", "--idle-exit", "3s", cfg).Wait(); err != nil {
		t.Fatalf("ingest: %v", err)
	}
	proc := s.start(t, "process", "process", cfg)
	rpdv, _ := readVectors(t, s.brokers, s.topics+".vectors", append(ids, "t:huge-title"), 3*time.Minute, nil)
	stop(t, "process", proc)

	py := testenv.Python(t, "kafka", "zstandard")
	cmd := exec.Command(py, filepath.Join(testenv.Root(), "ops", "oracles", "kafka_vectors.py"), s.brokers, jsonTopic, fmt.Sprint(len(ids)), "60", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kafka_vectors.py: %v\n%s", err, stderr.String())
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			DocID       string    `json:"doc_id"`
			Key         string    `json:"key"`
			Space       string    `json:"space"`
			Title       string    `json:"title"`
			ContentHash uint64    `json:"content_hash"`
			NChunks     int       `json:"n_chunks"`
			NTokens     int       `json:"n_tokens"`
			Vector      []float32 `json:"vector"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("kafka_vectors.py line %q: %v", line, err)
		}
		w, ok := rpdv[r.DocID]
		if !ok || r.DocID == "t:huge-title" || r.Key != r.DocID || r.Space != w.Space || r.Title != w.Title || r.ContentHash != w.ContentHash ||
			r.NChunks != w.NChunks || r.NTokens != w.NTokens || len(r.Vector) != len(w.Vector) {
			t.Fatalf("json topic: %s (key %s, space %s, dim %d); rpdv topic: %+v", r.DocID, r.Key, r.Space, len(r.Vector), w)
		}
		for i := range w.Vector {
			if math.Float32bits(r.Vector[i]) != math.Float32bits(w.Vector[i]) {
				t.Fatalf("%s: component %d is %v in the json topic, %v in the rpdv topic", r.DocID, i, r.Vector[i], w.Vector[i])
			}
		}
		n++
	}

	kcat := testenv.Tool(t, "kcat", "kafkacat")
	dl, err := exec.Command(kcat, "-C", "-b", s.brokers, "-t", s.topics+".deadletter", "-e", "-q", "-f", "%s\n").Output()
	if err != nil {
		t.Fatalf("kcat: %v", err)
	}
	stages := map[string]schemas.DeadLetterRecord{}
	for _, line := range strings.Split(strings.TrimSpace(string(dl)), "\n") {
		var r schemas.DeadLetterRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("dead letter %q: %v", line, err)
		}
		stages[r.Stage] = r
	}
	sink, ok := stages["sink"]
	if len(stages) != 2 || stages["source"].Stage == "" || !ok || sink.DocID != "t:huge-title" ||
		!strings.HasSuffix(sink.Error, "exceeds transport.kafka.max_record_bytes=262144; format json is never fragmented") {
		t.Fatalf("dead letters %s", dl)
	}
	t.Logf("json topic: %d vectors identical to the rpdv topic's; dead letter: %s", n, sink.Error)
}
