package embedded

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
)

// Checkpoint is the persisted source position of one pipeline: how many leading inputs of
// which source are done. It is rewritten atomically (temp file, fsync, rename) at every commit.
type Checkpoint struct {
	Pipeline   string    `json:"pipeline"`
	Source     string    `json:"source"`      // the input path
	SourceSize int64     `json:"source_size"` // a different size means a different input
	Watermark  int64     `json:"watermark"`
	Updated    time.Time `json:"updated"`
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
