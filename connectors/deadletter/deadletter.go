// Package deadletter is the file dead-letter output: one JSON object per failed input, appended
// and fsynced before WriteDeadLetter returns, so an input is acked only once its failure record
// is durable.
package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/reignpipe/reignpipe/schemas"
)

// File appends dead letters to a JSONL file.
type File struct {
	mu   sync.Mutex
	f    *os.File
	path string
	n    int64
}

// Open creates (or appends to) the dead-letter file.
func Open(path string) (*File, error) {
	if path == "" {
		return nil, errors.New("deadletter: empty path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	return &File{f: f, path: path}, nil
}

// WriteDeadLetter appends one record and fsyncs.
func (d *File) WriteDeadLetter(_ context.Context, dl schemas.DeadLetter) error {
	line, err := json.Marshal(dl.Record(time.Now()))
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return errors.New("deadletter: closed")
	}
	if _, err := d.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("deadletter %s: %w", d.path, err)
	}
	d.n++
	return d.f.Sync()
}

// Count is the number of records written by this process.
func (d *File) Count() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

// Close closes the file.
func (d *File) Close(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return nil
	}
	err := d.f.Close()
	d.f = nil
	return err
}
