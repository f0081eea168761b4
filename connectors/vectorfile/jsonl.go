package vectorfile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/schemas"
)

// JSONLOptions configure NewJSONL.
type JSONLOptions struct {
	Dir string // a folder, or an s3:// prefix opened through Store
	// Store reaches an s3:// Dir (the pipeline's s3 section); nil: local folders only.
	Store *objstore.Store
}

// jsonVector is one line. content_hash is a 16-digit lower-case hex string because JSON
// numbers are doubles in most readers and would silently lose the low bits of a uint64.
// Vector components are written as the shortest decimal that parses back to the same float32.
// deleted is false on a vector's line (always written, so a reader that infers the fields
// from the first lines sees it) and true on a deletion's tombstone, whose line has doc_id,
// source and version, title and space "", the counts 0, content_hash 16 zeros and an empty
// vector. Lines of parts written before deletions existed have no deleted field: all live.
type jsonVector struct {
	DocID       string    `json:"doc_id"`
	Title       string    `json:"title"`
	Source      string    `json:"source"`
	Version     string    `json:"version"`
	NChunks     int       `json:"n_chunks"`
	NTokens     int       `json:"n_tokens"`
	ContentHash string    `json:"content_hash"`
	Space       string    `json:"space"`
	Vector      []float32 `json:"vector"`
	GNSpace     string    `json:"gn_space,omitempty"`
	GNVector    []float32 `json:"gn_vector,omitempty"`
	Deleted     bool      `json:"deleted"`
}

// JSONLSink writes part-<seq>.jsonl files, one JSON object per line. Use from one goroutine at
// a time.
type JSONLSink struct {
	fileCounts
	partSeq
	part *partFile
	line bytes.Buffer
	enc  *json.Encoder
	sinkState
}

var _ connectors.Sink = (*JSONLSink)(nil)

// NewJSONL opens a JSONL sink on opts.Dir, continuing its part sequence.
func NewJSONL(opts JSONLOptions) (*JSONLSink, error) {
	ps, err := newPartSeq(opts.Store, opts.Dir)
	if err != nil {
		return nil, err
	}
	s := &JSONLSink{partSeq: ps}
	s.enc = json.NewEncoder(&s.line)
	s.enc.SetEscapeHTML(false)
	return s, nil
}

// Write appends v to the current part. NaN and ±Inf components are refused: JSON cannot
// carry them.
func (s *JSONLSink) Write(ctx context.Context, v schemas.DocVector) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	for i, x := range v.Vector {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("vectorfile: %s: vector[%d] is %v, which JSON cannot represent", v.DocID, i, x)
		}
	}
	return s.counted(connectors.CountWritten, s.append(ctx, jsonVector{
		DocID: v.DocID, Title: v.Title, Source: v.Source, Version: v.Version, NChunks: v.NChunks,
		NTokens: v.NTokens, ContentHash: fmt.Sprintf("%016x", v.ContentHash), Space: v.Space, Vector: v.Vector,
		GNSpace: v.GNSpace, GNVector: v.GNVector,
	}))
}

// Delete appends the deletion's tombstone line (jsonVector says its fields); like Write it is
// visible after the next Flush.
func (s *JSONLSink) Delete(ctx context.Context, d schemas.Deletion) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if d.DocID == "" {
		return errors.New("vectorfile: a deletion without a doc id")
	}
	return s.counted(connectors.CountDeleted, s.append(ctx, jsonVector{DocID: d.DocID, Source: d.Source, Version: d.Version,
		ContentHash: fmt.Sprintf("%016x", 0), Vector: []float32{}, Deleted: true}))
}

// append writes one line to the current part, starting one if needed.
func (s *JSONLSink) append(ctx context.Context, j jsonVector) error {
	// Encoding into a buffer first means a failed encode never leaves half a line in the part.
	s.line.Reset()
	if err := s.enc.Encode(j); err != nil {
		return fmt.Errorf("vectorfile: %s: %w", j.DocID, err)
	}
	if s.part == nil {
		p, err := s.create(ctx, extJSONL)
		if err != nil {
			return s.fail(err)
		}
		s.part = p
	}
	if _, err := s.part.w.Write(s.line.Bytes()); err != nil {
		return s.fail(fmt.Errorf("vectorfile: %w", err))
	}
	return nil
}

func (s *JSONLSink) fail(err error) error {
	if s.part != nil {
		s.part.abort()
		s.part = nil
	}
	s.err = err
	return err
}

// Flush makes the current part visible; the next Write starts a new one.
func (s *JSONLSink) Flush(ctx context.Context) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if s.part == nil {
		return nil
	}
	err := s.part.commit(ctx)
	s.part = nil
	if err != nil {
		return s.fail(err)
	}
	s.seq++
	s.counts.Commit()
	return nil
}

// Close flushes.
func (s *JSONLSink) Close(ctx context.Context) error {
	if s.closed {
		return nil
	}
	var err error
	if s.err == nil {
		err = s.Flush(ctx)
	}
	if err != nil || s.err != nil {
		err = errors.Join(err, s.fail(s.err))
	}
	s.closed = true
	return err
}

// readJSONLPart streams one part. Parts are only visible complete, so any bad line is
// corruption and an error.
func readJSONLPart(ctx context.Context, dir folder, path string, fn func(schemas.DocVector, bool) error) error {
	// Checked before any record is handed out, so a damaged part yields nothing.
	if err := verifySum(ctx, dir, path); err != nil {
		return err
	}
	f, err := dir.open(ctx, path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	for line := 1; ; line++ {
		var j jsonVector
		if err := dec.Decode(&j); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("vectorfile: %s: record %d: %w", path, line, err)
		}
		v, err := j.docVector()
		if err != nil {
			return fmt.Errorf("vectorfile: %s: record %d: %w", path, line, err)
		}
		if err := fn(v, j.Deleted); err != nil {
			return err
		}
	}
}

func (j *jsonVector) docVector() (schemas.DocVector, error) {
	if j.DocID == "" {
		return schemas.DocVector{}, errors.New("missing doc_id")
	}
	if len(j.ContentHash) != 16 {
		return schemas.DocVector{}, fmt.Errorf("content_hash %q is not 16 hex digits", j.ContentHash)
	}
	h, err := strconv.ParseUint(j.ContentHash, 16, 64)
	if err != nil {
		return schemas.DocVector{}, fmt.Errorf("content_hash %q: %w", j.ContentHash, err)
	}
	if j.Deleted {
		return schemas.DocVector{DocID: j.DocID, Source: j.Source, Version: j.Version}, nil
	}
	return schemas.DocVector{
		DocID: j.DocID, Title: j.Title, Source: j.Source, Version: j.Version, ContentHash: h,
		NChunks: j.NChunks, NTokens: j.NTokens, Space: j.Space, Vector: j.Vector,
		GNSpace: j.GNSpace, GNVector: j.GNVector,
	}, nil
}
