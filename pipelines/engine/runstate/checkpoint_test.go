package runstate

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/reignpipe/reignpipe/internal/objstore"
)

// The watermark counts inputs in reading order: it survives only while the files it was counted
// over are unchanged at the head of the input's files.
func TestCheckpointResume(t *testing.T) {
	a, b, c := InputFile{"feed/a.xml", 10}, InputFile{"feed/b.xml", 20}, InputFile{"feed/c.xml", 30}
	early := InputFile{"feed/0.xml", 5}
	for _, tc := range []struct {
		name   string
		ck     Checkpoint
		files  []InputFile
		resume bool
	}{
		{"same files", Checkpoint{Source: "feed", Files: []InputFile{a, b}, Watermark: 7}, []InputFile{a, b}, true},
		{"file added after", Checkpoint{Source: "feed", Files: []InputFile{a, b}, Watermark: 7}, []InputFile{a, b, c}, true},
		{"file added before", Checkpoint{Source: "feed", Files: []InputFile{a, b}, Watermark: 7}, []InputFile{early, a, b}, false},
		{"file grew", Checkpoint{Source: "feed", Files: []InputFile{a, b}, Watermark: 7}, []InputFile{a, {b.Name, 21}}, false},
		{"file removed", Checkpoint{Source: "feed", Files: []InputFile{a, b}, Watermark: 7}, []InputFile{b}, false},
		{"other input", Checkpoint{Source: "other", Files: []InputFile{a, b}, Watermark: 7}, []InputFile{a, b}, false},
		// A directory once stamped by its own size (4096) and a glob by -1 must not resume.
		{"old checkpoint of a directory", Checkpoint{Source: "feed", SourceSize: 4096, Watermark: 7}, []InputFile{a, b}, false},
		{"old checkpoint of a glob", Checkpoint{Source: "feed", SourceSize: -1, Watermark: 7}, []InputFile{a}, false},
		{"old checkpoint of one file", Checkpoint{Source: "feed", SourceSize: 10, Watermark: 7}, []InputFile{a}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ck := tc.ck
			why := ck.Resume("p", "feed", tc.files)
			if resumed := ck.Watermark == 7; resumed != tc.resume || (why == "") != tc.resume {
				t.Fatalf("watermark %d, reason %q; want resume %v", ck.Watermark, why, tc.resume)
			}
			if len(ck.Files) != len(tc.files) || ck.Source != "feed" || ck.Pipeline != "p" {
				t.Fatalf("checkpoint not re-stamped: %+v", ck)
			}
		})
	}
}

func TestCheckpointStampRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a.jsonl", "b.jsonl"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := objstore.Local.List(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	files := StampFiles(objs)
	if len(files) != 2 || files[1].Size != 7 || files[0].Name != filepath.Join(dir, "a.jsonl") {
		t.Fatalf("StampFiles = %v", files)
	}
	path := CheckpointPath(dir, "p")
	ck := Checkpoint{Watermark: 3}
	ck.Resume("p", dir, files)
	ck.Watermark = 3
	if err := ck.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := LoadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if why := got.Resume("p", dir, files); why != "" || got.Watermark != 3 {
		t.Fatalf("reloaded checkpoint does not resume: %q, watermark %d", why, got.Watermark)
	}
}
