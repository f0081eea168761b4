package train

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
)

func TestTrainRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	// Every refusal comes before the pipeline is used.
	cfg := &pipelines.Config{}
	data := filepath.Join(dir, "data")
	os.MkdirAll(data, 0o755)
	os.WriteFile(filepath.Join(data, "corpus.jsonl"), []byte(`{"_id":"d","text":"x"}`+"\n"), 0o644)
	os.WriteFile(filepath.Join(data, "queries.jsonl"), []byte(`{"_id":"q","text":"x"}`+"\n"), 0o644)
	base := Options{Data: data, Out: filepath.Join(dir, "out"), Size: "small-l2", Loss: "cosine3", Epochs: 1}
	for _, c := range []struct {
		edit func(*Options)
		want string
	}{
		{func(o *Options) { o.Size = "huge-l9" }, "--size"},
		{func(o *Options) { o.Loss = "mse" }, "--loss"},
		{func(o *Options) { o.Epochs = 0 }, "--epochs"},
		{func(o *Options) { o.Data = filepath.Join(dir, "nope") }, "not a directory"},
		{func(o *Options) { o.Data = dir }, "reignpipe importdata"},
		{func(o *Options) { o.Python = filepath.Join(dir, "no-python") }, "make train-deps"},
		{func(o *Options) { o.Python, o.TrainerDir = os.Args[0], dir }, "no reigntrain"},
	} {
		o := base
		c.edit(&o)
		if _, err := Run(context.Background(), cfg, o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one mentioning %q", o, err, c.want)
		}
	}
	// Labelled training without qrels/train.tsv points at --self-supervised.
	o := base
	o.Python, o.TrainerDir = os.Args[0], filepath.Join(testenv.Root(), "ops", "train")
	if _, err := Run(context.Background(), cfg, o); err == nil || !strings.Contains(err.Error(), "--self-supervised") {
		t.Errorf("no qrels: %v", err)
	}
	// An unlabelled directory without a corpus.
	o.SelfSupervised, o.Data = true, dir
	if _, err := Run(context.Background(), cfg, o); err == nil || !strings.Contains(err.Error(), "no corpus.jsonl") {
		t.Errorf("no corpus: %v", err)
	}
}

// An unlabelled corpus is read as it is: queries when there are some, and no qrels.
func TestLoadDataSelfSupervised(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "corpus.jsonl"), []byte(`{"_id":"d1","text":"x"}`+"\n"+`{"_id":"d2","text":"y"}`+"\n"), 0o644)
	ds, err := LoadData(dir, true)
	if err != nil || len(ds.Corpus) != 2 || len(ds.Queries) != 0 || len(ds.Qrels) != 0 {
		t.Fatalf("corpus only: %+v, %v", ds, err)
	}
	os.WriteFile(filepath.Join(dir, "queries.jsonl"), []byte(`{"_id":"q1","text":"z"}`+"\n"), 0o644)
	ds, err = LoadData(dir, true)
	if err != nil || len(ds.Corpus) != 2 || len(ds.Queries) != 1 || ds.Queries[0].ID != "q1" {
		t.Fatalf("with queries: %+v, %v", ds, err)
	}
	if _, err := LoadData(dir, false); err == nil || !strings.Contains(err.Error(), "--self-supervised") {
		t.Fatalf("labelled without qrels: %v", err)
	}
}
