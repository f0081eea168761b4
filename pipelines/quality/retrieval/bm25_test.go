package retrieval

import (
	"fmt"
	"math"
	"reflect"
	"testing"
)

func TestBM25HandComputed(t *testing.T) {
	x, err := NewBM25(DefaultK1, DefaultB)
	if err != nil {
		t.Fatal(err)
	}
	for i, toks := range [][]string{{"cat", "sat", "mat"}, {"dog", "sat"}, {"cat", "cat", "dog", "log"}} {
		if err := x.Index(fmt.Sprintf("d%d", i+1), toks); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Index("d1", nil); err == nil {
		t.Error("duplicate id accepted")
	}
	// N = 3, avgdl = 9/3 = 3. norm(|d|) = 1 − 0.4 + 0.4·|d|/3: d1 1, d2 0.866667, d3 1.133333.
	// idf(cat) = idf(dog) = ln(1 + (3−2+0.5)/(2+0.5)) = ln 1.6 = 0.470004;
	// idf(mat) = ln(1 + 2.5/1.5) = ln(8/3) = 0.980829.
	// tf-part = tf·1.9/(tf + 0.9·norm).
	lnA, lnB := math.Log(1.6), math.Log(8.0/3)
	cases := []struct {
		name    string
		q       []string
		k       int
		exclude string
		want    []Hit
	}{
		// cat: d3 tf=2 → 3.8/(2 + 1.02) = 1.258278 → 0.591395; d1 tf=1 → 1.9/1.9 = 1 → 0.470004.
		{"cat", []string{"cat"}, 10, "", []Hit{{"d3", 0.5913952950774156}, {"d1", lnA}}},
		// dog+mat: d1 mat 1 → 0.980829; d2 dog 1.9/(1+0.78) = 1.067416 → 0.501689;
		// d3 dog 1.9/(1+1.02) = 0.940594 → 0.442083.
		{"dog mat", []string{"dog", "mat"}, 10, "", []Hit{
			{"d1", lnB}, {"d2", 0.5016892671724144}, {"d3", 0.44208262156777106}}},
		{"k1", []string{"dog", "mat"}, 1, "", []Hit{{"d1", lnB}}},
		{"exclude", []string{"dog", "mat"}, 2, "d1", []Hit{
			{"d2", 0.5016892671724144}, {"d3", 0.44208262156777106}}},
		// A repeated query term counts twice: d1 = 2·ln 1.6.
		{"repeat", []string{"cat", "cat"}, 1, "d3", []Hit{{"d1", 2 * lnA}}},
		{"oov", []string{"zebra"}, 10, "", nil},
		{"k0", []string{"cat"}, 0, "", nil},
	}
	for _, c := range cases {
		got := x.Search(c.q, c.k, c.exclude)
		ok := len(got) == len(c.want)
		for i := 0; ok && i < len(got); i++ {
			ok = got[i].ID == c.want[i].ID && near(got[i].Score, c.want[i].Score)
		}
		if !ok {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestBM25Validation(t *testing.T) {
	for _, p := range [][2]float64{{-1, 0.4}, {0.9, 1.1}, {math.NaN(), 0.4}, {0.9, math.NaN()}, {math.Inf(1), 0.5}} {
		if _, err := NewBM25(p[0], p[1]); err == nil {
			t.Errorf("NewBM25(%v, %v) accepted", p[0], p[1])
		}
	}
	x, _ := NewBM25(1.2, 0.75)
	if x.Search([]string{"a"}, 5, "") != nil {
		t.Error("empty index returned hits")
	}
	if err := x.Index("", []string{"a"}); err == nil {
		t.Error("empty id accepted")
	}
	// All documents empty: avgdl 0 must not divide by zero.
	x.Index("e", nil)
	x.Index("f", []string{"a"})
	x.Index("g", nil)
	if h := x.Search([]string{"a"}, 5, ""); len(h) != 1 || math.IsNaN(h[0].Score) {
		t.Errorf("hits %v", h)
	}
}

func TestTokenize(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"The Cat sat on the MAT.", []string{"cat", "sat", "mat"}},
		{"COVID-19 in 2020, isn't it?", []string{"covid", "19", "2020", "isn", "t"}},
		{"Ünïcödé straße café", []string{"ünïcödé", "straße", "café"}},
		{"  ... ", nil},
		{"", nil},
	}
	for _, c := range cases {
		if got := Tokenize(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Tokenize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
