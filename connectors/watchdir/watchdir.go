// Package watchdir is a continuous source over a directory that a feed fills, e.g. the USPTO
// weekly full-text files: files are picked up as they appear (in name order), read through a
// per-file source, and each file's progress is checkpointed, so a restart resumes mid-file
// without re-emitting the documents that were already acked.
//
// The checkpoint is a JSON state file: for each file, how many of its inputs are acked as a
// contiguous prefix, and whether the file is finished. It is rewritten atomically (temp file,
// fsync, rename) at most once per SaveEvery and on Close. Because acks arrive only after the
// runner made everything derived from an input durable, the state never runs ahead of the
// outputs; it may lag by up to SaveEvery, and what it lags by is read again after a crash
// (at-least-once; outputs are keyed by doc id, so a repeat replaces itself).
//
// A file is read only once it has settled: its size and modification time unchanged for
// Settle. A feed that copies files in place would otherwise be read while half written, and
// the half read to the end would be marked finished. Writing elsewhere and renaming into the
// directory (or a dot-named temp file, which is ignored) needs no settling at all. A file that
// still changes while it is read is an error: its inputs past the change are not known to be
// read, and marking it finished would lose them.
//
// Dir may be an S3 prefix (s3://bucket/feed/). An object there is listed only once its PUT or
// its multipart upload has completed, and then whole (S3 makes both atomic), so an object is
// read as soon as it is listed, without settling; one replaced while it is read (its ETag
// changed) is the same error as a local file that changed.
package watchdir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/schemas"
)

// Options configure a watcher.
type Options struct {
	Dir     string // a folder, or an s3:// prefix reached through Store
	Pattern string // glob on file names; default "*"
	// Store lists and opens Dir's files (nil: local folders only).
	Store *objstore.Store
	// Open reads one file; ctx is the Read call's that reaches it. Its source must be
	// deterministic: a file is resumed by skipping the inputs already acked.
	Open func(ctx context.Context, path string) (connectors.Source, error)
	// StateFile holds the per-file checkpoint (required).
	StateFile string
	// Poll is how often the directory is listed for new files (default 10s).
	Poll time.Duration
	// Once stops (io.EOF) when every file present is finished, instead of waiting for more:
	// a backfill.
	Once bool
	// SaveEvery bounds how often acks alone rewrite the state file (default 1s); FlushAcks
	// saves at once.
	SaveEvery time.Duration
	// Settle is how long a file's size and modification time must stay unchanged before it
	// is read (default 2s); see the package comment.
	Settle time.Duration
	// now is the clock (tests); nil = time.Now.
	now func() time.Time
}

type fileState struct {
	Acked int64 `json:"acked"` // inputs acked as a contiguous prefix
	// AckedAfter are inputs past the prefix that are acked too (documents finish out of
	// order): a restart skips them as well, so no acked document is emitted twice.
	AckedAfter []int64 `json:"acked_after,omitempty"`
	Finished   bool    `json:"finished"` // read to the end and every input acked
}

type state struct {
	Files map[string]*fileState `json:"files"`
}

// progress tracks one file being read: acks may arrive out of order.
type progress struct {
	name  string
	read  int64          // ordinal of the next input the file's source returns
	done  map[int64]bool // acked ordinals past state.Acked
	eof   bool
	state *fileState
}

// Watcher implements connectors.Source.
type Watcher struct {
	opts Options

	mu       sync.Mutex
	st       state
	active   map[string]*progress // files with inputs handed out and not all acked
	lastSave time.Time
	dirty    bool
	skipped  map[string]int64
	text     connectors.SourceStats // Text counts of finished files
	read     int64

	cur    *progress
	curSrc connectors.Source
	curFI  objstore.Object // the file as it was when it was opened
}

