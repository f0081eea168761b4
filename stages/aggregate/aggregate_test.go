package aggregate

import (
	"math"
	"testing"
)

func TestMeanPool(t *testing.T) {
	m, err := NewMeanPool(2, "fp")
	if err != nil {
		t.Fatal(err)
	}
	if m.Space() != "gn-meanpool:fp" {
		t.Fatalf("space %q", m.Space())
	}
	cases := []struct {
		name   string
		chunks [][]float32
		want   []float32
	}{
		{"single chunk is itself", [][]float32{{0.6, 0.8}}, []float32{0.6, 0.8}},
		{"orthogonal pair", [][]float32{{1, 0}, {0, 1}}, []float32{float32(1 / math.Sqrt2), float32(1 / math.Sqrt2)}},
		{"unnormalised input", [][]float32{{3, 0}, {3, 8}}, []float32{0.6, 0.8}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := make([]float32, 2)
			if err := m.Aggregate(c.chunks, out); err != nil {
				t.Fatal(err)
			}
			for i := range out {
				if math.Abs(float64(out[i]-c.want[i])) > 1e-6 {
					t.Fatalf("got %v want %v", out, c.want)
				}
			}
		})
	}
}

func TestMeanPoolErrors(t *testing.T) {
	m, _ := NewMeanPool(2, "fp")
	out := make([]float32, 2)
	for name, chunks := range map[string][][]float32{
		"no chunks": nil,
		"wrong dim": {{1, 2, 3}},
		"zero sum":  {{1, 0}, {-1, 0}},
		"nan":       {{float32(math.NaN()), 0}},
	} {
		if err := m.Aggregate(chunks, out); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := m.Aggregate([][]float32{{1, 0}}, make([]float32, 3)); err == nil {
		t.Error("wrong output size accepted")
	}
	if _, err := NewMeanPool(0, "fp"); err == nil {
		t.Error("dim 0 accepted")
	}
	if _, err := NewMeanPool(4, ""); err == nil {
		t.Error("empty fingerprint accepted")
	}
}

type fixed struct {
	space string
	dim   int
}

func (f fixed) Space() string { return f.space }
func (f fixed) Dim() int      { return f.dim }
func (f fixed) Aggregate(_ [][]float32, out []float32) error {
	for i := range out {
		out[i] = float32(f.dim)
	}
	return nil
}

func TestSingleChunkRouter(t *testing.T) {
	r := SingleChunkRouter{Multi: fixed{"reign:x", 3}, Single: fixed{"gn-meanpool:y", 2}}
	if a := r.Route(1); a.Space() != "gn-meanpool:y" || a.Dim() != 2 {
		t.Fatalf("one chunk routed to %s", a.Space())
	}
	if a := r.Route(2); a.Space() != "reign:x" {
		t.Fatalf("two chunks routed to %s", a.Space())
	}
	out := make([]float32, 2)
	if err := r.Aggregate([][]float32{{1, 0}}, out); err != nil || out[0] != 2 {
		t.Fatalf("%v %v", out, err)
	}
}
