// Package shardfile is the shard file of a shardcache: a Parquet file of schemas.ChunkSchema
// rows carrying its GN space in the key-value metadata, named shard-<seq>.parquet beside its
// companion shard-<seq>.vec. It builds a shard from buffered rows, writes it atomically, and
// decodes it back (whole, or only its keys) refusing a shard of another space. What the cache
// does with shards -- indexing, companions, recovery -- stays in shardcache.
package shardfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/internal/parquetread"
	"github.com/reignpipe/reignpipe/schemas"
)

const (
	prefix    = "shard-"
	suffix    = ".parquet"
	vecSuffix = ".vec"
	// TmpSuffix marks a file being written; a crash can leave one, never a partial shard.
	TmpSuffix = ".tmp"
)

// ErrSpaceMismatch: a shard, or the cache directory, belongs to another GN space.
var ErrSpaceMismatch = errors.New("shardcache: cache directory belongs to another GN space")

// VecName is the file name of shard seq's companion.
func VecName(seq uint64) string { return fmt.Sprintf("%s%08d%s", prefix, seq, vecSuffix) }

// Space is what makes two caches' embeddings comparable; every shard carries it.
type Space = schemas.Space

// Meta is the space as shard key-value metadata (the dimension goes with the schema).
func Meta(s Space) map[string]string {
	return map[string]string{
		schemas.MetaGNFingerprint: s.Fingerprint,
		schemas.MetaK:             strconv.Itoa(s.K),
		schemas.MetaS:             strconv.Itoa(s.S),
	}
}

// Name is the file name of shard seq.
func Name(seq uint64) string { return fmt.Sprintf("%s%08d%s", prefix, seq, suffix) }

// ParseName accepts only names this package writes, so stray files are never indexed.
func ParseName(name string) (uint64, bool) {
	if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
		return 0, false
	}
	digits := strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix)
	if len(digits) < 8 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	return seq, err == nil
}

// ParseVecName is ParseName for companion files.
func ParseVecName(name string) (uint64, bool) {
	if !strings.HasSuffix(name, vecSuffix) {
		return 0, false
	}
	return ParseName(strings.TrimSuffix(name, vecSuffix) + suffix)
}

// Rows is a batch of rows not yet in a visible shard: the cache's write buffer, and what a
// shard is built from. Embeddings are stored contiguously so a shard cut hands one slice to the
// Arrow builder; Pos finds a key's row.
type Rows struct {
	Seq  uint64
	Keys []uint64
	Docs []string
	Idx  []int32
	NTok []int32
	Emb  []float32
	Pos  map[uint64]int32
}

// NewRows makes an empty batch with room for capRows rows of dimension dim.
func NewRows(capRows, dim int) *Rows {
	return &Rows{
		Keys: make([]uint64, 0, capRows),
		Docs: make([]string, 0, capRows),
		Idx:  make([]int32, 0, capRows),
		NTok: make([]int32, 0, capRows),
		Emb:  make([]float32, 0, capRows*dim),
		Pos:  make(map[uint64]int32, capRows),
	}
}

// Add appends one row.
func (p *Rows) Add(key uint64, docID string, chunkIndex, nTokens int32, embedding []float32) {
	p.Pos[key] = int32(len(p.Keys))
	p.Keys = append(p.Keys, key)
	p.Docs = append(p.Docs, docID)
	p.Idx = append(p.Idx, chunkIndex)
	p.NTok = append(p.NTok, nTokens)
	p.Emb = append(p.Emb, embedding...)
}

