package schemas

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// Wire formats of the Kafka topics in distributed mode. WIRE.md beside this file is the
// consumer-facing description; the two change together, and a format change bumps its version
// byte (readers refuse versions they do not know rather than misread them).
//
// Every record is keyed by the document id, so all records of one document land in one
// partition, in order. Record values:
//
//	raw documents     JSON object (RawDocument): third-party producers (kcat, scripts) write it by hand
//	chunk embeddings  binary "RPCE" v1 (EncodeChunkDoc)
//	document vectors  binary "RPDV" v1 (EncodeDocVector)
//
// Binary layouts are little-endian; strings are a uint32 byte length then UTF-8 bytes;
// float32 are IEEE 754. Compression is Kafka's own (record batches, zstd by default), so any
// client decompresses transparently.

// HeaderSchema names a record's wire format, e.g. "reignpipe.vector/1".
const HeaderSchema = "rp-schema"

// Schema names carried in HeaderSchema.
const (
	SchemaRawDocument = "reignpipe.raw-document/1"
	SchemaChunkDoc    = "reignpipe.chunk-embeddings/1"
	SchemaDocVector   = "reignpipe.vector/1"
	SchemaDeadLetter  = "reignpipe.dead-letter/1"
)

var (
	magicChunkDoc  = [4]byte{'R', 'P', 'C', 'E'}
	magicDocVector = [4]byte{'R', 'P', 'D', 'V'}
)

const wireVersion = 1

// Bounds a decoder enforces before allocating, so a corrupt length cannot ask for gigabytes.
const (
	maxWireString = 16 << 20
	maxWireDim    = 1 << 16
	maxWireChunks = 1 << 22
)

// RawDocument is the JSON value of a raw-document record.
type RawDocument struct {
	ID      string            `json:"id"`
	Source  string            `json:"source,omitempty"`
	Version string            `json:"version,omitempty"`
	Title   string            `json:"title,omitempty"`
	Text    string            `json:"text"`
	Meta    map[string]string `json:"meta,omitempty"`
}

// EncodeRawDocument is the value of a raw-document record.
func EncodeRawDocument(d Document) ([]byte, error) {
	return json.Marshal(RawDocument{ID: d.ID, Source: d.Source, Version: d.Version, Title: d.Title, Text: d.Text, Meta: d.Meta})
}

// DecodeRawDocument parses a raw-document value. On error the returned Document holds the id
// when it was readable, so a dead letter can name it.
func DecodeRawDocument(value []byte) (Document, error) {
	var d Document
	value = bytes.TrimSpace(value)
	if len(value) == 0 || value[0] != '{' {
		return d, errors.New("raw document is not a JSON object")
	}
	if !utf8.Valid(value) {
		return d, errors.New("raw document is not valid UTF-8")
	}
	var r RawDocument
	dec := json.NewDecoder(bytes.NewReader(value))
	if err := dec.Decode(&r); err != nil {
		// A best-effort second look for the id alone, for the dead letter.
		var idOnly struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(value, &idOnly)
		d.ID = idOnly.ID
		return d, fmt.Errorf("raw document: %w", err)
	}
	if dec.More() {
		return d, errors.New("raw document: trailing data after the JSON object")
	}
	if len(r.Meta) == 0 {
		r.Meta = nil // "meta": {} and no meta are the same document
	}
	d = Document{ID: r.ID, Source: r.Source, Version: r.Version, Title: r.Title, Text: r.Text, Meta: r.Meta}
	if err := CheckID(r.ID); err != nil {
		return d, fmt.Errorf("raw document: %w", err)
	}
	return d, nil
}

// ChunkDoc is one document's chunk embeddings, as the embed stage publishes them for the
// aggregate stage: everything the aggregate stage needs, so it never reads the chunk cache.
type ChunkDoc struct {
	DocID, Source, Version, Title string
	ContentHash                   uint64
	NTokens                       int    // content tokens
	Fingerprint                   string // GN fingerprint: the space of the embeddings
	K, S                          int
	Dim                           int
	Keys                          []uint64  // window keys, in window order
	Embeddings                    []float32 // len(Keys)*Dim, row-major, L2-normalised rows
	// Deleted marks the chunk record of a deletion (schemas.Document.Deleted): DocID, Source,
	// Version and the space are set, no keys, no embeddings.
	Deleted bool
}

// Chunk returns the i-th chunk embedding (a view, not a copy).
func (c *ChunkDoc) Chunk(i int) []float32 { return c.Embeddings[i*c.Dim : (i+1)*c.Dim : (i+1)*c.Dim] }

// EncodeChunkDoc appends the "RPCE" v1 layout of c to dst:
//
//	magic "RPCE", u8 version=1,
//	str doc_id, str source, str version, str title, str gn_fingerprint,
//	u64 content_hash, u32 n_tokens, u32 k, u32 s, u32 dim, u32 n_chunks,
//	n_chunks × u64 window key, n_chunks × dim × f32 embedding
func EncodeChunkDoc(dst []byte, c ChunkDoc) ([]byte, error) {
	n := len(c.Keys)
	if c.Dim <= 0 || c.Dim > maxWireDim || len(c.Embeddings) != n*c.Dim || n > maxWireChunks {
		return dst, fmt.Errorf("chunk doc %s: %d keys and %d floats do not fit dimension %d", c.DocID, n, len(c.Embeddings), c.Dim)
	}
	dst = append(dst, magicChunkDoc[:]...)
	dst = append(dst, wireVersion)
	for _, s := range []string{c.DocID, c.Source, c.Version, c.Title, c.Fingerprint} {
		dst = appendWireString(dst, s)
	}
	dst = binary.LittleEndian.AppendUint64(dst, c.ContentHash)
	for _, v := range []int{c.NTokens, c.K, c.S, c.Dim, n} {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(v))
	}
	for _, k := range c.Keys {
		dst = binary.LittleEndian.AppendUint64(dst, k)
	}
	return appendFloats(dst, c.Embeddings), nil
}

