package indexrec

import "encoding/binary"

// PrefixTombstone keys a deleted document's tombstone: 'd' + doc id -> Tombstone. A tombstone
// replaces the document's manifest when a deletion with a version removes it, and keeps an
// upsert at a version the deletion supersedes from bringing the manifest back, for as long as
// the cache remembers deletions.
const PrefixTombstone = 'd'

// Tombstone is the cache's memory of one deletion: the deletion's version and when the cache
// applied it (Unix nanoseconds), from which its retention runs.
type Tombstone struct {
	DocID, Version string
	When           int64
}

// TombstoneKeyOf is the Pebble key of docID's tombstone.
func TombstoneKeyOf(docID string) []byte {
	return append([]byte{PrefixTombstone}, docID...)
}

// EncodeTombstone is t's value: version byte, Version (uvarint length + bytes), When (uvarint).
// The doc id is the key's.
func EncodeTombstone(t Tombstone) []byte {
	b := make([]byte, 0, 12+len(t.Version))
	b = append(b, valueVersion)
	b = appendString(b, t.Version)
	return binary.AppendUvarint(b, uint64(t.When))
}

// DecodeTombstone decodes the value of docID's tombstone.
func DecodeTombstone(docID string, b []byte) (Tombstone, error) {
	r := reader{b: b}
	if r.byte() != valueVersion {
		return Tombstone{}, errCorruptValue
	}
	t := Tombstone{DocID: docID, Version: r.string()}
	when := r.uvarint()
	if r.err != nil || len(r.b) != 0 || when > 1<<63-1 {
		return Tombstone{}, errCorruptValue
	}
	t.When = int64(when)
	return t, nil
}
