package shardcache

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/indexrec"
)

// DefaultDeleteRetention is how long a deletion is remembered when Options.DeleteRetention is
// 0: run.delete_retention's default, which a pipeline passes in.
const DefaultDeleteRetention = 7 * 24 * time.Hour

// ErrSuperseded is PutManifest's answer to a manifest at a version that a deletion the cache
// remembers supersedes: the document stays deleted, nothing is recorded. Callers that keep
// such documents out count them (the engine checks Superseded before it embeds, so it rarely
// gets here).
var ErrSuperseded = errors.New("shardcache: a remembered deletion supersedes this version")

// Tombstone is the cache's memory of one deletion: its version and when the cache applied it.
type Tombstone = indexrec.Tombstone

// pendingDoc is what the next Flush writes for one document: a manifest put (man), or a
// deletion (gone: the manifest key goes; tomb, when the deletion had a version, is
// written). dropTomb deletes a stored tombstone: the document is back at a newer version, or
// the tombstone expired. A document is only ever in one of the states, so a manifest and a
// tombstone superseding it are never both stored.
type pendingDoc struct {
	man      *Manifest
	gone     bool
	tomb     *Tombstone
	dropTomb bool
}

// PutManifest records m; it is durable after the next Flush. Fingerprint, K and S default to
// the cache's and must match it: a manifest from another space could not be re-aggregated.
// A manifest at a version a remembered deletion supersedes is refused with ErrSuperseded
// (the document stays deleted); one at a newer version brings the document back and ends the
// deletion's memory.
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
	defer c.mu.Unlock()
	t, clear, err := c.tombstone(m.DocID)
	if err != nil {
		return err
	}
	if t != nil && schemas.Supersedes(t.Version, m.Version) {
		return fmt.Errorf("%w: %s at version %q, deleted at %q", ErrSuperseded, m.DocID, m.Version, t.Version)
	}
	c.manifests[m.DocID] = &pendingDoc{man: &m, dropTomb: clear}
	return nil
}

