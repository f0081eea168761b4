package dataset

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
)

// shardSuffix is the "-00000-of-00004" of Hugging Face shard names.
var shardSuffix = regexp.MustCompile(`-\d{5}-of-\d{5}$`)

// openBEIR reads the BEIR / MTEB three-config layout. Corpus and queries are
// corpus.jsonl[.gz] / corpus.parquet / a corpus/ directory of table files (likewise queries);
// qrels are the files or directories under qrels/, default/ (the Hub's config name) or data/,
// one split per name: test.tsv, test.jsonl, test-00000-of-00001.parquet, test/…
func openBEIR(dir string) (*Source, error) {
	s := &Source{Qrels: map[string]beir.Qrels{}, Convention: Convention{K: 10}}
	cf, err := locate(dir, "corpus")
	if err != nil {
		return nil, err
	}
	if s.Corpus, err = readBEIRDocs(s, cf, "corpus"); err != nil {
		return nil, err
	}
	qf, err := locate(dir, "queries")
	if err != nil {
		return nil, err
	}
	qd, err := readBEIRDocs(s, qf, "query")
	if err != nil {
		return nil, err
	}
	for _, d := range qd {
		s.Queries = append(s.Queries, beir.Query{ID: d.ID, Text: d.Text})
	}
	if err := checkUnique(s.Corpus, s.Queries); err != nil {
		return nil, err
	}
	splits, err := qrelsFiles(dir)
	if err != nil {
		return nil, err
	}
	for split, files := range splits {
		q := beir.Qrels{}
		for _, f := range files {
			if err := readBEIRQrels(f, q); err != nil {
				return nil, err
			}
		}
		s.Qrels[split] = q
	}
	return s, nil
}

// locate finds the files of one config (corpus or queries).
func locate(dir, name string) ([]string, error) {
	for _, f := range []string{name + ".jsonl", name + ".jsonl.gz", name + ".parquet"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err == nil && st.Mode().IsRegular() {
			return []string{filepath.Join(dir, f)}, nil
		}
	}
	if st, err := os.Stat(filepath.Join(dir, name)); err == nil && st.IsDir() {
		files, err := tableFiles(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if len(files) > 0 {
			return files, nil
		}
	}
	return nil, fmt.Errorf("no %s: looked for %[1]s.jsonl[.gz], %[1]s.parquet and %[1]s/ holding .jsonl, .parquet or .arrow files", name)
}

// qrelsFiles maps each split to its files under qrels/, default/ and data/ (where
// push_to_hub puts the "default" config's shards: data/test-00000-of-00001.parquet).
func qrelsFiles(dir string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, sub := range []string{"qrels", "default", "data"} {
		ents, err := os.ReadDir(filepath.Join(dir, sub))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			p := filepath.Join(dir, sub, e.Name())
			switch {
			case strings.HasPrefix(e.Name(), "."), sub == "data" && isDocsConfig(e.Name()):
			case e.IsDir():
				files, err := tableFiles(p)
				if err != nil {
					return nil, err
				}
				out[e.Name()] = append(out[e.Name()], files...)
			case e.Type().IsRegular() && (isTableFile(p) || isTSV(p)):
				split := shardSuffix.ReplaceAllString(strings.SplitN(e.Name(), ".", 2)[0], "")
				out[split] = append(out[split], p)
			}
		}
	}
	for split, files := range out {
		if len(files) == 0 {
			delete(out, split)
		}
		slices.Sort(files)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no qrels: looked for qrels/, default/ and data/ holding <split>.tsv|.jsonl|.parquet or <split>/")
	}
	return out, nil
}

// isDocsConfig reports whether a data/ entry holds corpus or queries rather than qrels.
func isDocsConfig(name string) bool {
	return strings.HasPrefix(name, "corpus") || strings.HasPrefix(name, "queries")
}

func isTSV(p string) bool {
	n := strings.ToLower(p)
	return strings.HasSuffix(n, ".tsv") || strings.HasSuffix(n, ".tsv.gz")
}

// readBEIRDocs reads {_id, title, text} records. JSONL goes through beir.ReadDocs (the jsonl
// connector's id rule); Parquet and Arrow rows with a null text are skipped and counted.
func readBEIRDocs(s *Source, files []string, kind string) ([]beir.Doc, error) {
	var docs []beir.Doc
	for _, f := range files {
		if n := strings.ToLower(f); strings.HasSuffix(n, ".jsonl") || strings.HasSuffix(n, ".jsonl.gz") {
			d, err := beir.ReadDocs(f, kind)
			if err != nil {
				return nil, err
			}
			docs = append(docs, d...)
			continue
		}
		err := readRows(f, []string{"_id", "title", "text"}, func(rw row) error {
			id, ok, err := str(rw, "_id")
			if err != nil {
				return err
			}
			if !ok || id == "" {
				return fmt.Errorf(`%s record without "_id"`, kind)
			}
			text, ok, err := str(rw, "text")
			if err != nil {
				return err
			}
			if !ok {
				s.skip(kind + "-null-text")
				return nil
			}
			title, _, err := str(rw, "title")
			if err != nil {
				return err
			}
			docs = append(docs, beir.Doc{ID: id, Title: title, Text: text})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return docs, nil
}

// readBEIRQrels adds one qrels file's {query-id, corpus-id, score} rows to q.
func readBEIRQrels(f string, q beir.Qrels) error {
	if isTSV(f) {
		got, err := beir.ReadQrels(f)
		if err != nil {
			return err
		}
		for qid, row := range got {
			for did, score := range row {
				if err := q.Add(qid, did, score); err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
			}
		}
		return nil
	}
	return readRows(f, []string{"query-id", "corpus-id", "score"}, func(rw row) error {
		qid, ok1, err := str(rw, "query-id")
		if err != nil {
			return err
		}
		did, ok2, err := str(rw, "corpus-id")
		if err != nil {
			return err
		}
		if !ok1 || !ok2 || qid == "" || did == "" {
			return fmt.Errorf("qrels record without query-id or corpus-id")
		}
		score, err := grade(rw, "score")
		if err != nil {
			return err
		}
		return q.Add(qid, did, score)
	})
}