// Open validates the options and loads the state file.
func Open(opts Options) (*Watcher, error) {
	switch {
	case opts.Dir == "":
		return nil, errors.New("watchdir: Dir is required")
	case opts.Open == nil:
		return nil, errors.New("watchdir: Open is required")
	case opts.StateFile == "":
		return nil, errors.New("watchdir: StateFile is required")
	case opts.Poll < 0 || opts.SaveEvery < 0 || opts.Settle < 0:
		return nil, errors.New("watchdir: durations must not be negative")
	}
	if opts.Pattern == "" {
		opts.Pattern = "*"
	}
	if opts.Store == nil {
		opts.Store = objstore.Local
	}
	if err := patternError(opts.Pattern); err != nil {
		return nil, fmt.Errorf("watchdir: pattern %w", err)
	}
	if opts.Poll == 0 {
		opts.Poll = 10 * time.Second
	}
	if opts.SaveEvery == 0 {
		opts.SaveEvery = time.Second
	}
	if opts.Settle == 0 {
		opts.Settle = 2 * time.Second
	}
	if opts.now == nil {
		opts.now = time.Now
	}
	// A prefix needs no object to exist yet: a new feed's bucket is empty until its first upload.
	if fi, err := os.Stat(opts.Dir); !objstore.IsS3(opts.Dir) && (err != nil || !fi.IsDir()) {
		return nil, fmt.Errorf("watchdir: %s is not a directory", opts.Dir)
	}
	w := &Watcher{opts: opts, st: state{Files: map[string]*fileState{}}, active: map[string]*progress{}, skipped: map[string]int64{}}
	data, err := os.ReadFile(opts.StateFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(data, &w.st); err != nil {
			return nil, fmt.Errorf("watchdir: state %s is corrupt: %w", opts.StateFile, err)
		}
		if w.st.Files == nil {
			w.st.Files = map[string]*fileState{}
		}
	}
	return w, nil
}

// nextFile is the first file by name that is not finished, not being read and settled. When
// none is, wait is how long until the first unsettled one may be (0 when there is none).
func (w *Watcher) nextFile(ctx context.Context) (name string, wait time.Duration, err error) {
	objs, err := w.opts.Store.List(ctx, w.opts.Dir)
	if err != nil {
		return "", 0, err
	}
	remote := objstore.IsS3(w.opts.Dir)
	var names []string
	listed := map[string]objstore.Object{}
	for _, o := range objs {
		n := objstore.Base(o.Path)
		if ok, _ := filepath.Match(w.opts.Pattern, n); ok {
			names = append(names, n)
			listed[n] = o
		}
	}
	sort.Strings(names)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range names {
		if fs := w.st.Files[n]; fs != nil && fs.Finished {
			continue
		}
		if p := w.active[n]; p != nil && p.eof {
			continue // read to the end, acks still outstanding
		}
		if remote {
			return n, 0, nil // listed means complete (see the package comment)
		}
		// Files are taken in name order: a later file does not jump an unsettled earlier one.
		fi, err := os.Stat(listed[n].Path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // removed since the listing
			}
			return "", 0, err
		}
		if age := w.opts.now().Sub(fi.ModTime()); age < w.opts.Settle {
			return "", w.opts.Settle - age, nil
		}
		return n, 0, nil
	}
	return "", 0, nil
}

// Read returns the next input; between files it waits for new ones (Poll) unless Once.
func (w *Watcher) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	for {
		if w.curSrc == nil {
			name, settling, err := w.nextFile(ctx)
			if err != nil {
				return schemas.Document{}, nil, err
			}
			if name == "" {
				if w.opts.Once && settling == 0 && w.allAcked() {
					return schemas.Document{}, nil, io.EOF
				}
				wait := w.pollWait()
				if settling > 0 {
					wait = min(wait, settling+time.Millisecond)
				}
				select {
				case <-ctx.Done():
					return schemas.Document{}, nil, ctx.Err()
				case <-time.After(wait):
				}
				continue
			}
			if err := w.startFile(ctx, name); err != nil {
				return schemas.Document{}, nil, err
			}
		}
		doc, _, err := w.curSrc.Read(ctx)
		var bad *connectors.BadInputError
		switch {
		case err == nil, errors.As(err, &bad):
		case errors.Is(err, io.EOF):
			if err := w.endFile(ctx); err != nil {
				return schemas.Document{}, nil, err
			}
			continue
		default:
			return schemas.Document{}, nil, err
		}
		p := w.cur
		w.mu.Lock()
		seq := p.read
		p.read++
		acked := seq < p.state.Acked || p.done[seq]
		if !acked {
			w.read++
		}
		w.mu.Unlock()
		if acked { // acked before a restart: not handed out again
			continue
		}
		ack := func(context.Context, error) error { return w.ack(p, seq) }
		return doc, ack, err
	}
}

func (w *Watcher) pollWait() time.Duration {
	if w.opts.Once {
		return min(w.opts.Poll, 50*time.Millisecond) // only waiting for acks
	}
	return w.opts.Poll
}

func (w *Watcher) allAcked() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.active) == 0
}

