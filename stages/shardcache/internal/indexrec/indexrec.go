// Package indexrec is the record layout of a shardcache's Pebble index: its key space (one
// prefix byte per record kind) and the encodings of the values -- the cache's GN space, the
// per-shard "indexed" markers, document manifests, deleted documents' tombstones
// (tombstone.go), and the per-key locations of caches from before the key table. Each
// decoder refuses what its encoder could not have written.
package indexrec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
)

// Manifest lists the ordered window keys of one document version, enough to re-aggregate its
// vector from the cache without re-tokenizing (shardcache.Manifest).
type Manifest struct {
	DocID, Version string
	ContentHash    uint64
	Fingerprint    string
	K, S           int
	Keys           []uint64
	// Title, Source and NTokens (content tokens) let a re-aggregation publish complete rows.
	Title, Source string
	NTokens       int
}

// Pebble key space. One-byte prefixes keep the record kinds in disjoint ranges so
// ScanManifests and the marker scan on Open iterate only their own kind (PrefixTombstone,
// 'd', is in tombstone.go).
const (
	PrefixKey      = 'k' // 'k' + key (8 bytes BE) -> Location; caches from before index.hash
	PrefixShard    = 's' // 's' + seq (8 bytes BE) -> shard Marker
	PrefixManifest = 'm' // 'm' + doc id -> manifest
	ConfigKey      = "c" // -> space of the cache
)

const valueVersion = 1

var errCorruptValue = errors.New("shardcache: corrupt index value")

// KeyOf is the Pebble key of a window key's location (caches from before the key table).
func KeyOf(key uint64) [9]byte {
	var b [9]byte
	b[0] = PrefixKey
	binary.BigEndian.PutUint64(b[1:], key)
	return b
}

// ShardKeyOf is the Pebble key of shard seq's marker.
func ShardKeyOf(seq uint64) [9]byte {
	var b [9]byte
	b[0] = PrefixShard
	binary.BigEndian.PutUint64(b[1:], seq)
	return b
}

// ManifestKeyOf is the Pebble key of docID's manifest.
func ManifestKeyOf(docID string) []byte {
	return append([]byte{PrefixManifest}, docID...)
}

// Location is where a cached row lives. EncodeLocation and DecodeLocation are the value of the
// per-key Pebble entries of caches from before index.hash; Open now only deletes those, and
// tests write them to build such a cache.
type Location struct {
	Shard uint64
	Row   int32
}

// EncodeLocation appends l's value to dst.
func EncodeLocation(dst []byte, l Location) []byte {
	dst = append(dst, valueVersion)
	dst = binary.AppendUvarint(dst, l.Shard)
	return binary.AppendUvarint(dst, uint64(l.Row))
}

// DecodeLocation decodes an EncodeLocation value.
func DecodeLocation(b []byte) (Location, error) {
	if len(b) == 0 || b[0] != valueVersion {
		return Location{}, errCorruptValue
	}
	b = b[1:]
	shard, n := binary.Uvarint(b)
	if n <= 0 {
		return Location{}, errCorruptValue
	}
	b = b[n:]
	row, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) || row > math.MaxInt32 {
		return Location{}, errCorruptValue
	}
	return Location{Shard: shard, Row: int32(row)}, nil
}

// Marker records that a shard's keys are all in the index, with the counts Stats reports.
type Marker struct {
	Rows, Bytes int64
}

// EncodeMarker is m's value.
func EncodeMarker(m Marker) []byte {
	b := []byte{valueVersion}
	b = binary.AppendUvarint(b, uint64(m.Rows))
	return binary.AppendUvarint(b, uint64(m.Bytes))
}

// DecodeMarker decodes an EncodeMarker value.
func DecodeMarker(b []byte) (Marker, error) {
	if len(b) == 0 || b[0] != valueVersion {
		return Marker{}, errCorruptValue
	}
	b = b[1:]
	rows, n := binary.Uvarint(b)
	if n <= 0 || rows > math.MaxInt64 {
		return Marker{}, errCorruptValue
	}
	b = b[n:]
	bytes, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) || bytes > math.MaxInt64 {
		return Marker{}, errCorruptValue
	}
	return Marker{Rows: int64(rows), Bytes: int64(bytes)}, nil
}

