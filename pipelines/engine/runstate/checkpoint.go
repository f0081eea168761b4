// Package runstate is what a pipeline run keeps in its state directory between runs, the same
// for the embedded runner and the distributed stages: the source checkpoint (which leading
// inputs of which files are done) and the atomic write every state file goes through.
package runstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/internal/objstore"
)

// Checkpoint is the persisted source position of one pipeline: how many leading inputs of
// which source are done. It is rewritten atomically (temp file, fsync, rename) at every commit.
//
// The watermark counts inputs in reading order, so it means something only while the inputs
// before it are the same ones: Files stamps every file the source reads (a directory's or a
// glob's files in name order, or the one file), and Resume keeps the watermark only when those
// files are still there, unchanged, at the head of the list. Files added after them (a feed's
// new weekly file) keep it; a file that sorts earlier, a changed or removed file restart.
type Checkpoint struct {
	Pipeline   string      `json:"pipeline"`
	Source     string      `json:"source"`      // the input path, as configured
	SourceSize int64       `json:"source_size"` // of a single-file input; kept for older checkpoints
	Files      []InputFile `json:"files,omitempty"`
	Watermark  int64       `json:"watermark"`
	Updated    time.Time   `json:"updated"`
}

// InputFile is one file a source reads, as the checkpoint saw it.
type InputFile struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

// StampFiles stamps the files (or objects) a source will read, in reading order.
func StampFiles(objs []objstore.Object) []InputFile {
	out := make([]InputFile, 0, len(objs))
	for _, o := range objs {
		out = append(out, InputFile{Name: o.Path, Size: o.Size})
	}
	return out
}

// Resume makes c the checkpoint of source reading files: its watermark is kept when it still
// counts the same leading inputs, else zeroed with the reason (for the log). The caller saves it.
func (c *Checkpoint) Resume(pipeline, source string, files []InputFile) (reason string) {
	switch {
	case c.Watermark == 0:
	case c.Source != source:
		reason = fmt.Sprintf("checkpoint is for input %q", c.Source)
	case c.Files == nil && !(len(files) == 1 && files[0].Size == c.SourceSize):
		reason = "checkpoint does not record the input's files"
	case len(c.Files) > len(files):
		reason = fmt.Sprintf("input had %d files at the checkpoint, now %d", len(c.Files), len(files))
	default:
		for i, f := range c.Files {
			if files[i] != f {
				reason = fmt.Sprintf("file %d was %s (%d bytes), now %s (%d bytes)", i+1, f.Name, f.Size, files[i].Name, files[i].Size)
				break
			}
		}
	}
	if reason != "" {
		c.Watermark = 0
	}
	c.Pipeline, c.Source, c.Files = pipeline, source, files
	c.SourceSize = -1
	if len(files) == 1 {
		c.SourceSize = files[0].Size
	}
	return reason
}

// CheckpointPath is where a pipeline's checkpoint lives in its state directory.
func CheckpointPath(stateDir, pipeline string) string {
	return filepath.Join(stateDir, pipeline+".checkpoint.json")
}

// LoadCheckpoint returns the checkpoint at path, or a zero one when there is none.
func LoadCheckpoint(path string) (Checkpoint, error) {
	var c Checkpoint
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("checkpoint %s is corrupt (%v); remove it or run with --from-scratch", path, err)
	}
	return c, nil
}

// Save writes the checkpoint atomically.
func (c Checkpoint) Save(path string) error {
	c.Updated = time.Now().UTC()
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, data)
}

// WriteFileAtomic makes data visible at path only when complete.
func WriteFileAtomic(path string, data []byte) error { return atomicfile.Write(path, data) }
