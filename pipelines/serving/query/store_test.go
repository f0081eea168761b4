package query

import (
	"testing"

	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// corpusMap is a corpus store of fixed windows.
type corpusMap map[uint64][]float32

func (c corpusMap) Get(key uint64, dst []float32) (bool, error) {
	v, ok := c[key]
	copy(dst, v)
	return ok, nil
}

// The query side's store: corpus windows come from the corpus, a query's own windows go to the
// bounded LRU only (the corpus is only read), the least recently used one leaves first.
func TestStore(t *testing.T) {
	corp := corpusMap{1: {1, 1}}
	s := &store{corpus: corp, recent: newLRU(2)}
	add := func(key uint64) {
		if added, err := s.Add(shardcache.Row{Key: key, Embedding: []float32{float32(key), 0}}); !added || err != nil {
			t.Fatalf("Add(%d) = %v, %v", key, added, err)
		}
	}
	has := func(key uint64) bool {
		dst := make([]float32, 2)
		ok, err := s.Get(key, dst)
		if err != nil {
			t.Fatal(err)
		}
		if ok && key != 1 && dst[0] != float32(key) {
			t.Fatalf("Get(%d) = %v", key, dst)
		}
		return ok
	}
	add(10)
	add(11)
	if added, _ := s.Add(shardcache.Row{Key: 10, Embedding: []float32{10, 0}}); added {
		t.Fatal("a window held was added again")
	}
	has(10) // 11 is now the least recently used
	add(12)
	for _, c := range []struct {
		key  uint64
		want bool
	}{{1, true}, {10, true}, {11, false}, {12, true}, {13, false}} {
		if got := has(c.key); got != c.want {
			t.Errorf("Get(%d) = %v, want %v", c.key, got, c.want)
		}
	}
	if s.recent.len() != 2 {
		t.Fatalf("query cache holds %d windows, bound 2", s.recent.len())
	}
	none := &store{corpus: corp}
	if added, err := none.Add(shardcache.Row{Key: 5, Embedding: []float32{5, 0}}); added || err != nil {
		t.Fatalf("without a query cache Add = %v, %v", added, err)
	}
}
