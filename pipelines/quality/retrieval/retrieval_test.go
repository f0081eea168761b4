package retrieval

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
)

func TestTopK(t *testing.T) {
	// Query (1,0) against: a·q = 1, b·q = 0.6, c·q = 0.8, d·q = 1 (ties a; "a" < "d").
	corpus := [][]float32{{1, 0}, {0.6, 0.8}, {0.8, 0.6}, {1, 0}}
	ids := []string{"a", "b", "c", "d"}
	q := []float32{1, 0}
	cases := []struct {
		k       int
		exclude string
		want    []string
	}{
		{3, "", []string{"a", "d", "c"}},
		{2, "a", []string{"d", "c"}}, // top 3 = a,d,c; drop a; keep 2
		{10, "", []string{"a", "d", "c", "b"}},
		{10, "zz", []string{"a", "d", "c", "b"}},
		{1, "d", []string{"a"}},
		{0, "", nil},
	}
	for _, c := range cases {
		hits, err := TopK(q, corpus, ids, c.k, c.exclude)
		if err != nil {
			t.Fatal(err)
		}
		if got := HitIDs(hits); len(got) != len(c.want) || (len(got) > 0 && !reflect.DeepEqual(got, c.want)) {
			t.Errorf("k=%d exclude=%q: %v, want %v", c.k, c.exclude, got, c.want)
		}
	}
	if hits, _ := TopK(q, corpus, ids, 3, ""); math.Abs(hits[2].Score-0.8) > 1e-6 {
		t.Errorf("score of c = %v, want 0.8", hits[2].Score)
	}
}

func TestTopKErrors(t *testing.T) {
	nan := float32(math.NaN())
	_, e1 := TopK([]float32{1}, [][]float32{{1}}, nil, 1, "")              // id count mismatch
	_, e2 := TopK([]float32{1, 0}, [][]float32{{1}}, []string{"a"}, 1, "") // dim mismatch
	_, e3 := TopK([]float32{nan}, [][]float32{{1}}, []string{"a"}, 1, "")  // NaN score
	if e1 == nil || e2 == nil || e3 == nil {
		t.Errorf("errors %v, %v, %v", e1, e2, e3)
	}
}

// The heap must agree with a full sort on random data, including many exact ties.
func TestTopKMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		n, dim := 1+rng.IntN(200), 1+rng.IntN(9)
		corpus := make([][]float32, n)
		ids := make([]string, n)
		for i := range corpus {
			corpus[i] = make([]float32, dim)
			for j := range corpus[i] {
				corpus[i][j] = float32(rng.IntN(5)) // small integers make ties common
			}
			ids[i] = fmt.Sprintf("id%03d", rng.IntN(1000)*1000+i)
		}
		q := corpus[rng.IntN(n)]
		k := 1 + rng.IntN(n+2)
		var all []Hit
		for i := range corpus {
			all = append(all, Hit{ids[i], dot(q, corpus[i])})
		}
		sort.Slice(all, func(i, j int) bool { return better(all[i], all[j]) })
		got, err := TopK(q, corpus, ids, k, "")
		if err != nil {
			t.Fatal(err)
		}
		if want := all[:min(k, n)]; !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: got %v want %v", trial, got, want)
		}
	}
}
