package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
)

// ImportFile is the summary WriteBEIR writes beside the BEIR files, last.
const ImportFile = "import.json"

// ImportSummary says what was imported.
type ImportSummary struct {
	Input      string         `json:"input"`
	Format     string         `json:"format"`
	Options    Options        `json:"options"`
	Corpus     int            `json:"corpus"`
	Queries    int            `json:"queries"`
	Splits     map[string]int `json:"splits"` // split → queries with at least one judgement
	Skipped    map[string]int `json:"skipped,omitempty"`
	Convention Convention     `json:"convention"`
}

// WriteBEIR writes s in the plain BEIR layout that `reignpipe train` and any BEIR tool read:
// corpus.jsonl, queries.jsonl, qrels/<split>.tsv, then import.json. Each file is written
// atomically; import.json is removed first and written last, so its presence means the files
// beside it are complete. Ids that a qrels row cannot carry (tab, newline, surrounding
// whitespace) are an error.
func WriteBEIR(out string, s *Source, sum ImportSummary) error {
	if err := os.Remove(filepath.Join(out, ImportFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("dataset: %w", err)
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
	for _, d := range s.Corpus {
		if !tsvSafe(d.ID) {
			return fmt.Errorf("dataset: corpus id %q cannot be written to a qrels TSV", d.ID)
		}
	}
	for _, q := range s.Queries {
		if !tsvSafe(q.ID) {
			return fmt.Errorf("dataset: query id %q cannot be written to a qrels TSV", q.ID)
		}
	}
	err := atomicfile.WriteFunc(filepath.Join(out, "corpus.jsonl"), func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetEscapeHTML(false)
		for _, d := range s.Corpus {
			if err := e.Encode(rowDoc{d.ID, d.Title, d.Text}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	err = atomicfile.WriteFunc(filepath.Join(out, "queries.jsonl"), func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetEscapeHTML(false)
		for _, q := range s.Queries {
			if err := e.Encode(rowQuery{q.ID, q.Text}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	sum.Format, sum.Corpus, sum.Queries, sum.Skipped, sum.Convention = s.Format, len(s.Corpus), len(s.Queries), s.Skipped, s.Convention
	sum.Splits = map[string]int{}
	for _, split := range s.Splits() {
		qrels := s.Qrels[split]
		for qid, row := range qrels {
			for did := range row {
				if !tsvSafe(qid) || !tsvSafe(did) {
					return fmt.Errorf("dataset: qrel (%q, %q) cannot be written to a TSV", qid, did)
				}
			}
		}
		sum.Splits[split] = len(qrels)
		err := atomicfile.WriteFunc(filepath.Join(out, "qrels", split+".tsv"), func(w io.Writer) error {
			if _, err := io.WriteString(w, "query-id\tcorpus-id\tscore\n"); err != nil {
				return err
			}
			for _, qid := range slices.Sorted(maps.Keys(qrels)) {
				row := qrels[qid]
				for _, did := range slices.Sorted(maps.Keys(row)) {
					if _, err := fmt.Fprintf(w, "%s\t%s\t%d\n", qid, did, row[did]); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("dataset: %w", err)
		}
	}
	js, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(out, ImportFile), append(js, '\n'))
}

func tsvSafe(id string) bool {
	return id != "" && !strings.ContainsAny(id, "\t\r\n") && strings.TrimSpace(id) == id
}
