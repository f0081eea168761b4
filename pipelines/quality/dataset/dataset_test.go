package dataset

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/reignpipe/reignpipe/internal/testenv"

	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
)

// spec is one small benchmark per layout; hf_datasets.py writes it with Hugging Face datasets.
func spec() map[string]any {
	return map[string]any{
		"beir": map[string]any{
			"corpus": []map[string]any{
				{"_id": "d1", "title": "Alpha", "text": "Alpha text about rivers."},
				{"_id": "12", "title": "", "text": "Numeric-looking id, kept as text."},
				{"_id": "d3", "title": "Ünïcode", "text": "Café déjà vu — 東京"},
				{"_id": "q1", "title": "", "text": "A corpus copy of query q1 (a self-match)."},
			},
			"queries": []map[string]any{
				{"_id": "q1", "text": "rivers"},
				{"_id": "q2", "text": "café"},
				{"_id": "q3", "text": "numbers"},
			},
			"qrels": map[string]any{
				"test":  []map[string]any{{"query-id": "q1", "corpus-id": "d1", "score": 2.0}, {"query-id": "q1", "corpus-id": "12", "score": 1.0}, {"query-id": "q2", "corpus-id": "d3", "score": 2.0}},
				"train": []map[string]any{{"query-id": "q3", "corpus-id": "12", "score": 2.0}},
			},
		},
		"loco": map[string]any{
			"documents": []map[string]any{
				{"pid": "qasper_title_Passage_0", "passage": "Paper one body.", "dataset": "qasper_title"},
				{"pid": "qasper_title_Passage_1", "passage": nil, "dataset": "qasper_title"},
				{"pid": "qasper_title_Passage_2", "passage": "Paper three body.", "dataset": "qasper_title"},
				{"pid": "gov_report_Passage_0", "passage": "A report.", "dataset": "gov_report"},
			},
			"queries": []map[string]any{
				{"qid": "qasper_title_Query_0", "query": "Title one", "answer_pids": []string{"qasper_title_Passage_0"}, "dataset": "qasper_title"},
				{"qid": "qasper_title_Query_1", "query": "Title three", "answer_pids": []string{"qasper_title_Passage_2", "qasper_title_Passage_0"}, "dataset": "qasper_title"},
				{"qid": "gov_report_Query_0", "query": "Summary", "answer_pids": []string{"gov_report_Passage_0"}, "dataset": "gov_report"},
			},
		},
		"dapfam": dapfamSpec(),
	}
}

// dapfamSpec: 20 query families, each citing 1..4 corpus families (IN or OUT) plus one
// non-cited negative (NC, score 0).
func dapfamSpec() map[string]any {
	var corpus, queries, rels []map[string]any
	fam := func(idCol, id string) map[string]any {
		return map[string]any{idCol: id, "title_en": "Title " + id, "abstract_en": "Abstract " + id,
			"claims_text": "1. A claim of " + id, "description_en": "Description " + id}
	}
	for i := range 30 {
		corpus = append(corpus, fam("relevant_id", "C"+string(rune('a'+i))))
	}
	for i := range 20 {
		q := "Q" + string(rune('a'+i))
		queries = append(queries, fam("query_id", q))
		for j := 0; j <= i%4; j++ {
			dom := "IN"
			if j%2 == 1 {
				dom = "OUT"
			}
			rels = append(rels, map[string]any{"query_id": q, "relevant_id": "C" + string(rune('a'+(i+j)%30)), "relevance_score": 1.0, "domain_rel": dom})
		}
		rels = append(rels, map[string]any{"query_id": q, "relevant_id": "C" + string(rune('a'+(i+10)%30)), "relevance_score": 0.0, "domain_rel": "NC"})
	}
	return map[string]any{"corpus": corpus, "queries": queries, "qrels_all": rels}
}