// DeleteManifest applies a deletion, durable at the next Flush: the document's manifest goes
// when the deletion supersedes its version (its windows stay: they are content-addressed and
// may be shared), and a deletion with a version is remembered for Options.DeleteRetention so
// that a manifest at a version it supersedes cannot bring the document back (PutManifest,
// Superseded). A deletion older than the manifest held does nothing. A deletion without a
// version removes whatever is held and is not remembered.
func (c *Cache) DeleteManifest(d schemas.Deletion) error {
	if d.DocID == "" {
		return errors.New("shardcache: DeleteManifest: empty DocID")
	}
	if err := c.enter(); err != nil {
		return err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok, err := c.manifest(d.DocID)
	if err != nil {
		return err
	}
	if ok && !schemas.Supersedes(d.Version, m.Version) {
		return nil // the held version is newer than the deletion
	}
	old, clear, err := c.tombstone(d.DocID)
	if err != nil {
		return err
	}
	p := &pendingDoc{gone: true}
	switch {
	case d.Version == "":
		// Removes what is held; a remembered deletion stays remembered.
		p.tomb, p.dropTomb = old, old == nil && clear
	case old != nil && schemas.CompareVersions(old.Version, d.Version) > 0:
		p.tomb = old // a later deletion is remembered already
	default:
		p.tomb = &Tombstone{DocID: d.DocID, Version: d.Version, When: time.Now().UnixNano()}
	}
	c.manifests[d.DocID] = p
	return nil
}

// Superseded says whether a deletion the cache remembers supersedes version of docID: an
// upsert at that version must not bring the document back. The engine asks before embedding
// a document, so a stale re-delivery costs no GN pass.
func (c *Cache) Superseded(docID, version string) (bool, error) {
	if err := c.enter(); err != nil {
		return false, err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	t, _, err := c.tombstone(docID)
	if err != nil || t == nil {
		return false, err
	}
	return schemas.Supersedes(t.Version, version), nil
}

// tombstone is docID's remembered deletion, pending or stored; nil when there is none or it
// has expired. clear says that a pending state writing no tombstone must delete a stored one.
// An expired tombstone counts as absent and is dropped at the next Flush. c.mu must be held.
func (c *Cache) tombstone(docID string) (live *Tombstone, clear bool, err error) {
	p := c.manifests[docID]
	if p != nil && p.tomb == nil {
		return nil, p.dropTomb, nil
	}
	t := (*Tombstone)(nil)
	if p != nil {
		t = p.tomb
	} else {
		v, closer, err := c.db.Get(indexrec.TombstoneKeyOf(docID))
		if errors.Is(err, pebble.ErrNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("shardcache: index: %w", err)
		}
		st, err := indexrec.DecodeTombstone(docID, v)
		_ = closer.Close()
		if err != nil {
			return nil, false, fmt.Errorf("shardcache: tombstone %q: %w", docID, err)
		}
		t = &st
	}
	if time.Since(time.Unix(0, t.When)) < c.opts.DeleteRetention {
		return t, true, nil
	}
	// A new state, not p changed: a Flush may be writing p. A deletion pending past its
	// retention still takes the manifest.
	c.manifests[docID] = &pendingDoc{gone: p != nil && p.gone, dropTomb: true}
	return nil, true, nil
}

// Tombstone returns the deletion the cache remembers for docID, if it has not expired.
func (c *Cache) Tombstone(docID string) (Tombstone, bool, error) {
	if err := c.enter(); err != nil {
		return Tombstone{}, false, err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	t, _, err := c.tombstone(docID)
	if err != nil || t == nil {
		return Tombstone{}, false, err
	}
	return *t, true, nil
}

func copyManifest(m *Manifest) Manifest {
	out := *m
	out.Keys = append([]uint64(nil), m.Keys...)
	return out
}

// Manifest returns the latest manifest put for docID; a deleted document has none.
func (c *Cache) Manifest(docID string) (Manifest, bool, error) {
	if err := c.enter(); err != nil {
		return Manifest{}, false, err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	m, known := c.pendingManifest(docID)
	if known {
		defer c.mu.Unlock()
		if m == nil {
			return Manifest{}, false, nil
		}
		return copyManifest(m), true, nil
	}
	c.mu.Unlock()
	return c.storedManifest(docID)
}

// manifest is Manifest with c.mu held.
func (c *Cache) manifest(docID string) (Manifest, bool, error) {
	if m, known := c.pendingManifest(docID); known {
		if m == nil {
			return Manifest{}, false, nil
		}
		return *m, true, nil
	}
	return c.storedManifest(docID)
}

// pendingManifest is docID's manifest as the next Flush leaves it, when that is known without
// the index: known and nil for a pending deletion. c.mu must be held.
func (c *Cache) pendingManifest(docID string) (m *Manifest, known bool) {
	p, ok := c.manifests[docID]
	if !ok || p.man == nil && !p.gone {
		return nil, false
	}
	return p.man, true
}

func (c *Cache) storedManifest(docID string) (Manifest, bool, error) {
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
// the index so memory stays proportional to the unflushed ones; a deleted document has none.
// fn must not call Close.
func (c *Cache) ScanManifests(fn func(Manifest) error) error {
	if err := c.enter(); err != nil {
		return err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	pend := make(map[string]*Manifest, len(c.manifests)) // nil: deleted
	for k, p := range c.manifests {
		switch {
		case p.man != nil:
			m := copyManifest(p.man)
			pend[k] = &m
		case p.gone:
			pend[k] = nil
		}
	}
	c.mu.Unlock()
	it, err := c.db.NewIter(&pebble.IterOptions{LowerBound: []byte{indexrec.PrefixManifest}, UpperBound: []byte{indexrec.PrefixManifest + 1}})
	if err != nil {
		return fmt.Errorf("shardcache: index: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		docID := string(it.Key()[1:])
		var m Manifest
		if p, ok := pend[docID]; ok {
			delete(pend, docID)
			if p == nil {
				continue
			}
			m = *p
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
	for k, p := range pend {
		if p != nil {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		if err := fn(*pend[k]); err != nil {
			return err
		}
	}
	return nil
}

// pendingDocs is what the next flushManifests writes; c.mu must be held.
func (c *Cache) pendingDocs() map[string]*pendingDoc {
	pend := make(map[string]*pendingDoc, len(c.manifests))
	for k, p := range c.manifests {
		pend[k] = p
	}
	return pend
}

// flushManifests writes pend (pendingDocs) in one batch; c.flushMu must be held, and the rows
// the manifests name are durable already.
func (c *Cache) flushManifests(pend map[string]*pendingDoc) error {
	if len(pend) == 0 {
		return nil
	}
	b := c.db.NewBatch()
	defer b.Close()
	for id, p := range pend {
		var err error
		switch {
		case p.man != nil:
			err = b.Set(indexrec.ManifestKeyOf(id), indexrec.EncodeManifest(*p.man), nil)
		case p.gone:
			err = b.Delete(indexrec.ManifestKeyOf(id), nil)
		}
		if err == nil && p.tomb != nil {
			err = b.Set(indexrec.TombstoneKeyOf(id), indexrec.EncodeTombstone(*p.tomb), nil)
		} else if err == nil && p.dropTomb {
			err = b.Delete(indexrec.TombstoneKeyOf(id), nil)
		}
		if err != nil {
			return fmt.Errorf("shardcache: index: %w", err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("shardcache: index: %w", err)
	}
	// Drop only what was not replaced meanwhile; a newer put or deletion waits for the next
	// Flush.
	c.mu.Lock()
	for id, p := range pend {
		if c.manifests[id] == p {
			delete(c.manifests, id)
		}
	}
	c.mu.Unlock()
	return nil
}
