// Package beir reads and writes the plain BEIR layout: corpus.jsonl, queries.jsonl and
// qrels/<split>.tsv, each optionally gzip-compressed. It is what `reignpipe train` and most
// BEIR tools read, what `reignpipe importdata` and `reignpipe benchdata` write (WriteFiles is
// their one writer), and the types every benchmark reader (pipelines/quality/dataset) returns.
package beir

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/reignpipe/reignpipe/connectors/jsonl"
)

// Doc is one corpus entry.
type Doc struct {
	ID, Title, Text string
}

// Query is one query entry.
type Query struct {
	ID, Text string
}

// Qrels maps query id → corpus id → graded relevance.
type Qrels map[string]map[string]int

// Dataset is one BEIR split held in memory, corpus and queries in file order.
type Dataset struct {
	Corpus  []Doc
	Queries []Query
	Qrels   Qrels
}

// maxLineBytes caps one JSONL line so a corrupt file without newlines fails with an error
// instead of exhausting memory; real BEIR documents are far below this.
const maxLineBytes = 256 << 20

// Load loads the "test" split, the one BEIR reports on.
func Load(dir string) (*Dataset, error) { return LoadSplit(dir, "test") }

// LoadSplit loads corpus.jsonl, queries.jsonl and qrels/<split>.tsv from dir; each may
// instead be gzip-compressed with a .gz suffix.
func LoadSplit(dir, split string) (*Dataset, error) {
	if split == "" || strings.ContainsAny(split, `/\`) {
		return nil, fmt.Errorf("beir: invalid split name %q", split)
	}
	corpus, err := ReadDocs(filepath.Join(dir, "corpus.jsonl"), "corpus")
	if err != nil {
		return nil, err
	}
	qdocs, err := ReadDocs(filepath.Join(dir, "queries.jsonl"), "query")
	if err != nil {
		return nil, err
	}
	ds := &Dataset{Corpus: corpus, Queries: make([]Query, len(qdocs))}
	for i, d := range qdocs {
		ds.Queries[i] = Query{ID: d.ID, Text: d.Text}
	}
	qrels, err := ReadQrels(filepath.Join(dir, "qrels", split+".tsv"))
	if err != nil {
		return nil, err
	}
	ds.Qrels = qrels
	return ds, nil
}

// ReadQrels reads a BEIR qrels TSV file (or path+".gz"): an optional "query-id" header, then
// one "query-id\tcorpus-id\tscore" row per judgement. A pair judged twice is an error.
func ReadQrels(path string) (Qrels, error) {
	qrels := Qrels{}
	first := true
	err := EachFileLine(path, func(line []byte) error {
		s := string(line)
		isHeader := first && strings.HasPrefix(s, "query-id")
		first = false
		if isHeader {
			return nil
		}
		q, d, score, err := ParseQrelsLine(s)
		if err != nil {
			return err
		}
		return qrels.Add(q, d, score)
	})
	if err != nil {
		return nil, err
	}
	return qrels, nil
}

// Add records one judgement; a pair judged twice is an error because the two grades may
// disagree and either choice would silently change the metrics.
func (q Qrels) Add(queryID, corpusID string, score int) error {
	row := q[queryID]
	if row == nil {
		row = map[string]int{}
		q[queryID] = row
	}
	if _, dup := row[corpusID]; dup {
		return fmt.Errorf("duplicate qrel (%q, %q)", queryID, corpusID)
	}
	row[corpusID] = score
	return nil
}

// ReadDocs reads a BEIR corpus or queries JSONL file (or path+".gz"), each line as
// connectors/jsonl.ParseLine reads it; kind names the file in errors. Ids must be unique because qrels and self-match removal look documents up by id.
func ReadDocs(path, kind string) ([]Doc, error) {
	var docs []Doc
	seen := map[string]bool{}
	err := EachFileLine(path, func(line []byte) error {
		d, err := parseDocLine(line)
		if err != nil {
			return err
		}
		if seen[d.ID] {
			return fmt.Errorf("duplicate %s id %q", kind, d.ID)
		}
		seen[d.ID] = true
		docs = append(docs, d)
		return nil
	})
	return docs, err
}

// ParseQrelsLine parses one BEIR qrels row "query-id\tcorpus-id\tscore". Scores must be
// integers; "2.0"-style integral floats are accepted because some exports write them so.
func ParseQrelsLine(line string) (queryID, corpusID string, score int, err error) {
	line = strings.TrimRight(line, "\r\n")
	f := strings.Split(line, "\t")
	if len(f) != 3 {
		return "", "", 0, fmt.Errorf("qrels: want 3 tab-separated fields, got %d", len(f))
	}
	queryID, corpusID = strings.TrimSpace(f[0]), strings.TrimSpace(f[1])
	if queryID == "" || corpusID == "" {
		return "", "", 0, errors.New("qrels: empty query or corpus id")
	}
	score, err = parseScore(strings.TrimSpace(f[2]))
	if err != nil {
		return "", "", 0, err
	}
	return queryID, corpusID, score, nil
}

func parseScore(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return n, nil
	}
	x, err := strconv.ParseFloat(s, 64)
	// The ±1e9 bound keeps the int conversion exact and rejects NaN and Inf.
	if err != nil || x != float64(int64(x)) || x > 1e9 || x < -1e9 {
		return 0, fmt.Errorf("qrels: score %q is not an integer", s)
	}
	return int(x), nil
}

// parseDocLine reads one corpus or queries line with the jsonl connector's parser, so that
// `reignpipe eval` and `reignpipe run` over the same file name every document alike: the id
// is "id", else BEIR's "_id" (a string, or a number kept in its source spelling because qrels
// refer to it textually), and "text" is required.
func parseDocLine(line []byte) (Doc, error) {
	r, err := jsonl.ParseLine(line)
	if err != nil {
		return Doc{}, err
	}
	if r.Deleted {
		return Doc{}, fmt.Errorf("document %s is a deletion line (\"deleted\": true): an evaluation corpus holds documents only", r.ID)
	}
	return Doc{ID: r.ID, Title: r.Title, Text: r.Text}, nil
}

// EachFileLine opens path, or path+".gz" when path is absent, and calls fn on each non-blank
// line; any error is wrapped with the file name and 1-based line number.
func EachFileLine(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		if g, gzErr := os.Open(path + ".gz"); gzErr == nil {
			f, err, path = g, nil, path+".gz"
		}
	}
	if err != nil {
		return fmt.Errorf("beir: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("beir: %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	n, err := EachLine(r, fn)
	if err != nil {
		return fmt.Errorf("beir: %s:%d: %w", path, n, err)
	}
	return nil
}

// EachLine calls fn for each non-blank line of r (trailing CR stripped). It reads with
// ReadSlice and accumulates, so lines are bounded by maxLineBytes rather than
// bufio.Scanner's 64 KiB. It returns the number of the line being processed on error.
func EachLine(r io.Reader, fn func([]byte) error) (int, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var buf []byte
	lineNo := 0
	for {
		buf = buf[:0]
		var err error
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			buf = append(buf, chunk...)
			if len(buf) > maxLineBytes {
				return lineNo + 1, fmt.Errorf("line longer than %d bytes", maxLineBytes)
			}
			if err != bufio.ErrBufferFull {
				break
			}
		}
		if err != nil && err != io.EOF {
			return lineNo + 1, err
		}
		if len(buf) > 0 {
			lineNo++
			line := bytes.TrimRight(buf, "\r\n")
			if len(bytes.TrimSpace(line)) > 0 {
				if ferr := fn(line); ferr != nil {
					return lineNo, ferr
				}
			}
		}
		if err == io.EOF {
			return lineNo, nil
		}
	}
}
