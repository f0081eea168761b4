package query

import (
	"container/list"
	"sync"
	"sync/atomic"

	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// DefaultQueryCacheWindows is serve's query cache (serve --query-cache): 16,384 windows, about
// 26 MiB at dimension 384 (4*dim bytes of vector and ~100 of bookkeeping each), enough for
// a service's recent queries of a few hundred long documents.
const DefaultQueryCacheWindows = 16384

// corpus is the chunk store the corpus side fills, as a query reads it: a shardcache.Reader
// beside the pipeline that writes it, or the replica of the cluster's store this process
// keeps.
type corpus interface {
	Get(key uint64, dst []float32) (bool, error)
}

// store is what the query side's embed step looks windows up in and adds the GN's to: the
// corpus store, read only, and a bounded in-memory cache of the query windows the corpus
// lacks. Client data never reaches the corpus cache: no row or manifest under a client's id.
type store struct {
	corpus corpus   // nil: no corpus store
	recent *lruVecs // nil: no query cache
}

func (s *store) Get(key uint64, dst []float32) (bool, error) {
	if s.recent != nil && s.recent.get(key, dst) {
		return true, nil
	}
	if s.corpus == nil {
		return false, nil
	}
	return s.corpus.Get(key, dst)
}

// Add keeps what the GN embedded for a query in the query cache only.
func (s *store) Add(r shardcache.Row) (bool, error) {
	if s.recent == nil {
		return false, nil
	}
	return s.recent.add(r.Key, r.Embedding), nil
}

// lruVecs is a window key -> embedding LRU of at most max entries.
type lruVecs struct {
	max int

	mu    sync.Mutex
	m     map[uint64]*list.Element
	order *list.List // of *lruEntry, most recent first

	hits atomic.Int64
}

type lruEntry struct {
	key uint64
	emb []float32
}

func newLRU(max int) *lruVecs {
	return &lruVecs{max: max, m: make(map[uint64]*list.Element), order: list.New()}
}

func (l *lruVecs) get(key uint64, dst []float32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[key]
	if !ok {
		return false
	}
	l.order.MoveToFront(e)
	copy(dst, e.Value.(*lruEntry).emb)
	l.hits.Add(1)
	return true
}

func (l *lruVecs) add(key uint64, emb []float32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[key]; ok {
		l.order.MoveToFront(e)
		return false
	}
	var ent *lruEntry
	if l.order.Len() >= l.max {
		// Reuse the evicted entry's vector: a full cache allocates nothing per add.
		old := l.order.Back()
		ent = old.Value.(*lruEntry)
		delete(l.m, ent.key)
		l.order.Remove(old)
		ent.key = key
		ent.emb = append(ent.emb[:0], emb...)
	} else {
		ent = &lruEntry{key: key, emb: append([]float32(nil), emb...)}
	}
	l.m[key] = l.order.PushFront(ent)
	return true
}

func (l *lruVecs) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}