// EncodeSpace is the value of ConfigKey: the space the cache was created for.
func EncodeSpace(sp shardfile.Space) []byte {
	b := []byte{valueVersion}
	b = appendString(b, sp.Fingerprint)
	b = binary.AppendUvarint(b, uint64(sp.Dim))
	b = binary.AppendUvarint(b, uint64(sp.K))
	return binary.AppendUvarint(b, uint64(sp.S))
}

// DecodeSpace decodes an EncodeSpace value.
func DecodeSpace(b []byte) (shardfile.Space, error) {
	r := reader{b: b}
	if r.byte() != valueVersion {
		return shardfile.Space{}, errCorruptValue
	}
	sp := shardfile.Space{Fingerprint: r.string(), Dim: r.int(), K: r.int(), S: r.int()}
	if r.err != nil || len(r.b) != 0 {
		return shardfile.Space{}, errCorruptValue
	}
	return sp, nil
}

// Manifest encoding: version, DocID, Version, Fingerprint (uvarint length + bytes), ContentHash
// (8 bytes LE), K, S (uvarint), key count (uvarint), keys (8 bytes LE each).
// manifestVersion2 adds Title, Source and NTokens after the fingerprint, so re-aggregated
// vectors keep the metadata of the run that cut the windows. Version-1 values still decode.
const manifestVersion2 = 2

// EncodeManifest is m's value (the current version).
func EncodeManifest(m Manifest) []byte {
	b := make([]byte, 0, 40+len(m.DocID)+len(m.Version)+len(m.Fingerprint)+len(m.Title)+len(m.Source)+8*len(m.Keys))
	b = append(b, manifestVersion2)
	b = appendString(b, m.DocID)
	b = appendString(b, m.Version)
	b = appendString(b, m.Fingerprint)
	b = appendString(b, m.Title)
	b = appendString(b, m.Source)
	b = binary.AppendUvarint(b, uint64(m.NTokens))
	b = binary.LittleEndian.AppendUint64(b, m.ContentHash)
	b = binary.AppendUvarint(b, uint64(m.K))
	b = binary.AppendUvarint(b, uint64(m.S))
	b = binary.AppendUvarint(b, uint64(len(m.Keys)))
	for _, k := range m.Keys {
		b = binary.LittleEndian.AppendUint64(b, k)
	}
	return b
}

// DecodeManifest decodes a manifest value of either version.
func DecodeManifest(b []byte) (Manifest, error) {
	r := reader{b: b}
	v := r.byte()
	if v != valueVersion && v != manifestVersion2 {
		return Manifest{}, errCorruptValue
	}
	m := Manifest{DocID: r.string(), Version: r.string(), Fingerprint: r.string()}
	if v == manifestVersion2 {
		m.Title, m.Source, m.NTokens = r.string(), r.string(), r.int()
	}
	m.ContentHash, m.K, m.S = r.u64(), r.int(), r.int()
	n := r.uvarint()
	// The count is checked against the bytes left before allocating, so a corrupt count
	// cannot make us allocate gigabytes.
	if r.err != nil || n != uint64(len(r.b))/8 || len(r.b)%8 != 0 {
		return Manifest{}, errCorruptValue
	}
	m.Keys = make([]uint64, n)
	for i := range m.Keys {
		m.Keys[i] = r.u64()
	}
	if r.err != nil || len(r.b) != 0 {
		return Manifest{}, errCorruptValue
	}
	return m, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes with a sticky error so decoders read like the encoders.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() { r.err, r.b = errCorruptValue, nil }

func (r *reader) byte() byte {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) int() int {
	v := r.uvarint()
	if v > math.MaxInt32 {
		r.fail()
		return 0
	}
	return int(v)
}

func (r *reader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) u64() uint64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (l Location) String() string { return fmt.Sprintf("shard %d row %d", l.Shard, l.Row) }