// hfFixtures writes spec() with Hugging Face datasets once per test binary.
func hfFixtures(t *testing.T) string {
	t.Helper()
	py := testenv.Python(t, "datasets", "pyarrow")
	dir := t.TempDir()
	js, _ := json.Marshal(spec())
	specPath := filepath.Join(dir, "spec.json")
	if err := os.WriteFile(specPath, js, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	cmd := exec.Command(py, filepath.Join(testenv.Root(), "ops", "oracles", "hf_datasets.py"), specPath, out)
	cmd.Env = append(os.Environ(), "HF_DATASETS_OFFLINE=1", "HF_HUB_OFFLINE=1", "HF_HOME="+filepath.Join(dir, "hf"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hf_datasets.py: %v\n%s", err, b)
	}
	return out
}

func wantBEIR() (corpus []beir.Doc, queries []beir.Query, qrels map[string]beir.Qrels) {
	corpus = []beir.Doc{{ID: "d1", Title: "Alpha", Text: "Alpha text about rivers."}, {ID: "12", Text: "Numeric-looking id, kept as text."},
		{ID: "d3", Title: "Ünïcode", Text: "Café déjà vu — 東京"}, {ID: "q1", Text: "A corpus copy of query q1 (a self-match)."}}
	queries = []beir.Query{{ID: "q1", Text: "rivers"}, {ID: "q2", Text: "café"}, {ID: "q3", Text: "numbers"}}
	qrels = map[string]beir.Qrels{
		"test":  {"q1": {"d1": 2, "12": 1}, "q2": {"d3": 2}},
		"train": {"q3": {"12": 2}},
	}
	return
}

func checkBEIR(t *testing.T, s *Source) {
	t.Helper()
	corpus, queries, qrels := wantBEIR()
	if s.Format != FormatBEIR {
		t.Errorf("format %q", s.Format)
	}
	if !slices.Equal(s.Corpus, corpus) {
		t.Errorf("corpus\n got %q\nwant %q", s.Corpus, corpus)
	}
	if !slices.Equal(s.Queries, queries) {
		t.Errorf("queries\n got %q\nwant %q", s.Queries, queries)
	}
	if !maps.EqualFunc(s.Qrels, qrels, func(a, b beir.Qrels) bool {
		return maps.EqualFunc(a, b, func(x, y map[string]int) bool { return maps.Equal(x, y) })
	}) {
		t.Errorf("qrels\n got %v\nwant %v", s.Qrels, qrels)
	}
	if s.Convention != (Convention{K: 10}) {
		t.Errorf("convention %+v", s.Convention)
	}
}

func TestHuggingFaceLayouts(t *testing.T) {
	out := hfFixtures(t)
	for _, layout := range []string{"beir-disk", "beir-parquet", "beir-hub", "beir-export"} {
		t.Run(layout, func(t *testing.T) {
			s, err := Open(filepath.Join(out, layout), Options{})
			if err != nil {
				t.Fatal(err)
			}
			checkBEIR(t, s)
		})
	}
	t.Run("loco", func(t *testing.T) { checkLoCo(t, filepath.Join(out, "loco")) })
	t.Run("dapfam", func(t *testing.T) { checkDAPFAM(t, filepath.Join(out, "dapfam")) })
}

// TestPlainBEIRRoundTrip: WriteBEIR's output reads back identically, both here and through the
// plain BEIR loader (pipelines/quality/beir).
func TestPlainBEIRRoundTrip(t *testing.T) {
	corpus, queries, qrels := wantBEIR()
	src := &Source{Format: FormatBEIR, Corpus: corpus, Queries: queries, Qrels: qrels, Convention: Convention{K: 10}}
	dir := t.TempDir()
	if err := WriteBEIR(dir, src, ImportSummary{Input: "mem"}); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkBEIR(t, s)
	ds, err := beir.LoadSplit(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Corpus) != 4 || ds.Qrels["q1"]["12"] != 1 {
		t.Errorf("eval loader: %d docs, qrels %v", len(ds.Corpus), ds.Qrels)
	}
	var sum ImportSummary
	b, err := os.ReadFile(filepath.Join(dir, ImportFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil || sum.Corpus != 4 || sum.Splits["test"] != 2 || sum.Splits["train"] != 1 {
		t.Errorf("import.json %s (%v)", b, err)
	}

	// The same files gzipped (corpus.jsonl.gz, qrels/test.tsv.gz) read the same.
	for _, name := range []string{"corpus.jsonl", filepath.Join("qrels", "test.tsv")} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(b)
		zw.Close()
		os.WriteFile(filepath.Join(dir, name+".gz"), gz.Bytes(), 0o644)
		os.Remove(filepath.Join(dir, name))
	}
	checkBEIR(t, mustOpen(t, dir, Options{}))

	// An id a TSV row cannot carry is refused before anything is written.
	bad := &Source{Corpus: []beir.Doc{{ID: "a\tb", Text: "x"}}, Qrels: map[string]beir.Qrels{}}
	if err := WriteBEIR(t.TempDir(), bad, ImportSummary{}); err == nil || !strings.Contains(err.Error(), "a\\tb") {
		t.Errorf("tab in id: %v", err)
	}
}

func checkLoCo(t *testing.T, dir string) {
	t.Helper()
	if f, err := Detect(dir); err != nil || f != FormatLoCo {
		t.Fatalf("Detect = %q, %v", f, err)
	}
	all, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := all.Subtasks(); !slices.Equal(got, []string{"gov_report", "qasper_title"}) {
		t.Errorf("subtasks %v", got)
	}
	if all.Skipped["document-null-text"] != 1 || !all.Convention.KeepSelf || all.Convention.K != 10 {
		t.Errorf("skipped %v convention %+v", all.Skipped, all.Convention)
	}
	for _, s := range []*Source{mustSubset(t, all, "qasper_title"), mustOpen(t, dir, Options{Subset: "qasper_title"})} {
		ids := func(ds []beir.Doc) (out []string) {
			for _, d := range ds {
				out = append(out, d.ID)
			}
			return
		}(s.Corpus)
		if !slices.Equal(ids, []string{"qasper_title_Passage_0", "qasper_title_Passage_2"}) {
			t.Errorf("corpus %v", ids)
		}
		want := beir.Qrels{"qasper_title_Query_0": {"qasper_title_Passage_0": 1},
			"qasper_title_Query_1": {"qasper_title_Passage_2": 1, "qasper_title_Passage_0": 1}}
		if got := s.Qrels[LoCoSplit]; len(got) != 2 || !maps.Equal(got["qasper_title_Query_1"], want["qasper_title_Query_1"]) ||
			!maps.Equal(got["qasper_title_Query_0"], want["qasper_title_Query_0"]) {
			t.Errorf("qrels %v", got)
		}
		if len(s.Queries) != 2 || s.Queries[1].Text != "Title three" {
			t.Errorf("queries %v", s.Queries)
		}
	}
}

func mustOpen(t *testing.T, dir string, o Options) *Source {
	t.Helper()
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustSubset(t *testing.T, s *Source, task string) *Source {
	t.Helper()
	sub, err := s.Subset(task)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

func checkDAPFAM(t *testing.T, dir string) {
	t.Helper()
	s := mustOpen(t, dir, Options{})
	if s.Format != FormatDAPFAM || s.Convention.K != 100 || s.Convention.KeepSelf {
		t.Errorf("format %q convention %+v", s.Format, s.Convention)
	}
	if len(s.Corpus) != 30 || len(s.Queries) != 20 {
		t.Fatalf("%d docs, %d queries", len(s.Corpus), len(s.Queries))
	}
	if got, want := s.Corpus[0].Text, "Title Ca\n\nAbstract Ca\n\n1. A claim of Ca\n\nDescription Ca"; got != want {
		t.Errorf("fulltext view %q, want %q", got, want)
	}
	ta := mustOpen(t, dir, Options{View: "title-abstract"})
	if got := ta.Queries[0].Text; got != "Title Qa\n\nAbstract Qa" {
		t.Errorf("title-abstract view %q", got)
	}

	all := s.Qrels["all"]
	if len(all) != 20 || all["Qa"]["Ck"] != 0 || all["Qa"]["Ca"] != 1 {
		t.Errorf("all: %d queries, Qa %v", len(all), all["Qa"])
	}
	// Qd cites Cd (IN), Ce (OUT), Cf (IN), Cg (OUT).
	if !maps.Equal(s.Qrels["all_in"]["Qd"], map[string]int{"Cd": 1, "Cf": 1}) || !maps.Equal(s.Qrels["all_out"]["Qd"], map[string]int{"Ce": 1, "Cg": 1}) {
		t.Errorf("all_in %v all_out %v", s.Qrels["all_in"]["Qd"], s.Qrels["all_out"]["Qd"])
	}
	// Query-disjoint, covering every query, 5 per quartile group: round(0.75) = 1 test and 1 val each.
	seen := map[string]string{}
	for _, sp := range []string{"train", "val", "test"} {
		for q := range s.Qrels[sp] {
			if prev, dup := seen[q]; dup {
				t.Errorf("query %s in %s and %s", q, prev, sp)
			}
			seen[q] = sp
		}
	}
	if len(seen) != 20 || len(s.Qrels["test"]) != 4 || len(s.Qrels["val"]) != 4 {
		t.Errorf("split sizes: %d assigned, test %d, val %d", len(seen), len(s.Qrels["test"]), len(s.Qrels["val"]))
	}
	for q, row := range s.Qrels["test_in"] {
		if seen[q] != "test" || !maps.Equal(row, s.Qrels["all_in"][q]) {
			t.Errorf("test_in %s: split %s, %v", q, seen[q], row)
		}
	}
	// Same seed, same split; another seed, another.
	again := mustOpen(t, dir, Options{})
	other := mustOpen(t, dir, Options{Seed: 7})
	if !slices.Equal(slices.Sorted(maps.Keys(again.Qrels["test"])), slices.Sorted(maps.Keys(s.Qrels["test"]))) {
		t.Error("split not deterministic")
	}
	if slices.Equal(slices.Sorted(maps.Keys(other.Qrels["test"])), slices.Sorted(maps.Keys(s.Qrels["test"]))) {
		t.Error("seed 7 gave seed 42's test split")
	}
}

func TestOpenErrors(t *testing.T) {
	beir := t.TempDir()
	corpus, queries, qrels := wantBEIR()
	if err := WriteBEIR(beir, &Source{Corpus: corpus, Queries: queries, Qrels: qrels}, ImportSummary{}); err != nil {
		t.Fatal(err)
	}
	noQrels := t.TempDir()
	os.WriteFile(filepath.Join(noQrels, "corpus.jsonl"), []byte(`{"_id":"a","text":"x"}`+"\n"), 0o644)
	os.WriteFile(filepath.Join(noQrels, "queries.jsonl"), []byte(`{"_id":"q","text":"x"}`+"\n"), 0o644)
	dupQrels := t.TempDir()
	os.CopyFS(dupQrels, os.DirFS(beir))
	os.WriteFile(filepath.Join(dupQrels, "qrels", "test.jsonl"), []byte(`{"query-id":"q1","corpus-id":"d1","score":1}`+"\n"), 0o644)
	badScore := t.TempDir()
	os.CopyFS(badScore, os.DirFS(beir))
	os.WriteFile(filepath.Join(badScore, "qrels", "dev.jsonl"), []byte(`{"query-id":"q1","corpus-id":"d1","score":1.5}`+"\n"), 0o644)
	emptyLoCo := t.TempDir()
	os.MkdirAll(filepath.Join(emptyLoCo, "documents"), 0o755)
	os.WriteFile(filepath.Join(emptyLoCo, "documents", "qmsum_test.jsonl"), []byte(`{"pid":"p","passage":"x","dataset":"qmsum"}`+"\n"), 0o644)

	for _, tc := range []struct {
		name, dir string
		o         Options
		want      string
	}{
		{"missing dir", filepath.Join(beir, "nope"), Options{}, "no such file"},
		{"unknown format", beir, Options{Format: "csv"}, `unknown format "csv"`},
		{"subset on beir", beir, Options{Subset: "qmsum"}, "applies to LoCo only"},
		{"view on beir", beir, Options{View: "fulltext"}, "applies to DAPFAM only"},
		{"no qrels", noQrels, Options{}, "no qrels"},
		{"no corpus", t.TempDir(), Options{}, "no corpus"},
		{"judged twice", dupQrels, Options{}, `duplicate qrel ("q1", "d1")`},
		{"fractional score", badScore, Options{}, "score 1.5 is not an integer"},
		{"unknown subtask", emptyLoCo, Options{Format: FormatLoCo, Subset: "nope"}, "unknown LoCo subtask"},
		{"loco without queries", emptyLoCo, Options{}, "found 1 documents and 0 queries"},
		{"unknown view", beir, Options{Format: FormatDAPFAM, View: "abstract"}, "unknown DAPFAM view"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.dir, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestArrowBuffersReleased reads every Arrow-backed layout with a checked allocator: each
// record batch and projection must be released.
func TestArrowBuffersReleased(t *testing.T) {
	out := hfFixtures(t)
	checked := memory.NewCheckedAllocator(memory.NewGoAllocator())
	mem = checked
	defer func() { mem = memory.DefaultAllocator }()
	for _, layout := range []string{"beir-disk", "beir-parquet", "beir-export", "dapfam"} {
		if _, err := Open(filepath.Join(out, layout), Options{}); err != nil {
			t.Fatal(err)
		}
	}
	checked.AssertSize(t, 0)
}