// Record builds the Arrow record of p; the caller releases it.
func (p *Rows) Record(mem memory.Allocator, sc *arrow.Schema, dim int) arrow.RecordBatch {
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	b.Field(0).(*array.Uint64Builder).AppendValues(p.Keys, nil)
	b.Field(1).(*array.StringBuilder).AppendValues(p.Docs, nil)
	b.Field(2).(*array.Int32Builder).AppendValues(p.Idx, nil)
	b.Field(3).(*array.Int32Builder).AppendValues(p.NTok, nil)
	lb := b.Field(4).(*array.FixedSizeListBuilder)
	lb.Reserve(len(p.Keys))
	for range p.Keys {
		lb.Append(true)
	}
	lb.ValueBuilder().(*array.Float32Builder).AppendValues(p.Emb[:len(p.Keys)*dim], nil)
	return b.NewRecordBatch()
}

// writerProps: zstd everywhere, no dictionary for floats (it never pays for embeddings) and
// BYTE_STREAM_SPLIT for them, which makes float mantissas compress noticeably better under zstd.
func writerProps(mem memory.Allocator, vectorCol string) *parquet.WriterProperties {
	return parquet.NewWriterProperties(
		parquet.WithAllocator(mem),
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithDictionaryDefault(true),
		parquet.WithDictionaryFor(vectorCol+".list.element", false),
		parquet.WithEncodingFor(vectorCol+".list.element", parquet.Encodings.ByteStreamSplit),
		parquet.WithMaxRowGroupLength(64*1024),
	)
}

// WriteAtomic writes the records to path via a temp file: write, fsync, rename, fsync
// dir. A crash leaves either nothing or a *.tmp that Open removes, never a partial shard.
// Returns the final file size.
func WriteAtomic(path string, sc *arrow.Schema, mem memory.Allocator, rec arrow.RecordBatch) (int64, error) {
	return atomicfile.WriteAt(path, path+TmpSuffix, func(w io.Writer) error {
		fw, err := pqarrow.NewFileWriter(sc, w, writerProps(mem, schemas.ColEmbedding),
			pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema(), pqarrow.WithAllocator(mem)))
		if err != nil {
			return err
		}
		if err := fw.Write(rec); err != nil {
			_ = fw.Close()
			return err
		}
		return fw.Close()
	})
}

// Decoded is the part of a shard that serves hits: keys and embeddings copied out of Arrow
// into Go memory so nothing needs releasing when it leaves the LRU.
type Decoded struct {
	Seq  uint64
	Keys []uint64
	Emb  []float32
	Pos  map[uint64]int32
}

// Read decodes path and checks that it belongs to space sp. Corrupt or foreign files
// return an error; the recover turns a panic inside the Parquet decoder on malformed bytes
// into an error too, since shard files are input we did not necessarily write.
func Read(path string, sp Space, mem memory.Allocator) (*Decoded, error) {
	return decode(path, sp, mem, false)
}

// ReadKeys decodes only the key column of path: what rebuilding the hash index needs,
// about 1/50 of the bytes of a whole shard. d.Emb and d.Pos stay empty.
func ReadKeys(path string, sp Space, mem memory.Allocator) (*Decoded, error) {
	return decode(path, sp, mem, true)
}

