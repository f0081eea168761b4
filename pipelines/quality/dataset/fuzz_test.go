package dataset

import (
	"bytes"
	"testing"

	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
)

// FuzzLoCoRecords feeds arbitrary JSONL to the LoCo record reader: it must return an error or
// a consistent source (every judged query kept, every kept record labelled), never panic.
func FuzzLoCoRecords(f *testing.F) {
	for _, s := range []string{
		`{"pid":"p","passage":"x","dataset":"qmsum"}`,
		`{"qid":"q","query":"y","answer_pids":["p","r"],"dataset":"qmsum"}`,
		`{"pid":"p","passage":null,"dataset":"qasper_title"}` + "\n" + `{"qid":1,"query":"z","answer_pids":[2]}`,
		`{"qid":"q","query":"y","answer_pids":"p"}`,
		`{"qid":"q","query":"y","answer_pids":[null]}`,
		`{"pid":{},"passage":"x"}`, `[]`, `{"answer_pids":[1.5e300]}`,
	} {
		f.Add([]byte(s), "")
		f.Add([]byte(s), "qmsum")
	}
	f.Fuzz(func(t *testing.T, data []byte, subset string) {
		s := &Source{Qrels: map[string]beir.Qrels{LoCoSplit: {}}, docTask: map[string]string{}, queryTask: map[string]string{}}
		cols := []string{"pid", "passage", "qid", "query", "answer_pids", "dataset"}
		_, err := beir.EachLine(bytes.NewReader(data), func(line []byte) error {
			rw, err := parseJSONRow(line, cols)
			if err != nil {
				return err
			}
			return s.addLoCo(rw, subset)
		})
		if err != nil {
			return
		}
		for qid := range s.Qrels[LoCoSplit] {
			if _, ok := s.queryTask[qid]; !ok {
				t.Fatalf("judged query %q was not kept", qid)
			}
		}
		for _, d := range s.Corpus {
			if task, ok := s.docTask[d.ID]; !ok || (subset != "" && task != subset) {
				t.Fatalf("document %q labelled %q (subset %q)", d.ID, task, subset)
			}
		}
	})
}

// FuzzGrade: a score is accepted only as an integer, and then exactly.
func FuzzGrade(f *testing.F) {
	for _, s := range []string{`1`, `2.0`, `-0`, `1.5`, `"2"`, `1e9`, `1e10`, `null`, `"x"`, `NaN`} {
		f.Add([]byte(`{"score":` + s + `}`))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		rw, err := parseJSONRow(line, []string{"score"})
		if err != nil {
			return
		}
		g, err := grade(rw, "score")
		if err != nil {
			return
		}
		if g > 1e9 || g < -1e9 {
			t.Fatalf("grade %d out of range from %s", g, line)
		}
	})
}
