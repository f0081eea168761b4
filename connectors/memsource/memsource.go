// Package memsource is a Source over documents already in memory: an evaluation or training
// dataset, or a test's fixture. It hands them out in order under the same rules as the file
// sources (ids prefixed by the source name, the text policy applied and counted, blank texts
// skipped unless kept), so a dataset does not have to be written to JSONL and parsed back.
package memsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/textpolicy"
	"github.com/reignpipe/reignpipe/schemas"
)

// Doc is one input: its id within the source, and its title and text.
type Doc struct {
	ID, Title, Text, Version string
}

// Options configure New.
type Options struct {
	// Source names the documents: a document's id is "<Source>:<Doc.ID>". Required.
	Source string
	// Len and At give the documents (At is called once per index, in order, from the reading
	// goroutine), so a dataset is not copied.
	Len int
	At  func(i int) Doc
	// KeepEmpty hands out documents whose text is blank instead of skipping them as "empty".
	KeepEmpty bool
}

// Source is safe for Stats from any goroutine; Read is called from one at a time.
type Source struct {
	opts    Options
	tally   connectors.Tally
	scratch textpolicy.Counts // Read's goroutine only
	mu      sync.Mutex        // guards next and closed
	next    int
	closed  bool
}

var (
	_ connectors.Source            = (*Source)(nil)
	_ connectors.SelfCheckpointing = (*Source)(nil)
)

// New validates opts and returns the source.
func New(opts Options) (*Source, error) {
	switch {
	case opts.Source == "" || strings.ContainsAny(opts.Source, ":\n\r\x00"):
		return nil, fmt.Errorf("memsource: Source %q must be non-empty, without ':' or control characters", opts.Source)
	case opts.Len < 0:
		return nil, fmt.Errorf("memsource: Len %d must not be negative", opts.Len)
	case opts.Len > 0 && opts.At == nil:
		return nil, errors.New("memsource: At is required when Len > 0")
	}
	return &Source{opts: opts, scratch: textpolicy.Counts{}}, nil
}

func noAck(context.Context, error) error { return nil }

// Read hands out the next document; an id that cannot name a document (empty, or holding a
// line break or NUL) is a bad input.
func (s *Source) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	for {
		if err := ctx.Err(); err != nil {
			return schemas.Document{}, nil, err
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return schemas.Document{}, nil, errors.New("memsource: source closed")
		}
		if s.next >= s.opts.Len {
			s.mu.Unlock()
			return schemas.Document{}, nil, io.EOF
		}
		i := s.next
		s.next++
		s.mu.Unlock()

		d := s.opts.At(i)
		pos := fmt.Sprintf("%s document %d", s.opts.Source, i+1)
		if err := schemas.CheckID(d.ID); err != nil {
			return schemas.Document{}, noAck, &connectors.BadInputError{Position: pos, Reason: err}
		}
		text, title := textpolicy.Clean(d.Text, s.scratch), textpolicy.Clean(d.Title, s.scratch)
		s.tally.Text(s.scratch)
		if !s.opts.KeepEmpty && textpolicy.IsBlank(text) {
			s.tally.Skip("empty")
			continue
		}
		s.tally.Read()
		return schemas.Document{
			ID: s.opts.Source + ":" + d.ID, Source: s.opts.Source, Version: d.Version, Title: title, Text: text,
		}, noAck, nil
	}
}

// SelfCheckpointing is true: the runner must not resume by skipping the documents an earlier
// run committed, because a dataset in memory carries no stamp to tell whether it is the same one.
// Every run reads every document again; the chunk cache makes that cheap. (The runner also takes
// an empty self-checkpointing source as up to date rather than as a wrong path: the caller of a
// memory source knows what it handed in.)
func (s *Source) SelfCheckpointing() bool { return true }

// Stats counts documents handed out, blank ones skipped and text repairs.
func (s *Source) Stats() connectors.SourceStats { return s.tally.Stats(0, 0) }

// Close ends reading; the documents are the caller's and stay as they are.
func (s *Source) Close(context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}
