package beir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
)

// Files is a benchmark as the plain BEIR layout holds it, in the order it is written.
type Files struct {
	Corpus  []Doc
	Queries []Query
	Splits  []string               // one qrels/<split>.tsv each, in this order
	Qrels   map[string][]Judgement // split → rows, in file order
}

// Judgement is one qrels row.
type Judgement struct {
	Query, Doc string
	Score      int
}

// WriteFiles is the one writer of the plain BEIR layout: corpus.jsonl ({"_id", "title",
// "text"}), queries.jsonl ({"_id", "text"}), qrels/<split>.tsv (with the "query-id" header),
// then summaryFile holding summary as indented JSON. Each file is written atomically;
// summaryFile is removed first and written last, so its presence says that the files beside it
// are complete and belong to it, also when an earlier benchmark is overwritten. Ids that a
// qrels row cannot carry (tab, newline, surrounding whitespace) are an error.
func WriteFiles(out string, f Files, summaryFile string, summary any) error {
	for _, d := range f.Corpus {
		if !tsvSafe(d.ID) {
			return fmt.Errorf("beir: corpus id %q cannot be written to a qrels TSV", d.ID)
		}
	}
	for _, q := range f.Queries {
		if !tsvSafe(q.ID) {
			return fmt.Errorf("beir: query id %q cannot be written to a qrels TSV", q.ID)
		}
	}
	for _, split := range f.Splits {
		if split == "" || strings.ContainsAny(split, `/\`) {
			return fmt.Errorf("beir: invalid split name %q", split)
		}
		for _, j := range f.Qrels[split] {
			if !tsvSafe(j.Query) || !tsvSafe(j.Doc) {
				return fmt.Errorf("beir: qrel (%q, %q) cannot be written to a TSV", j.Query, j.Doc)
			}
		}
	}
	js, err := json.MarshalIndent(summary, "", "  ")
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(out, summaryFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("beir: %w", err)
	}
	type rowDoc struct {
		ID    string `json:"_id"`
		Title string `json:"title"`
		Text  string `json:"text"`
	}
	type rowQuery struct {
		ID   string `json:"_id"`
		Text string `json:"text"`
	}
	// Text is written as it is: no HTML escaping of <, > and &, which patents and markup hold.
	jsonl := func(name string, n int, row func(int) any) error {
		return atomicfile.WriteFunc(filepath.Join(out, name), func(w io.Writer) error {
			e := json.NewEncoder(w)
			e.SetEscapeHTML(false)
			for i := 0; i < n; i++ {
				if err := e.Encode(row(i)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := jsonl("corpus.jsonl", len(f.Corpus), func(i int) any {
		d := f.Corpus[i]
		return rowDoc{d.ID, d.Title, d.Text}
	}); err != nil {
		return fmt.Errorf("beir: %w", err)
	}
	if err := jsonl("queries.jsonl", len(f.Queries), func(i int) any {
		q := f.Queries[i]
		return rowQuery{q.ID, q.Text}
	}); err != nil {
		return fmt.Errorf("beir: %w", err)
	}
	for _, split := range f.Splits {
		err := atomicfile.WriteFunc(filepath.Join(out, "qrels", split+".tsv"), func(w io.Writer) error {
			if _, err := io.WriteString(w, "query-id\tcorpus-id\tscore\n"); err != nil {
				return err
			}
			for _, j := range f.Qrels[split] {
				if _, err := fmt.Fprintf(w, "%s\t%s\t%d\n", j.Query, j.Doc, j.Score); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("beir: %w", err)
		}
	}
	if err := atomicfile.Write(filepath.Join(out, summaryFile), append(js, '\n')); err != nil {
		return fmt.Errorf("beir: %w", err)
	}
	return nil
}

func tsvSafe(id string) bool {
	return id != "" && !strings.ContainsAny(id, "\t\r\n") && strings.TrimSpace(id) == id
}
