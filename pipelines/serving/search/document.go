package search

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/jsonl"
	"github.com/reignpipe/reignpipe/connectors/textpolicy"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	"github.com/reignpipe/reignpipe/schemas"
)

// DocOptions say how a query file is read: the way the pipeline's source reads its inputs, so a
// corpus document given as a query gets the same text (and content hash) as its corpus copy.
type DocOptions struct {
	// Sections picks a patent's parts (source.sections of the pipeline); empty = all four.
	Sections []string
	// MaxBytes bounds the query's text (source.max_doc_bytes); 0 = no bound.
	MaxBytes int64
	// Format forces a format: "uspto" (patent XML or .zip), "jsonl" (one JSON document) or
	// "text"; "" picks by the file name (.xml/.zip, .jsonl/.json/.ndjson, anything else text).
	Format string
}

// Formats are the query document formats.
var Formats = []string{"uspto", "jsonl", "text"}

// ReadDocument reads one query document from path. A patent XML or JSONL file must hold exactly
// one document: a query is one document, and taking the first of many silently would answer a
// question that was not asked.
func ReadDocument(path string, o DocOptions) (schemas.Document, error) {
	format := o.Format
	if format == "" {
		format = formatOf(path)
	}
	switch format {
	case "uspto":
		return single(path, func() (connectors.Source, error) {
			return uspto.Open(uspto.Options{Path: path, Sections: o.Sections, MaxDocBytes: 2 * o.MaxBytes})
		})
	case "jsonl":
		return single(path, func() (connectors.Source, error) {
			line := 0
			if o.MaxBytes > 0 {
				line = int(o.MaxBytes) + 1<<20
			}
			return jsonl.Open(jsonl.Options{Path: path, MaxLineBytes: line})
		})
	case "text":
		f, err := os.Open(path)
		if err != nil {
			return schemas.Document{}, err
		}
		defer f.Close()
		return TextDocument(f, "query:"+filepath.Base(path), filepath.Base(path), o.MaxBytes)
	}
	return schemas.Document{}, fmt.Errorf("query format %q is not %s", format, strings.Join(Formats, ", "))
}

func formatOf(path string) string {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".xml", ".zip":
		return "uspto"
	case ".jsonl", ".json", ".ndjson":
		return "jsonl"
	}
	return "text"
}

// TextDocument reads plain text (a file, stdin or a request body) as a document with the given
// id and title, through the same text policy the sources apply (invalid UTF-8 and control
// characters), so its content hash is the one a source would give the same text.
func TextDocument(r io.Reader, id, title string, maxBytes int64) (schemas.Document, error) {
	if maxBytes > 0 {
		r = io.LimitReader(r, maxBytes+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return schemas.Document{}, fmt.Errorf("reading %s: %w", id, err)
	}
	if maxBytes > 0 && int64(len(b)) > maxBytes {
		return schemas.Document{}, fmt.Errorf("%s: more than %d bytes of text (source.max_doc_bytes)", id, maxBytes)
	}
	text := string(b)
	if !utf8.ValidString(text) || strings.ContainsFunc(text, isControl) {
		text = textpolicy.Clean(text, textpolicy.Counts{})
	}
	if textpolicy.IsBlank(text) {
		return schemas.Document{}, fmt.Errorf("%s: no text", id)
	}
	return schemas.Document{ID: id, Source: "query", Title: title, Text: text}, nil
}

func isControl(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' && r != '\r' }

// single reads the one document of a file source.
func single(path string, open func() (connectors.Source, error)) (schemas.Document, error) {
	src, err := open()
	if err != nil {
		return schemas.Document{}, err
	}
	defer src.Close(context.Background())
	ctx := context.Background()
	var docs []schemas.Document
	for len(docs) < 2 {
		d, ack, err := src.Read(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil { // a bad input too: the query is the one document asked for
			return schemas.Document{}, fmt.Errorf("query file %s: %w", path, err)
		}
		if ack != nil {
			_ = ack(ctx, nil)
		}
		docs = append(docs, d)
	}
	switch len(docs) {
	case 0:
		st := src.Stats()
		return schemas.Document{}, fmt.Errorf("query file %s holds no document (skipped: %v)", path, st.Skipped)
	case 1:
		return docs[0], nil
	}
	return schemas.Document{}, fmt.Errorf("query file %s holds more than one document; a query is one document (split the file, or pass one line with --text -)", path)
}