func (w *Watcher) startFile(ctx context.Context, name string) error {
	path := objstore.Join(w.opts.Dir, name)
	fi, err := w.opts.Store.Stat(ctx, path)
	if err != nil {
		return fmt.Errorf("watchdir: %s: %w", name, err)
	}
	src, err := w.opts.Open(ctx, path)
	if err != nil {
		return fmt.Errorf("watchdir: %s: %w", name, err)
	}
	w.mu.Lock()
	fs := w.st.Files[name]
	if fs == nil {
		fs = &fileState{}
		w.st.Files[name] = fs
	}
	// Resuming: the acked prefix and the inputs acked past it are skipped as they are read.
	p := &progress{name: name, done: map[int64]bool{}, state: fs}
	for _, seq := range fs.AckedAfter {
		p.done[seq] = true
	}
	w.active[name] = p
	w.mu.Unlock()
	w.cur, w.curSrc, w.curFI = p, src, fi
	return nil
}

// endFile closes the file read to its end and marks it finished once all of it is acked. A
// file that changed since it was opened is not finished: the run stops with an error naming it.
func (w *Watcher) endFile(ctx context.Context) error {
	name := w.cur.name
	now, err := w.opts.Store.Stat(ctx, objstore.Join(w.opts.Dir, name))
	if err == nil && (now.Size != w.curFI.Size || !now.ModTime.Equal(w.curFI.ModTime) || now.ETag != w.curFI.ETag) {
		if objstore.IsS3(w.opts.Dir) {
			return fmt.Errorf("watchdir: %s was replaced while it was read (ETag %s when opened, %s at its end): upload each file once, under a new name",
				now.Path, w.curFI.ETag, now.ETag)
		}
		return fmt.Errorf("watchdir: %s changed while it was read (%d bytes, modified %s, when opened; %d bytes, modified %s, at its end): "+
			"write files elsewhere and rename them into %s, or raise source.settle (now %s)",
			name, w.curFI.Size, w.curFI.ModTime.Format(time.RFC3339Nano), now.Size, now.ModTime.Format(time.RFC3339Nano), w.opts.Dir, w.opts.Settle)
	}
	st := w.curSrc.Stats()
	_ = w.curSrc.Close(ctx)
	w.mu.Lock()
	for k, v := range st.Skipped {
		w.skipped[k] += v
	}
	w.text.Add(connectors.SourceStats{Text: st.Text})
	w.cur.eof = true
	w.finishIfDone(w.cur)
	w.mu.Unlock()
	w.cur, w.curSrc, w.curFI = nil, nil, objstore.Object{}
	return nil
}

// finishIfDone marks a file finished when it was read to the end and all of it is acked.
// Called with w.mu held.
func (w *Watcher) finishIfDone(p *progress) {
	if p.eof && p.state.Acked == p.read {
		p.state.Finished, p.state.AckedAfter = true, nil
		delete(w.active, p.name)
		w.dirty = true
	}
}

func (w *Watcher) ack(p *progress, seq int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	p.done[seq] = true
	w.dirty = true
	for p.done[p.state.Acked] {
		delete(p.done, p.state.Acked)
		p.state.Acked++
		w.dirty = true
	}
	w.finishIfDone(p)
	// A runner that calls FlushAcks persists each committed batch; this bounds the lag for
	// one that does not.
	if w.dirty && time.Since(w.lastSave) >= w.opts.SaveEvery {
		return w.saveLocked()
	}
	return nil
}

// FlushAcks persists the acks received so far.
func (w *Watcher) FlushAcks(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.dirty {
		return nil
	}
	return w.saveLocked()
}

func (w *Watcher) saveLocked() error {
	for _, p := range w.active {
		p.state.AckedAfter = p.state.AckedAfter[:0]
		for seq := range p.done {
			p.state.AckedAfter = append(p.state.AckedAfter, seq)
		}
		slices.Sort(p.state.AckedAfter)
	}
	data, err := json.MarshalIndent(w.st, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(w.opts.StateFile, data); err != nil {
		return fmt.Errorf("watchdir: saving %s: %w", w.opts.StateFile, err)
	}
	w.dirty, w.lastSave = false, time.Now()
	return nil
}

// SelfCheckpointing: the watcher resumes from its state file by itself.
func (w *Watcher) SelfCheckpointing() bool { return true }

// Stats counts inputs handed out in this process and skips by reason.
func (w *Watcher) Stats() connectors.SourceStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := connectors.SourceStats{Read: w.read, Skipped: map[string]int64{}}
	for k, v := range w.skipped {
		s.Skipped[k] = v
	}
	s.Add(connectors.SourceStats{Text: w.text.Text})
	return s
}

// Close closes the current file and saves the state.
func (w *Watcher) Close(ctx context.Context) error {
	var err error
	if w.curSrc != nil {
		err = w.curSrc.Close(ctx)
		w.curSrc = nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dirty {
		err = errors.Join(err, w.saveLocked())
	}
	return err
}
