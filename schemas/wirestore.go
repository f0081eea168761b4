package schemas

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The cluster's chunk store on Kafka (WIRE.md, "The chunk store"): P.windows holds one record
// per window embedding, keyed by the window key; P.manifests one record per document version,
// keyed by doc id. Both topics are compacted, so they are the store of record that every embed
// worker's local chunk cache replicates.

// Schema names of the store's records (HeaderSchema).
const (
	SchemaWindow   = "reignpipe.window/1"
	SchemaManifest = "reignpipe.manifest/1"
)

// Headers of a window record: its space (a replica of another space refuses it) and where the
// window was first embedded (the Parquet shard's doc_id, chunk_index and n_tokens columns).
const (
	HeaderGNFingerprint = "rp-gn-fingerprint"
	HeaderK             = "rp-k"
	HeaderS             = "rp-s"
	HeaderDim           = "rp-dim"
	HeaderDocID         = "rp-doc-id"
	HeaderChunkIndex    = "rp-chunk-index"
	HeaderNTokens       = "rp-n-tokens"
)

// WindowKeyString is a window key as the key of its P.windows record: 16 lowercase hex digits.
// A compacted topic compacts by the key's exact bytes, so the key has exactly one spelling
// (ParseWindowKey refuses any other: upper case, no padding, a prefix) and two records of one
// window always collapse into one. Hex rather than 8 raw bytes so kcat, jq and logs show it as
// the cache and verify print it.
func WindowKeyString(key uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[key&15]
		key >>= 4
	}
	return string(b[:])
}

// ParseWindowKey is the inverse of WindowKeyString, refusing every other spelling.
func ParseWindowKey(s string) (uint64, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("window key %q is not 16 hex digits", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return 0, fmt.Errorf("window key %q is not 16 lowercase hex digits", s)
		}
	}
	return strconv.ParseUint(s, 16, 64)
}

// AppendWindowValue appends a window record's value: the embedding as dim little-endian
// float32, nothing else (its space is in the headers), so any client reads it as an array.
func AppendWindowValue(dst []byte, emb []float32) []byte { return appendFloats(dst, emb) }

// DecodeWindowValue fills dst (len dim) from a window record's value.
func DecodeWindowValue(v []byte, dst []float32) error {
	if len(v) != 4*len(dst) {
		return fmt.Errorf("window value of %d bytes, want %d (dim %d × 4)", len(v), 4*len(dst), len(dst))
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(v[4*i:]))
	}
	return nil
}

// StoreManifest is a document manifest on P.manifests: one document version's ordered window
// keys in a space, enough to rebuild its vector from the windows (DESIGN-INVARIANTS 3).
type StoreManifest struct {
	DocID, Version string
	ContentHash    uint64
	Fingerprint    string
	K, S, Dim      int
	Title, Source  string
	NTokens        int
	Keys           []uint64
}

var magicManifest = [4]byte{'R', 'P', 'M', 'F'}

// EncodeManifest appends the binary "RPMF" v1 value of m to dst.
func EncodeManifest(dst []byte, m StoreManifest) ([]byte, error) {
	if m.DocID == "" {
		return dst, errors.New("manifest without a doc id")
	}
	if len(m.Keys) > maxWireChunks {
		return dst, fmt.Errorf("manifest of %s: %d windows is over the %d limit", m.DocID, len(m.Keys), maxWireChunks)
	}
	for _, d := range []int{m.K, m.S, m.Dim, m.NTokens} {
		if d < 0 || d > math.MaxUint32 {
			return dst, fmt.Errorf("manifest of %s: field %d out of range", m.DocID, d)
		}
	}
	dst = append(dst, magicManifest[:]...)
	dst = append(dst, wireVersion)
	for _, s := range []string{m.DocID, m.Version, m.Fingerprint, m.Title, m.Source} {
		dst = appendWireString(dst, s)
	}
	dst = binary.LittleEndian.AppendUint64(dst, m.ContentHash)
	for _, d := range []int{m.K, m.S, m.Dim, m.NTokens, len(m.Keys)} {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(d))
	}
	for _, k := range m.Keys {
		dst = binary.LittleEndian.AppendUint64(dst, k)
	}
	return dst, nil
}

// DecodeManifest reads an "RPMF" v1 value, refusing anything its encoder could not have written.
func DecodeManifest(b []byte) (StoreManifest, error) {
	r := &wireReader{b: b}
	if err := r.header(magicManifest); err != nil {
		return StoreManifest{}, fmt.Errorf("manifest: %w", err)
	}
	var m StoreManifest
	m.DocID, m.Version, m.Fingerprint, m.Title, m.Source = r.str(), r.str(), r.str(), r.str(), r.str()
	m.ContentHash = r.u64()
	m.K, m.S, m.Dim, m.NTokens = int(r.u32()), int(r.u32()), int(r.u32()), int(r.u32())
	n := r.u32()
	if r.err == nil && n > maxWireChunks {
		r.err = fmt.Errorf("%d windows is over the %d limit", n, maxWireChunks)
	}
	if r.need(8 * int(n)) {
		m.Keys = make([]uint64, n)
		for i := range m.Keys {
			m.Keys[i] = r.u64()
		}
	}
	switch {
	case r.err != nil:
		return StoreManifest{}, fmt.Errorf("manifest: %w", r.err)
	case len(r.b) != 0:
		return StoreManifest{}, fmt.Errorf("manifest: %d bytes after the last key", len(r.b))
	case m.DocID == "":
		return StoreManifest{}, errors.New("manifest: empty doc id")
	}
	return m, nil
}
