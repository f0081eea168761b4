package shardcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
	shardPrefix = "shard-"
	shardSuffix = ".parquet"
	tmpSuffix   = ".tmp"
	vecSuffix   = ".vec"
)

func vecName(seq uint64) string { return fmt.Sprintf("%s%08d%s", shardPrefix, seq, vecSuffix) }

// space is what makes two caches' embeddings comparable; every shard carries it.
type space struct {
	Fingerprint string
	Dim, K, S   int
}

func (s space) meta() map[string]string {
	return map[string]string{
		schemas.MetaGNFingerprint: s.Fingerprint,
		schemas.MetaK:             strconv.Itoa(s.K),
		schemas.MetaS:             strconv.Itoa(s.S),
	}
}

func (s space) String() string {
	return fmt.Sprintf("fingerprint=%q dim=%d K=%d S=%d", s.Fingerprint, s.Dim, s.K, s.S)
}

func shardName(seq uint64) string { return fmt.Sprintf("%s%08d%s", shardPrefix, seq, shardSuffix) }

// parseShardName accepts only names this package writes, so stray files are never indexed.
func parseShardName(name string) (uint64, bool) {
	if !strings.HasPrefix(name, shardPrefix) || !strings.HasSuffix(name, shardSuffix) {
		return 0, false
	}
	digits := strings.TrimSuffix(strings.TrimPrefix(name, shardPrefix), shardSuffix)
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

// parseVecName is parseShardName for companion files.
func parseVecName(name string) (uint64, bool) {
	if !strings.HasSuffix(name, vecSuffix) {
		return 0, false
	}
	return parseShardName(strings.TrimSuffix(name, vecSuffix) + shardSuffix)
}

// pending is a batch of rows not yet in a visible shard. Embeddings are stored contiguously so
// a shard cut hands one slice to the Arrow builder.
type pending struct {
	seq  uint64
	keys []uint64
	docs []string
	idx  []int32
	ntok []int32
	emb  []float32
	pos  map[uint64]int32
}

func newPending(capRows, dim int) *pending {
	return &pending{
		keys: make([]uint64, 0, capRows),
		docs: make([]string, 0, capRows),
		idx:  make([]int32, 0, capRows),
		ntok: make([]int32, 0, capRows),
		emb:  make([]float32, 0, capRows*dim),
		pos:  make(map[uint64]int32, capRows),
	}
}

func (p *pending) add(r Row) {
	p.pos[r.Key] = int32(len(p.keys))
	p.keys = append(p.keys, r.Key)
	p.docs = append(p.docs, r.DocID)
	p.idx = append(p.idx, r.ChunkIndex)
	p.ntok = append(p.ntok, r.NTokens)
	p.emb = append(p.emb, r.Embedding...)
}

// record builds the Arrow record of p; the caller releases it.
func (p *pending) record(mem memory.Allocator, sc *arrow.Schema, dim int) arrow.RecordBatch {
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	b.Field(0).(*array.Uint64Builder).AppendValues(p.keys, nil)
	b.Field(1).(*array.StringBuilder).AppendValues(p.docs, nil)
	b.Field(2).(*array.Int32Builder).AppendValues(p.idx, nil)
	b.Field(3).(*array.Int32Builder).AppendValues(p.ntok, nil)
	lb := b.Field(4).(*array.FixedSizeListBuilder)
	lb.Reserve(len(p.keys))
	for range p.keys {
		lb.Append(true)
	}
	lb.ValueBuilder().(*array.Float32Builder).AppendValues(p.emb[:len(p.keys)*dim], nil)
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

// WriteParquetAtomic writes the records to path via a temp file: write, fsync, rename, fsync
// dir. A crash leaves either nothing or a *.tmp that Open removes, never a partial shard.
// Returns the final file size.
func writeParquetAtomic(path string, sc *arrow.Schema, mem memory.Allocator, rec arrow.RecordBatch) (int64, error) {
	return atomicfile.WriteAt(path, path+tmpSuffix, func(w io.Writer) error {
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

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// decoded is the part of a shard that serves hits: keys and embeddings copied out of Arrow
// into Go memory so nothing needs releasing when it leaves the LRU.
type decoded struct {
	seq  uint64
	keys []uint64
	emb  []float32
	pos  map[uint64]int32
}

// readShard decodes path and checks that it belongs to space sp. Corrupt or foreign files
// return an error; the recover turns a panic inside the Parquet decoder on malformed bytes
// into an error too, since shard files are input we did not necessarily write.
func readShard(path string, sp space, mem memory.Allocator) (*decoded, error) {
	return decodeShard(path, sp, mem, false)
}

// readShardKeys decodes only the key column of path: what rebuilding the hash index needs,
// about 1/50 of the bytes of a whole shard. d.emb and d.pos stay empty.
func readShardKeys(path string, sp space, mem memory.Allocator) (*decoded, error) {
	return decodeShard(path, sp, mem, true)
}

func decodeShard(path string, sp space, mem memory.Allocator, keysOnly bool) (d *decoded, err error) {
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
		d = &decoded{keys: make([]uint64, 0, n)}
		for _, c := range tbl.Column(0).Data().Chunks() {
			a, ok := c.(*array.Uint64)
			if !ok || a.NullN() != 0 {
				return nil, fmt.Errorf("shard %s: key column corrupt", path)
			}
			d.keys = append(d.keys, a.Uint64Values()...)
		}
		if len(d.keys) != n {
			return nil, fmt.Errorf("shard %s: %d keys for %d rows", path, len(d.keys), n)
		}
		return d, nil
	}
	d = &decoded{keys: make([]uint64, 0, n), emb: make([]float32, 0, n*sp.Dim), pos: make(map[uint64]int32, n)}
	for _, c := range tbl.Column(0).Data().Chunks() {
		a, ok := c.(*array.Uint64)
		if !ok || a.NullN() != 0 {
			return nil, fmt.Errorf("shard %s: key column corrupt", path)
		}
		d.keys = append(d.keys, a.Uint64Values()...)
	}
	for _, c := range tbl.Column(1).Data().Chunks() {
		for i := 0; i < c.Len(); i++ {
			row, err := parquetread.FloatRow(c, i, sp.Dim)
			if err != nil {
				return nil, fmt.Errorf("shard %s: embedding %w", path, err)
			}
			d.emb = append(d.emb, row...)
		}
	}
	if len(d.keys) != n || len(d.emb) != n*sp.Dim {
		return nil, fmt.Errorf("shard %s: %d keys and %d floats for %d rows of dim %d", path, len(d.keys), len(d.emb), n, sp.Dim)
	}
	for i, k := range d.keys {
		d.pos[k] = int32(i)
	}
	return d, nil
}

// checkSpace refuses a shard from another GN space: mixing spaces silently corrupts every
// vector that averages over them.
func checkSpace(path string, kv interface{ FindValue(string) *string }, sp space) error {
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
	want := sp.meta()
	want[schemas.MetaSchemaVersion] = schemas.ArrowSchemaVersion
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
