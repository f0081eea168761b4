package shardcache

import (
	"errors"
	"fmt"
	"sort"

	"github.com/cockroachdb/pebble"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/indexrec"
)

// PutManifest records m; it is durable after the next Flush. Fingerprint, K and S default to
// the cache's and must match it: a manifest from another space could not be re-aggregated.
func (c *Cache) PutManifest(m Manifest) error {
	if m.DocID == "" {
		return errors.New("shardcache: PutManifest: empty DocID")
	}
	if m.Fingerprint == "" {
		m.Fingerprint = c.sp.Fingerprint
	}
	if m.K == 0 {
		m.K = c.sp.K
	}
	if m.S == 0 {
		m.S = c.sp.S
	}
	if m.Fingerprint != c.sp.Fingerprint || m.K != c.sp.K || m.S != c.sp.S {
		return fmt.Errorf("%w: manifest of %s has fingerprint=%q K=%d S=%d, cache has %s",
			ErrSpaceMismatch, m.DocID, m.Fingerprint, m.K, m.S, c.sp)
	}
	m.Keys = append([]uint64(nil), m.Keys...)
	if err := c.enter(); err != nil {
		return err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	c.manifests[m.DocID] = &m
	c.mu.Unlock()
	return nil
}

func copyManifest(m *Manifest) Manifest {
	out := *m
	out.Keys = append([]uint64(nil), m.Keys...)
	return out
}

// Manifest returns the latest manifest put for docID.
func (c *Cache) Manifest(docID string) (Manifest, bool, error) {
	if err := c.enter(); err != nil {
		return Manifest{}, false, err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	if m, ok := c.manifests[docID]; ok {
		out := copyManifest(m)
		c.mu.Unlock()
		return out, true, nil
	}
	c.mu.Unlock()
	v, closer, err := c.db.Get(indexrec.ManifestKeyOf(docID))
	if errors.Is(err, pebble.ErrNotFound) {
		return Manifest{}, false, nil
	}
	if err != nil {
		return Manifest{}, false, fmt.Errorf("shardcache: index: %w", err)
	}
	defer closer.Close()
	m, err := indexrec.DecodeManifest(v)
	if err != nil {
		return Manifest{}, false, fmt.Errorf("shardcache: manifest %q: %w", docID, err)
	}
	return m, true, nil
}

// ScanManifests calls fn for every document's latest manifest, flushed or not, streaming from
// the index so memory stays proportional to the unflushed ones. fn must not call Close.
func (c *Cache) ScanManifests(fn func(Manifest) error) error {
	if err := c.enter(); err != nil {
		return err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	pend := make(map[string]Manifest, len(c.manifests))
	for k, m := range c.manifests {
		pend[k] = copyManifest(m)
	}
	c.mu.Unlock()
	it, err := c.db.NewIter(&pebble.IterOptions{LowerBound: []byte{indexrec.PrefixManifest}, UpperBound: []byte{indexrec.PrefixManifest + 1}})
	if err != nil {
		return fmt.Errorf("shardcache: index: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		docID := string(it.Key()[1:])
		m, ok := pend[docID]
		if ok {
			delete(pend, docID)
		} else if m, err = indexrec.DecodeManifest(it.Value()); err != nil {
			_ = it.Close()
			return fmt.Errorf("shardcache: manifest %q: %w", docID, err)
		}
		if err := fn(m); err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("shardcache: index: %w", err)
	}
	rest := make([]string, 0, len(pend))
	for k := range pend {
		rest = append(rest, k)
	}
	sort.Strings(rest)
	for _, k := range rest {
		if err := fn(pend[k]); err != nil {
			return err
		}
	}
	return nil
}
