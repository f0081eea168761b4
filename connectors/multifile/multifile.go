// Package multifile reads a set of input files (a glob such as "feed/ipg*.zip", or a
// directory) as one source, file after file in name order, so a backfill of a folder of weekly
// files is one run with one checkpoint. Name order is what makes resuming by input ordinal
// safe: dated file names (ipgYYMMDD) sort chronologically, and files added later sort last.
package multifile

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/schemas"
)

// OpenFunc opens one file (a local path or an s3:// object) as a source; ctx is the Read call's
// that reaches the file, and bounds the requests made for it.
type OpenFunc func(ctx context.Context, path string) (connectors.Source, error)

// Source chains the sources of several files.
type Source struct {
	open    OpenFunc
	files   []string
	sizes   []int64
	next    int
	cur     connectors.Source
	done    connectors.SourceStats // files finished
	total   int64
	curSize int64
}

// Open reads every file path names with open, in name order: a directory's (or an s3://
// prefix's) files, a glob's matches, or the path itself (objstore.Store.List). st reaches
// s3:// paths (nil: local only).
func Open(ctx context.Context, st *objstore.Store, path string, open OpenFunc) (*Source, error) {
	if open == nil {
		return nil, errors.New("multifile: no OpenFunc")
	}
	if st == nil {
		st = objstore.Local
	}
	objs, err := st.List(ctx, path)
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		isDir, _ := st.IsDir(ctx, path)
		return nil, &NoInputError{Path: path, EmptyDir: isDir}
	}
	s := &Source{open: open, done: connectors.SourceStats{Skipped: map[string]int64{}}}
	for _, o := range objs {
		s.files, s.sizes = append(s.files, o.Path), append(s.sizes, o.Size)
		s.total += o.Size
	}
	return s, nil
}

// NoInputError is a path that names no file: nothing matches it, or it is an empty folder.
// Its message has no package prefix: the caller names the setting the path came from.
type NoInputError struct {
	Path     string
	EmptyDir bool
}

func (e *NoInputError) Error() string {
	if e.EmptyDir {
		return fmt.Sprintf("the folder %q holds no input files", e.Path)
	}
	return fmt.Sprintf("no input file matches %q", e.Path)
}

// Files are the inputs, in reading order.
func (s *Source) Files() []string { return s.files }

// Read returns the next document of the current file, moving to the next file at its end.
func (s *Source) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	for {
		if s.cur == nil {
			if s.next >= len(s.files) {
				return schemas.Document{}, nil, io.EOF
			}
			f, size := s.files[s.next], s.sizes[s.next]
			s.next++
			src, err := s.open(ctx, f)
			if err != nil {
				return schemas.Document{}, nil, fmt.Errorf("%s: %w", f, err)
			}
			s.cur = src
			s.curSize = size
		}
		doc, ack, err := s.cur.Read(ctx)
		if !errors.Is(err, io.EOF) {
			return doc, ack, err
		}
		st := s.cur.Stats()
		s.done.Read += st.Read
		for k, v := range st.Skipped {
			s.done.Skipped[k] += v
		}
		s.done.Add(connectors.SourceStats{Text: st.Text})
		s.done.BytesRead += s.curSize
		cerr := s.cur.Close(ctx)
		s.cur = nil
		if cerr != nil {
			return schemas.Document{}, nil, cerr
		}
	}
}

// Stats adds the finished files' counts to the current file's.
func (s *Source) Stats() connectors.SourceStats {
	out := connectors.SourceStats{Read: s.done.Read, Skipped: map[string]int64{}, BytesRead: s.done.BytesRead, BytesTotal: s.total}
	for k, v := range s.done.Skipped {
		out.Skipped[k] = v
	}
	out.Add(connectors.SourceStats{Text: s.done.Text})
	if s.cur != nil {
		st := s.cur.Stats()
		out.Read += st.Read
		for k, v := range st.Skipped {
			out.Skipped[k] += v
		}
		out.Add(connectors.SourceStats{Text: st.Text})
		// The current file's own byte counts may be in other units (e.g. uncompressed zip
		// members); scale them to its size on disk.
		if st.BytesTotal > 0 {
			out.BytesRead += int64(float64(s.curSize) * float64(st.BytesRead) / float64(st.BytesTotal))
		}
	}
	return out
}

// Close closes the current file's source.
func (s *Source) Close(ctx context.Context) error {
	if s.cur == nil {
		return nil
	}
	err := s.cur.Close(ctx)
	s.cur = nil
	return err
}
