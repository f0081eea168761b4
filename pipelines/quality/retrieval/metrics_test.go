package retrieval

import (
	"bytes"
	"math"
	"reflect"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestMetrics(t *testing.T) {
	// Graded row: d1=2, d2=1, d4=1; d3 explicitly 0; d5 unjudged (0).
	rels := map[string]int{"d1": 2, "d2": 1, "d3": 0, "d4": 1}
	ranked := []string{"d2", "d5", "d1", "d4"}
	// Ideal@3 and @10 (only three positive grades): 3/log2(2) + 1/log2(3) + 1/log2(4)
	// = 3 + 0.630930 + 0.5 = 4.130930.
	cases := []struct {
		name          string
		ranked        []string
		rels          map[string]int
		k, minRel     int
		ndcg, p, r, a float64
	}{
		// DCG@3 = 1/1 + 0/log2(3) + 3/log2(4) = 2.5; nDCG = 2.5/4.130930.
		// P@3 = 2/3 (d2, d1); R@3 = 2/3 of {d1,d2,d4}; AP = (1/1 + 2/3)/min(3,3) = 5/9.
		{"k3", ranked, rels, 3, 1, 0.6051906348295047, 2.0 / 3, 2.0 / 3, 5.0 / 9},
		// DCG@10 = 2.5 + 1/log2(5) = 2.930677; P@10 = 3/10; R = 3/3;
		// AP = (1/1 + 2/3 + 3/4)/min(3,10) = 2.416667/3.
		{"k10", ranked, rels, 10, 1, 0.7094472026641538, 0.3, 1, 0.8055555555555555},
		// minRel=2: only d1 relevant. P@3 = 1/3; R = 1/1; AP = (1/3)/min(1,3). nDCG unaffected.
		{"minRel2", ranked, rels, 3, 2, 0.6051906348295047, 1.0 / 3, 1, 1.0 / 3},
		// A repeated id earns nothing at its second rank: DCG = 1 + 0 + 1/log2(4) = 1.5,
		// ideal = 1 + 1/log2(3) = 1.630930; P@3 = 2/3; AP = (1/1 + 2/3)/2.
		{"duplicate", []string{"x", "x", "y"}, map[string]int{"x": 1, "y": 1}, 3, 1,
			0.9197207891481876, 2.0 / 3, 1, 5.0 / 6},
		// Negative grade gains 0: DCG = 0 + 1/log2(3); ideal = 1/log2(2) = 1. minRel 1: R=1.
		// AP = (1/2)/min(1,2) = 0.5.
		{"negative", []string{"x", "y"}, map[string]int{"x": -1, "y": 1}, 2, 1,
			0.6309297535714575, 0.5, 1, 0.5},
		// Five relevant, k=2, both hits relevant: AP = (1/1 + 2/2)/min(5,2) = 1; R = 2/5.
		{"R>k", []string{"a", "b"}, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}, 2, 1,
			1, 1, 0.4, 1},
		{"no relevant", ranked, map[string]int{"d1": 0}, 3, 1, 0, 0, 0, 0},
		{"k0", ranked, rels, 0, 1, 0, 0, 0, 0},
		{"empty ranking", nil, rels, 3, 1, 0, 0, 0, 0},
	}
	for _, c := range cases {
		got := [4]float64{NDCG(c.ranked, c.rels, c.k), Precision(c.ranked, c.rels, c.k, c.minRel),
			Recall(c.ranked, c.rels, c.k, c.minRel), AveragePrecision(c.ranked, c.rels, c.k, c.minRel)}
		want := [4]float64{c.ndcg, c.p, c.r, c.a}
		for i := range got {
			if !near(got[i], want[i]) {
				t.Errorf("%s: [nDCG P R AP] = %v, want %v", c.name, got, want)
				break
			}
		}
	}
}

func TestReport(t *testing.T) {
	if _, e1 := NewReport(0, 1); e1 == nil {
		t.Error("k=0 accepted")
	} else if _, e2 := NewReport(10, 0); e2 == nil {
		t.Error("minRel=0 accepted")
	}
	r, err := NewReport(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	// q1: perfect, all metrics 1. q2: [b a], rel a only: nDCG = (1/log2(3))/1 = 0.630930,
	// P@2 = 1/2, R = 1, AP = (1/2)/1. q3: nothing relevant, skipped.
	k1, e1 := r.Add("q1", []string{"a"}, map[string]int{"a": 1})
	k2, e2 := r.Add("q2", []string{"b", "a"}, map[string]int{"a": 3})
	k3, e3 := r.Add("q3", []string{"a"}, map[string]int{})
	if !k1 || !k2 || k3 || e1 != nil || e2 != nil || e3 != nil {
		t.Fatalf("Add kept %v %v %v, errors %v %v %v", k1, k2, k3, e1, e2, e3)
	}
	if _, err := r.Add("q1", nil, nil); err == nil {
		t.Error("duplicate query accepted")
	}
	if r.Skipped != 1 || len(r.PerQuery) != 2 {
		t.Fatalf("skipped %d kept %d", r.Skipped, len(r.PerQuery))
	}
	// q1 P@2 = 1/2 (one hit, denominator k). Means: nDCG (1+0.630930)/2 = 0.815465,
	// P (0.5+0.5)/2 = 0.5, R 1, AP (1+0.5)/2 = 0.75.
	m := r.Mean()
	if !near(m.NDCG, (1+0.6309297535714575)/2) || !near(m.P, 0.5) || !near(m.R, 1) || !near(m.AP, 0.75) {
		t.Errorf("Mean = %+v", m)
	}
	if col := r.Column(func(q QueryMetrics) float64 { return q.AP }); !reflect.DeepEqual(col, []float64{1, 0.5}) {
		t.Errorf("Column(AP) = %v", col)
	}
	var buf bytes.Buffer
	if err := WritePerQuery(&buf, r); err != nil {
		t.Fatal(err)
	}
	want := "query-id\tndcg@2\tP@2\tR@2\tAP@2\n" +
		"q1\t1.000000\t0.500000\t1.000000\t1.000000\n" +
		"q2\t0.630930\t0.500000\t1.000000\t0.500000\n"
	if buf.String() != want {
		t.Errorf("TSV:\n%s\nwant:\n%s", buf.String(), want)
	}
	bad, _ := NewReport(1, 1)
	bad.Add("a\tb", []string{"x"}, map[string]int{"x": 1})
	if err := WritePerQuery(&buf, bad); err == nil {
		t.Error("tab in query id accepted")
	}
	if m := (&Report{}).Mean(); m.NDCG != 0 {
		t.Errorf("empty mean = %+v", m)
	}
}
