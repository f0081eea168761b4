package deadletter

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/reignpipe/reignpipe/schemas"
)

func TestAppendsDurableRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dl", "dead.jsonl")
	ctx := context.Background()
	for round := 0; round < 2; round++ { // reopening appends, never truncates
		d, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.WriteDeadLetter(ctx, schemas.DeadLetter{DocID: "enwiki:1", Stage: "source", Err: "missing <id>"}); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := d.WriteDeadLetter(ctx, schemas.DeadLetter{}); err == nil {
			t.Fatal("write after close accepted")
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
		var r schemas.DeadLetterRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.DocID != "enwiki:1" || r.Error != "missing <id>" || r.Stage != "source" {
			t.Fatalf("record %+v", r)
		}
	}
	if n != 2 {
		t.Fatalf("%d records, want 2", n)
	}
}
