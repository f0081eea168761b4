package dataset

import (
	"fmt"
	"slices"
	"strings"

	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
)

// LoCoSubtasks are LoCoV1's twelve subtasks, the values of its "dataset" column, in the order
// the LoCo paper's tables list them.
var LoCoSubtasks = []string{
	"summ_screen_fd", "gov_report", "qmsum", "qasper_title", "qasper_abstract", "multifieldqa",
	"2wikimqa", "passage_retrieval", "legal_case_reports", "courtlistener_HTML",
	"courtlistener_Plain_Text", "stackoverflow",
}

// LoCoSplit is the one split LoCoV1 ships.
const LoCoSplit = "test"

// openLoCo reads every table file under dir (the two Hub repositories' documents/*_test.jsonl,
// side by side or in sub-directories, or their parquet exports) and tells documents from
// queries by their columns. Relevance is binary: each of a query's answer_pids scores 1, as in
// the LoCo evaluation. Records whose passage or query is null (some qasper rows) are skipped
// and counted: there is no text to embed.
func openLoCo(dir, subset string) (*Source, error) {
	if subset != "" && !slices.Contains(LoCoSubtasks, subset) {
		return nil, fmt.Errorf("unknown LoCo subtask %q (want one of %s)", subset, strings.Join(LoCoSubtasks, ", "))
	}
	files, err := tableFiles(dir)
	if err != nil {
		return nil, err
	}
	s := &Source{Qrels: map[string]beir.Qrels{LoCoSplit: {}}, Convention: Convention{K: 10, KeepSelf: true},
		docTask: map[string]string{}, queryTask: map[string]string{}}
	cols := []string{"pid", "passage", "qid", "query", "answer_pids", "dataset"}
	for _, f := range files {
		err := readRows(f, cols, func(rw row) error { return s.addLoCo(rw, subset) })
		if err != nil {
			return nil, err
		}
	}
	if len(s.Corpus) == 0 || len(s.Queries) == 0 {
		return nil, fmt.Errorf("no LoCo %s: found %d documents and %d queries (want records with pid/passage and qid/query/answer_pids)",
			orAll(subset), len(s.Corpus), len(s.Queries))
	}
	if err := checkUnique(s.Corpus, s.Queries); err != nil {
		return nil, err
	}
	return s, nil
}

func orAll(subset string) string {
	if subset == "" {
		return "subtasks"
	}
	return "subtask " + subset
}

func (s *Source) addLoCo(rw row, subset string) error {
	task, _, err := str(rw, "dataset")
	if err != nil {
		return err
	}
	if subset != "" && task != subset {
		return nil
	}
	if _, isDoc := rw["pid"]; isDoc {
		pid, ok, err := str(rw, "pid")
		if err != nil || !ok {
			return fmt.Errorf("document without pid: %v", err)
		}
		text, ok, err := str(rw, "passage")
		if err != nil {
			return err
		}
		if !ok {
			s.skip("document-null-text")
			return nil
		}
		s.Corpus = append(s.Corpus, beir.Doc{ID: pid, Text: text})
		s.docTask[pid] = task
		return nil
	}
	qid, ok, err := str(rw, "qid")
	if err != nil || !ok {
		return fmt.Errorf("record with neither pid nor qid")
	}
	text, ok, err := str(rw, "query")
	if err != nil {
		return err
	}
	if !ok {
		s.skip("query-null-text")
		return nil
	}
	answers, err := strs(rw, "answer_pids")
	if err != nil {
		return err
	}
	s.Queries = append(s.Queries, beir.Query{ID: qid, Text: text})
	s.queryTask[qid] = task
	for _, pid := range answers {
		if _, listed := s.Qrels[LoCoSplit][qid][pid]; listed {
			continue // a pid listed twice is one judgement of the same grade
		}
		if err := s.Qrels[LoCoSplit].Add(qid, pid, 1); err != nil {
			return err
		}
	}
	return nil
}

// Subtasks lists the LoCo subtasks present, in LoCoSubtasks order (then any others, sorted).
func (s *Source) Subtasks() []string {
	seen := map[string]bool{}
	for _, t := range s.queryTask {
		seen[t] = true
	}
	var out []string
	for _, t := range LoCoSubtasks {
		if seen[t] {
			out = append(out, t)
			delete(seen, t)
		}
	}
	rest := make([]string, 0, len(seen))
	for t := range seen {
		rest = append(rest, t)
	}
	slices.Sort(rest)
	return append(out, rest...)
}

// Subset returns one LoCo subtask as its own benchmark: its documents, its queries and their
// judgements, as the LoCo evaluation scores each subtask against its own corpus.
func (s *Source) Subset(task string) (*Source, error) {
	if s.docTask == nil {
		return nil, fmt.Errorf("dataset: %s has no subtasks", s.Format)
	}
	out := &Source{Format: s.Format, Qrels: map[string]beir.Qrels{}, Convention: s.Convention,
		docTask: map[string]string{}, queryTask: map[string]string{}}
	for _, d := range s.Corpus {
		if s.docTask[d.ID] == task {
			out.Corpus = append(out.Corpus, d)
			out.docTask[d.ID] = task
		}
	}
	for _, q := range s.Queries {
		if s.queryTask[q.ID] == task {
			out.Queries = append(out.Queries, q)
			out.queryTask[q.ID] = task
		}
	}
	if len(out.Queries) == 0 {
		return nil, fmt.Errorf("dataset: no queries for subtask %q", task)
	}
	for split, qrels := range s.Qrels {
		sq := beir.Qrels{}
		for qid, row := range qrels {
			if out.queryTask[qid] == task {
				sq[qid] = row
			}
		}
		out.Qrels[split] = sq
	}
	return out, nil
}
