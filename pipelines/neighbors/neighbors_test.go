package neighbors

import (
	"context"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/schemas"
)

// The query document is picked by id, else by title (case-insensitive), else the first id;
// equal scores rank by ascending id, as in eval; two spaces are never compared.
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
	if _, err := Find(dir, Of{DocID: "t:q"}, 1); err == nil || !strings.Contains(err.Error(), "not comparable") {
		t.Fatalf("mixed spaces: %v", err)
	}
}
