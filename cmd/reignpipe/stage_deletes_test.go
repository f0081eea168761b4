package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/schemas"
)

// TestStageDeletesReachCompactedTopics: upserts, then deletions and updates, through stage
// ingest (a JSONL file with deletion lines) → the raw topic's tombstones → stage process →
// two kafka sinks (rpdv and connect-json), on the real broker and GN. kafka-python, reading each
// vector topic as compaction leaves it (last record per key, tombstones dropped), sees exactly
// the live documents, each with the content hash of its current text; the stages' summaries
// count the deletions.
func TestStageDeletesReachCompactedTopics(t *testing.T) {
	s := newStageSetup(t)
	input, ids := stageCorpus(t, s.dir, 10)
	cj := s.topics + ".cj"
	sinks := fmt.Sprintf("  - {type: kafka}\n  - {type: kafka, format: connect-json, topic: %q}", cj)
	cfg := s.config(t, "del", input, "kafka", sinks)
	if err := s.start(t, "ingest", "ingest", "--idle-exit", "3s", cfg).Wait(); err != nil {
		t.Fatalf("ingest: %v", err)
	}
	proc := s.start(t, "process", "process", cfg)
	first, _ := readVectors(t, s.brokers, s.topics+".vectors", ids, 3*time.Minute, nil)

	// The second feed: three deletions (one of a document that then comes back with new text),
	// an update, and the deletion of an id never seen.
	changed := map[string]string{"d001": "the document came back with other words after its deletion", "d005": "an updated text for the fifth document"}
	var b strings.Builder
	for _, line := range []map[string]any{
		{"id": "d000", "deleted": true}, {"id": "d001", "deleted": true}, {"id": "d002", "deleted": true},
		{"id": "d001", "title": "doc d001", "text": changed["d001"]},
		{"id": "d005", "title": "doc d005", "text": changed["d005"]},
		{"id": "ghost", "deleted": true},
	} {
		j, _ := json.Marshal(line)
		b.Write(append(j, '\n'))
	}
	input2 := filepath.Join(s.dir, "changes.jsonl")
	if err := os.WriteFile(input2, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg2 := s.config(t, "del2", input2, "kafka", sinks)
	if err := s.start(t, "ingest2", "ingest", "--idle-exit", "3s", cfg2).Wait(); err != nil {
		t.Fatalf("ingest of the changes: %v", err)
	}

	want := map[string]kafkatest.Live{}
	for id, v := range first {
		want[id] = kafkatest.Live{Version: v.Version, ContentHash: v.ContentHash, Space: v.Space}
	}
	delete(want, "t:d000")
	delete(want, "t:d002")
	for id, text := range changed {
		d := schemas.Document{Text: text}
		want["t:"+id] = kafkatest.Live{ContentHash: d.ContentHash(), Space: want["t:d003"].Space}
	}
	// The process stage follows the raw topic: wait until both topics converge.
	var got map[string]kafkatest.Live
	deadline := time.Now().Add(3 * time.Minute)
	for _, topic := range []string{s.topics + ".vectors", cj} {
		format := map[string]string{cj: "connect-json"}[topic]
		if format == "" {
			format = "rpdv"
		}
		for {
			got = kafkatest.LiveSet(t, s.brokers, topic, format)
			if reflect.DeepEqual(got, want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(2 * time.Second)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s as compaction leaves it holds\n%v\nwant\n%v", topic, got, want)
		}
	}
	stop(t, "process", proc)
	for label, wantDeleted := range map[string]string{"ingest2": "4", "process": "4"} {
		log, _ := os.ReadFile(filepath.Join(s.dir, label+".log"))
		m := regexp.MustCompile(`"docs_deleted": (\d+)`).FindAllSubmatch(log, -1)
		if len(m) == 0 || string(m[len(m)-1][1]) != wantDeleted {
			t.Errorf("%s: the summary does not count %s deletions:\n%s", label, wantDeleted, tail(string(log), 3000))
		}
	}
}
