package replica

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
)

// CheckpointName is the file, inside the cache directory, that records the topic offsets the
// store has applied (Kafka Streams' .checkpoint). It lives with the store it describes: a wiped
// directory loses both, and the replica restores from the start of the topics.
const CheckpointName = "replica.checkpoint.json"

// checkpoint is the file's content: per topic, per partition, the next offset to apply.
// Written only after the store is flushed, so every offset before it is durable in the store.
type checkpoint struct {
	Version int                         `json:"version"`
	Offsets map[string]map[string]int64 `json:"offsets"`
}

func checkpointPath(cacheDir string) string { return filepath.Join(cacheDir, CheckpointName) }

func loadCheckpoint(cacheDir string) (map[kafkaclient.TP]int64, error) {
	b, err := os.ReadFile(checkpointPath(cacheDir))
	if errors.Is(err, os.ErrNotExist) {
		return map[kafkaclient.TP]int64{}, nil
	}
	if err != nil {
		return nil, err
	}
	var c checkpoint
	if err := json.Unmarshal(b, &c); err != nil || c.Version != 1 {
		return nil, fmt.Errorf("replica checkpoint %s is damaged (%v); remove it to restore the store from the start of the topics", checkpointPath(cacheDir), err)
	}
	out := map[kafkaclient.TP]int64{}
	for topic, ps := range c.Offsets {
		for p, off := range ps {
			n, err := strconv.Atoi(p)
			if err != nil {
				return nil, fmt.Errorf("replica checkpoint %s: partition %q", checkpointPath(cacheDir), p)
			}
			out[kafkaclient.TP{Topic: topic, Partition: n}] = off
		}
	}
	return out, nil
}

// saveCheckpoint writes the offsets atomically (temp file, fsync, rename, dir fsync).
func saveCheckpoint(cacheDir string, pos map[kafkaclient.TP]int64) error {
	c := checkpoint{Version: 1, Offsets: map[string]map[string]int64{}}
	for tp, off := range pos {
		if c.Offsets[tp.Topic] == nil {
			c.Offsets[tp.Topic] = map[string]int64{}
		}
		c.Offsets[tp.Topic][strconv.Itoa(tp.Partition)] = off
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(checkpointPath(cacheDir), append(b, '\n'))
}
