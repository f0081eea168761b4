package neighbors

import (
	"context"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/schemas"
)

// The query document is picked by id (its source prefix optional), else by title (ignoring
// case, whole or in part), else the first id; equal scores rank by ascending id, as in eval;
// two spaces are never compared.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	s, err := vectorfile.NewJSONL(vectorfile.JSONLOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, v := range []schemas.DocVector{
		{DocID: "t:q", Title: "Query", Version: "1", Space: "sp", Vector: []float32{1, 0}},
		{DocID: "t:b", Title: "Tie B", Version: "1", Space: "sp", Vector: []float32{0.6, 0.8}},
		{DocID: "t:a", Title: "Tie A", Version: "1", Space: "sp", Vector: []float32{0.6, -0.8}},
		{DocID: "t:c", Title: "Far", Version: "1", Space: "sp", Vector: []float32{0, 1}},
	} {
		if err := s.Write(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ids := func(r *Result) (out []string) {
		for _, h := range r.Hits {
			out = append(out, h.DocID)
		}
		return out
	}
	r, err := Find(dir, Of{Title: "query"}, 2)
	if err != nil || r.Query.DocID != "t:q" || r.Among != 4 || strings.Join(ids(r), " ") != "t:a t:b" || r.Hits[0].Title != "Tie A" {
		t.Fatalf("by title: %+v, %v", r, err)
	}
	for _, of := range []Of{{DocID: "q"}, {Title: "quer"}} { // no source prefix; part of a title
		if r, err := Find(dir, of, 1); err != nil || r.Query.DocID != "t:q" {
			t.Fatalf("%+v: %+v, %v", of, r, err)
		}
	}
	if r, err := Find(dir, Of{}, 1); err != nil || r.Query.DocID != "t:a" {
		t.Fatalf("default: %+v, %v", r, err)
	}
	for _, c := range []struct {
		of   Of
		k    int
		want string
	}{{Of{DocID: "t:x"}, 1, "no document"}, {Of{Title: "nope"}, 1, "no document titled"}, {Of{}, 0, "--k"}} {
		if _, err := Find(dir, c.of, c.k); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v k=%d: %v, want %q", c.of, c.k, err, c.want)
		}
	}

	other, err := vectorfile.NewJSONL(vectorfile.JSONLOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Write(ctx, schemas.DocVector{DocID: "t:x", Version: "1", Space: "other", Vector: []float32{1, 0}}); err != nil {
		t.Fatal(err)
	}
	if err := other.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(dir+"-none", Of{}, 1); err == nil || !strings.Contains(err.Error(), "--vectors "+dir+"-none is not a folder") {
		t.Fatalf("no such folder: %v", err)
	}
	if _, err := Find(dir, Of{DocID: "t:q"}, 1); err == nil || !strings.Contains(err.Error(), "not comparable") {
		t.Fatalf("mixed spaces: %v", err)
	}
}

// A document id is found with or without its source prefix when that is unambiguous; else the
// message lists the ids meant.
func TestResolveID(t *testing.T) {
	ids := []string{"corpus:bread", "corpus:rye", "news:12", "wiki:12", "wiki:Bread_(food)"}
	cases := []struct{ want, id, err string }{
		{"corpus:bread", "corpus:bread", ""},
		{"bread", "corpus:bread", ""},
		{"rye", "corpus:rye", ""},
		{"12", "", `"12" is the id of several documents: give it with its source, news:12 or wiki:12`},
		{"wiki:bread", "", `no document "wiki:bread"; did you mean corpus:bread?`},
		{"corpus:bred", "", `no document "corpus:bred"; did you mean corpus:bread?`},
		{"bred", "", `no document "bred"; did you mean corpus:bread?`},
		{"croissant", "", `no document "croissant" (ids look like corpus:bread)`},
	}
	for _, c := range cases {
		id, err := ResolveID(ids, c.want)
		if id != c.id || (err == nil) != (c.err == "") || err != nil && err.Error() != c.err {
			t.Errorf("%q: %q, %v; want %q, %q", c.want, id, err, c.id, c.err)
		}
	}
}

// A title is matched whole ignoring case, else in part; several matches are listed, at most
// five, and none is picked.
func TestResolveTitle(t *testing.T) {
	ids := []string{"t:1", "t:2", "t:3", "t:4", "t:5", "t:6", "t:7", "t:8"}
	titles := []string{"Bread", "Rye bread", "Sourdough bread", "Bread roll", "Flatbread", "Breadfruit", "Toast", "Anarchism"}
	cases := []struct{ want, id, err string }{
		{"bread", "t:1", ""},
		{"ANARCHISM", "t:8", ""},
		{"toas", "t:7", ""},
		{"sourdough", "t:3", ""},
		{"rea", "", `6 documents have a title containing "rea": t:1 "Bread", t:2 "Rye bread", t:3 "Sourdough bread", t:4 "Bread roll", t:5 "Flatbread" and 1 more; give one with --doc ID, or a longer --title`},
		{"croissant", "", `no document titled "croissant" (titles are matched ignoring case, whole or in part)`},
	}
	for _, c := range cases {
		id, err := ResolveTitle(ids, titles, c.want)
		if id != c.id || (err == nil) != (c.err == "") || err != nil && err.Error() != c.err {
			t.Errorf("%q: %q, %v; want %q, %q", c.want, id, err, c.id, c.err)
		}
	}
	dup := []string{"Bread", "bread"}
	if _, err := ResolveTitle([]string{"a:1", "b:1"}, dup, "Bread"); err == nil || !strings.HasPrefix(err.Error(), `2 documents are titled "Bread": a:1 "Bread", b:1 "bread"`) {
		t.Errorf("two documents with the title: %v", err)
	}
}

// A deleted document is neither a neighbour nor a query: the files' newest row of it is a
// tombstone.
func TestFindLeavesOutDeleted(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := vectorfile.NewParquet(vectorfile.ParquetOptions{Dir: dir, Dim: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []schemas.DocVector{
		{DocID: "t:q", Title: "Query", Version: "1", Space: "sp", Vector: []float32{1, 0}},
		{DocID: "t:near", Title: "Near", Version: "1", Space: "sp", Vector: []float32{0.9, 0.1}},
		{DocID: "t:far", Title: "Far", Version: "1", Space: "sp", Vector: []float32{0, 1}},
	} {
		if err := s.Write(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, schemas.Deletion{DocID: "t:near", Source: "t", Version: "1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := Find(dir, Of{DocID: "t:q"}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if r.Among != 2 || len(r.Hits) != 1 || r.Hits[0].DocID != "t:far" {
		t.Fatalf("neighbours of t:q among %d: %+v, want only t:far", r.Among, r.Hits)
	}
	if _, err := Find(dir, Of{DocID: "t:near"}, 1); err == nil || !strings.Contains(err.Error(), "no document") {
		t.Fatalf("the deleted document as the query: %v", err)
	}
}