func decode(path string, sp Space, mem memory.Allocator, keysOnly bool) (d *Decoded, err error) {
	defer func() {
		if r := recover(); r != nil {
			d, err = nil, fmt.Errorf("shard %s: corrupt: %v", path, r)
		}
	}()
	pf, err := parquetread.Open(path)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	defer pf.Close()
	if err := checkSpace(path, pf.MetaData().KeyValueMetadata(), sp); err != nil {
		return nil, err
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 * 1024}, mem)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	sc, err := fr.Schema()
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	want := schemas.ChunkSchema(sp.Dim, nil)
	if sc.NumFields() != want.NumFields() {
		return nil, fmt.Errorf("shard %s: %d columns, want %d", path, sc.NumFields(), want.NumFields())
	}
	for i := range want.Fields() {
		g, w := sc.Field(i), want.Field(i)
		if w.Name == schemas.ColEmbedding && g.Name == w.Name && isFloatList(g.Type) {
			continue
		}
		if g.Name != w.Name || !arrow.TypeEqual(g.Type, w.Type) {
			return nil, fmt.Errorf("shard %s: column %d is %s %v, want %s %v", path, i, g.Name, g.Type, w.Name, w.Type)
		}
	}
	// Leaves 0 (key) and 4 (embedding items): the columns before embedding are all flat.
	rgs := make([]int, pf.NumRowGroups())
	for i := range rgs {
		rgs[i] = i
	}
	leaves := []int{0, 4}
	if keysOnly {
		leaves = leaves[:1]
	}
	tbl, err := fr.ReadRowGroups(context.Background(), leaves, rgs)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	defer tbl.Release()
	n := int(tbl.NumRows())
	if keysOnly {
		d = &Decoded{Keys: make([]uint64, 0, n)}
		for _, c := range tbl.Column(0).Data().Chunks() {
			a, ok := c.(*array.Uint64)
			if !ok || a.NullN() != 0 {
				return nil, fmt.Errorf("shard %s: key column corrupt", path)
			}
			d.Keys = append(d.Keys, a.Uint64Values()...)
		}
		if len(d.Keys) != n {
			return nil, fmt.Errorf("shard %s: %d keys for %d rows", path, len(d.Keys), n)
		}
		return d, nil
	}
	d = &Decoded{Keys: make([]uint64, 0, n), Emb: make([]float32, 0, n*sp.Dim), Pos: make(map[uint64]int32, n)}
	for _, c := range tbl.Column(0).Data().Chunks() {
		a, ok := c.(*array.Uint64)
		if !ok || a.NullN() != 0 {
			return nil, fmt.Errorf("shard %s: key column corrupt", path)
		}
		d.Keys = append(d.Keys, a.Uint64Values()...)
	}
	for _, c := range tbl.Column(1).Data().Chunks() {
		for i := 0; i < c.Len(); i++ {
			row, err := parquetread.FloatRow(c, i, sp.Dim)
			if err != nil {
				return nil, fmt.Errorf("shard %s: embedding %w", path, err)
			}
			d.Emb = append(d.Emb, row...)
		}
	}
	if len(d.Keys) != n || len(d.Emb) != n*sp.Dim {
		return nil, fmt.Errorf("shard %s: %d keys and %d floats for %d rows of dim %d", path, len(d.Keys), len(d.Emb), n, sp.Dim)
	}
	for i, k := range d.Keys {
		d.Pos[k] = int32(i)
	}
	return d, nil
}

// checkSpace refuses a shard from another GN space: mixing spaces silently corrupts every
// vector that averages over them.
func checkSpace(path string, kv interface{ FindValue(string) *string }, sp Space) error {
	get := func(k string) string {
		if v := kv.FindValue(k); v != nil {
			return *v
		}
		return "(missing)"
	}
	got := map[string]string{
		schemas.MetaSchemaVersion: get(schemas.MetaSchemaVersion),
		schemas.MetaGNFingerprint: get(schemas.MetaGNFingerprint),
		schemas.MetaDim:           get(schemas.MetaDim),
		schemas.MetaK:             get(schemas.MetaK),
		schemas.MetaS:             get(schemas.MetaS),
	}
	want := Meta(sp)
	want[schemas.MetaSchemaVersion] = schemas.ChunkSchemaVersion
	want[schemas.MetaDim] = strconv.Itoa(sp.Dim)
	for _, k := range []string{schemas.MetaSchemaVersion, schemas.MetaGNFingerprint, schemas.MetaDim, schemas.MetaK, schemas.MetaS} {
		if got[k] != want[k] {
			return fmt.Errorf("%w: shard %s has %s=%q, cache opened with %q; use another Dir per GN space",
				ErrSpaceMismatch, path, k, got[k], want[k])
		}
	}
	return nil
}

func isFloatList(t arrow.DataType) bool {
	switch t := t.(type) {
	case *arrow.ListType:
		return t.Elem().ID() == arrow.FLOAT32
	case *arrow.FixedSizeListType:
		return t.Elem().ID() == arrow.FLOAT32
	}
	return false
}