// DecodeChunkDoc parses an "RPCE" value. The result does not alias b.
func DecodeChunkDoc(b []byte) (ChunkDoc, error) {
	var c ChunkDoc
	r := wireReader{b: b}
	if err := r.header(magicChunkDoc); err != nil {
		return c, fmt.Errorf("chunk embeddings: %w", err)
	}
	c.DocID, c.Source, c.Version, c.Title, c.Fingerprint = r.str(), r.str(), r.str(), r.str(), r.str()
	c.ContentHash = r.u64()
	c.NTokens, c.K, c.S, c.Dim = int(r.u32()), int(r.u32()), int(r.u32()), int(r.u32())
	n := int(r.u32())
	if r.err == nil && (c.Dim <= 0 || c.Dim > maxWireDim || n > maxWireChunks || uint64(n)*uint64(8+4*c.Dim) != uint64(len(r.b))) {
		r.err = fmt.Errorf("%d chunks of dimension %d do not match the %d bytes left", n, c.Dim, len(r.b))
	}
	if r.err != nil {
		return ChunkDoc{DocID: c.DocID}, fmt.Errorf("chunk embeddings of %q: %w", c.DocID, r.err)
	}
	c.Keys = make([]uint64, n)
	for i := range c.Keys {
		c.Keys[i] = r.u64()
	}
	c.Embeddings = r.floats(n * c.Dim)
	return c, nil
}

// EncodeDocVector appends the "RPDV" v1 layout of v to dst:
//
//	magic "RPDV", u8 version=1,
//	str doc_id, str source, str version, str title, str space, str gn_space,
//	u64 content_hash, u32 n_chunks, u32 n_tokens,
//	u32 dim, dim × f32 vector, u32 gn_dim, gn_dim × f32 gn_vector (gn_dim 0 when absent)
func EncodeDocVector(dst []byte, v DocVector) ([]byte, error) {
	if len(v.Vector) == 0 || len(v.Vector) > maxWireDim || len(v.GNVector) > maxWireDim {
		return dst, fmt.Errorf("vector of %s: dimension %d (gn %d) out of range", v.DocID, len(v.Vector), len(v.GNVector))
	}
	dst = append(dst, magicDocVector[:]...)
	dst = append(dst, wireVersion)
	for _, s := range []string{v.DocID, v.Source, v.Version, v.Title, v.Space, v.GNSpace} {
		dst = appendWireString(dst, s)
	}
	dst = binary.LittleEndian.AppendUint64(dst, v.ContentHash)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(v.NChunks))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(v.NTokens))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v.Vector)))
	dst = appendFloats(dst, v.Vector)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v.GNVector)))
	return appendFloats(dst, v.GNVector), nil
}

// DecodeDocVector parses an "RPDV" value. The result does not alias b.
func DecodeDocVector(b []byte) (DocVector, error) {
	var v DocVector
	r := wireReader{b: b}
	if err := r.header(magicDocVector); err != nil {
		return v, fmt.Errorf("document vector: %w", err)
	}
	v.DocID, v.Source, v.Version, v.Title, v.Space, v.GNSpace = r.str(), r.str(), r.str(), r.str(), r.str(), r.str()
	v.ContentHash = r.u64()
	v.NChunks, v.NTokens = int(r.u32()), int(r.u32())
	v.Vector = r.vector()
	v.GNVector = r.vector()
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err == nil && len(v.Vector) == 0 {
		r.err = errors.New("empty vector")
	}
	if r.err != nil {
		return DocVector{DocID: v.DocID}, fmt.Errorf("document vector of %q: %w", v.DocID, r.err)
	}
	return v, nil
}

func appendWireString(dst []byte, s string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

func appendFloats(dst []byte, f []float32) []byte {
	for _, x := range f {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(x))
	}
	return dst
}

// wireReader consumes a value front to back; the first error sticks and later reads return
// zero values, so a decoder checks once at the end.
type wireReader struct {
	b   []byte
	err error
}

func (r *wireReader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || len(r.b) < n {
		r.err = errors.New("truncated value")
		return false
	}
	return true
}

func (r *wireReader) header(magic [4]byte) error {
	if !r.need(5) {
		return r.err
	}
	if !bytes.Equal(r.b[:4], magic[:]) {
		return fmt.Errorf("magic %q, want %q", r.b[:4], magic[:])
	}
	if r.b[4] != wireVersion {
		return fmt.Errorf("format version %d is not supported (this reader knows %d)", r.b[4], wireVersion)
	}
	r.b = r.b[5:]
	return nil
}

func (r *wireReader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *wireReader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *wireReader) str() string {
	n := r.u32()
	if r.err == nil && n > maxWireString {
		r.err = fmt.Errorf("string of %d bytes is over the %d limit", n, maxWireString)
	}
	if !r.need(int(n)) {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	if !utf8.ValidString(s) {
		r.err = errors.New("string is not valid UTF-8")
	}
	return s
}

func (r *wireReader) floats(n int) []float32 {
	if !r.need(4 * n) {
		return nil
	}
	f := make([]float32, n)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.b[4*i:]))
	}
	r.b = r.b[4*n:]
	return f
}

func (r *wireReader) vector() []float32 {
	n := r.u32()
	if r.err == nil && n > maxWireDim {
		r.err = fmt.Errorf("dimension %d is over the %d limit", n, maxWireDim)
	}
	if n == 0 || r.err != nil {
		return nil
	}
	return r.floats(int(n))
}
