package vectorfile

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/internal/parquetread"
	"github.com/reignpipe/reignpipe/schemas"
)

// ParquetOptions configure NewParquet. Dir and Dim are required.
type ParquetOptions struct {
	Dir string // a folder, or an s3:// prefix opened through Store
	// Store reaches an s3:// Dir (the pipeline's s3 section); nil: local folders only.
	Store *objstore.Store
	Dim   int
	// GNDim > 0 adds the gn_space and gn_vector columns (schemas.VectorSchemaWithGN): every
	// vector written must then carry its GN mean-pool companion of this dimension.
	GNDim int
	// BatchRows is how many vectors are buffered before they are encoded as one row group
	// (default 1024); it bounds the sink's memory to about BatchRows*Dim*4 bytes.
	BatchRows int
	// Metadata is added to every part's key-value metadata, e.g. schemas.MetaGNFingerprint,
	// MetaK, MetaS. schema_version and dim are always set.
	Metadata  map[string]string
	Allocator memory.Allocator // default memory.DefaultAllocator
}

// ParquetSink writes schemas.VectorSchema parts. Use from one goroutine at a time.
type ParquetSink struct {
	fileCounts
	opts   ParquetOptions
	schema *arrow.Schema
	partSeq
	b    *array.RecordBuilder
	nbuf int
	part *partFile
	fw   *pqarrow.FileWriter
	sinkState
}

var _ connectors.Sink = (*ParquetSink)(nil)

// NewParquet opens a Parquet sink on opts.Dir, continuing its part sequence.
func NewParquet(opts ParquetOptions) (*ParquetSink, error) {
	if opts.Dim <= 0 {
		return nil, fmt.Errorf("vectorfile: Dim must be positive, got %d", opts.Dim)
	}
	if opts.BatchRows < 0 {
		return nil, fmt.Errorf("vectorfile: BatchRows must not be negative, got %d", opts.BatchRows)
	}
	if opts.BatchRows == 0 {
		opts.BatchRows = 1024
	}
	if opts.Allocator == nil {
		opts.Allocator = memory.DefaultAllocator
	}
	ps, err := newPartSeq(opts.Store, opts.Dir)
	if err != nil {
		return nil, err
	}
	if opts.GNDim < 0 {
		return nil, fmt.Errorf("vectorfile: GNDim must not be negative, got %d", opts.GNDim)
	}
	sc := schemas.VectorSchema(opts.Dim, opts.Metadata)
	if opts.GNDim > 0 {
		sc = schemas.VectorSchemaWithGN(opts.Dim, opts.GNDim, opts.Metadata)
	}
	return &ParquetSink{opts: opts, schema: sc, partSeq: ps, b: array.NewRecordBuilder(opts.Allocator, sc)}, nil
}

// Write buffers v; a full batch is encoded into the current part.
func (s *ParquetSink) Write(ctx context.Context, v schemas.DocVector) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if len(v.Vector) != s.opts.Dim {
		return fmt.Errorf("vectorfile: %s: vector has %d dims, sink has %d", v.DocID, len(v.Vector), s.opts.Dim)
	}
	if s.opts.GNDim > 0 && len(v.GNVector) != s.opts.GNDim {
		return fmt.Errorf("vectorfile: %s: GN vector has %d dims, sink has %d", v.DocID, len(v.GNVector), s.opts.GNDim)
	}
	if v.NChunks < 0 || v.NChunks > math.MaxInt32 || v.NTokens < 0 {
		return fmt.Errorf("vectorfile: %s: n_chunks %d / n_tokens %d out of range", v.DocID, v.NChunks, v.NTokens)
	}
	s.b.Field(0).(*array.StringBuilder).Append(v.DocID)
	s.b.Field(1).(*array.StringBuilder).Append(v.Title)
	s.b.Field(2).(*array.StringBuilder).Append(v.Source)
	s.b.Field(3).(*array.StringBuilder).Append(v.Version)
	s.b.Field(4).(*array.Int32Builder).Append(int32(v.NChunks))
	s.b.Field(5).(*array.Int64Builder).Append(int64(v.NTokens))
	s.b.Field(6).(*array.Uint64Builder).Append(v.ContentHash)
	s.b.Field(7).(*array.StringBuilder).Append(v.Space)
	lb := s.b.Field(8).(*array.FixedSizeListBuilder)
	lb.Append(true)
	lb.ValueBuilder().(*array.Float32Builder).AppendValues(v.Vector, nil)
	s.b.Field(9).(*array.BooleanBuilder).Append(false)
	if s.opts.GNDim > 0 {
		s.b.Field(10).(*array.StringBuilder).Append(v.GNSpace)
		gb := s.b.Field(11).(*array.FixedSizeListBuilder)
		gb.Append(true)
		gb.ValueBuilder().(*array.Float32Builder).AppendValues(v.GNVector, nil)
	}
	return s.counted(connectors.CountWritten, s.appended(ctx))
}

// Delete appends the deletion's tombstone row (schemas.VectorSchema says its columns); like
// Write it is visible after the next Flush. Readers that keep the newest row of each doc_id,
// a tombstone winning a tie, drop the document.
func (s *ParquetSink) Delete(ctx context.Context, d schemas.Deletion) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if d.DocID == "" {
		return errors.New("vectorfile: a deletion without a doc id")
	}
	s.b.Field(0).(*array.StringBuilder).Append(d.DocID)
	s.b.Field(1).(*array.StringBuilder).Append("")
	s.b.Field(2).(*array.StringBuilder).Append(d.Source)
	s.b.Field(3).(*array.StringBuilder).Append(d.Version)
	s.b.Field(4).(*array.Int32Builder).Append(0)
	s.b.Field(5).(*array.Int64Builder).Append(0)
	s.b.Field(6).(*array.Uint64Builder).Append(0)
	s.b.Field(7).(*array.StringBuilder).Append("")
	appendZeros(s.b.Field(8).(*array.FixedSizeListBuilder), s.opts.Dim)
	s.b.Field(9).(*array.BooleanBuilder).Append(true)
	if s.opts.GNDim > 0 {
		s.b.Field(10).(*array.StringBuilder).Append("")
		appendZeros(s.b.Field(11).(*array.FixedSizeListBuilder), s.opts.GNDim)
	}
	return s.counted(connectors.CountDeleted, s.appended(ctx))
}

func appendZeros(b *array.FixedSizeListBuilder, dim int) {
	b.Append(true)
	b.ValueBuilder().(*array.Float32Builder).AppendValues(make([]float32, dim), nil)
}

// appended counts a buffered row; a full batch is encoded into the current part.
func (s *ParquetSink) appended(ctx context.Context) error {
	s.nbuf++
	if s.nbuf >= s.opts.BatchRows {
		return s.writeBatch(ctx)
	}
	return nil
}

func (s *ParquetSink) fail(err error) error {
	if s.fw != nil {
		_ = s.fw.Close()
		s.fw = nil
	}
	if s.part != nil {
		s.part.abort()
		s.part = nil
	}
	s.err = err
	return err
}

func (s *ParquetSink) writeBatch(ctx context.Context) error {
	if s.nbuf == 0 {
		return nil
	}
	if s.part == nil {
		p, err := s.create(ctx, extParquet)
		if err != nil {
			return s.fail(err)
		}
		s.part = p
		fw, err := pqarrow.NewFileWriter(s.schema, p.w, writerProps(s.opts.Allocator),
			pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema(), pqarrow.WithAllocator(s.opts.Allocator)))
		if err != nil {
			return s.fail(fmt.Errorf("vectorfile: %w", err))
		}
		s.fw = fw
	}
	rec := s.b.NewRecordBatch()
	err := s.fw.Write(rec)
	rec.Release()
	s.nbuf = 0
	if err != nil {
		return s.fail(fmt.Errorf("vectorfile: write %s: %w", s.part.final, err))
	}
	return nil
}

// writerProps: zstd; no dictionary and BYTE_STREAM_SPLIT for the float vectors, which zstd
// then compresses noticeably better; pyarrow and DuckDB read both.
func writerProps(mem memory.Allocator) *parquet.WriterProperties {
	const vec = schemas.ColVector + ".list.element"
	const gnVec = schemas.ColGNVector + ".list.element"
	return parquet.NewWriterProperties(
		parquet.WithAllocator(mem),
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithDictionaryFor(vec, false),
		parquet.WithEncodingFor(vec, parquet.Encodings.ByteStreamSplit),
		parquet.WithDictionaryFor(gnVec, false),
		parquet.WithEncodingFor(gnVec, parquet.Encodings.ByteStreamSplit),
	)
}

// Flush closes the current part and makes it visible; the next Write starts a new one.
func (s *ParquetSink) Flush(ctx context.Context) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if err := s.writeBatch(ctx); err != nil {
		return err
	}
	if s.part == nil {
		return nil
	}
	if err := s.fw.Close(); err != nil {
		return s.fail(fmt.Errorf("vectorfile: close %s: %w", s.part.final, err))
	}
	s.fw = nil
	if err := s.part.commit(ctx); err != nil {
		s.part = nil
		return s.fail(err)
	}
	s.part = nil
	s.seq++
	s.counts.Commit()
	return nil
}

// Abort closes the sink without making what was written since the last Flush visible: the
// open part's temp file is removed. For a job that failed half-way (reaggregate), whose
// partial output must not look like a result.
func (s *ParquetSink) Abort() {
	if s.closed {
		return
	}
	_ = s.fail(errClosed)
	s.closed = true
	s.b.Release()
}

// Close flushes and releases the sink's buffers.
func (s *ParquetSink) Close(ctx context.Context) error {
	if s.closed {
		return nil
	}
	var err error
	if s.err == nil {
		err = s.Flush(ctx)
	}
	if err != nil || s.err != nil {
		err = errors.Join(err, s.fail(s.err))
	}
	s.closed = true
	s.b.Release()
	return err
}

// readParquetPart streams a VectorSchema part. A corrupt file returns an error; the recover
// turns a panic of the Parquet decoder on malformed bytes into one as well.
func readParquetPart(ctx context.Context, dir folder, path string, mem memory.Allocator, fn func(schemas.DocVector, bool) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("vectorfile: %s: corrupt: %v", path, r)
		}
	}()
	pf, closer, err := dir.openParquet(ctx, path)
	if err != nil {
		return fmt.Errorf("vectorfile: %s: %w", path, err)
	}
	defer closer.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1024}, mem)
	if err != nil {
		return fmt.Errorf("vectorfile: %s: %w", path, err)
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return fmt.Errorf("vectorfile: %s: %w", path, err)
	}
	defer rr.Release()
	cols, err := vectorColumns(rr.Schema())
	if err != nil {
		return fmt.Errorf("vectorfile: %s: %w", path, err)
	}
	dim, err := partDim(pf)
	if err != nil {
		return fmt.Errorf("vectorfile: %s: %w", path, err)
	}
	gn, err := gnColumns(rr.Schema(), pf)
	if err != nil {
		return fmt.Errorf("vectorfile: %s: %w", path, err)
	}
	for rr.Next() {
		if err := emitRecord(rr.RecordBatch(), cols, dim, gn, fn); err != nil {
			return fmt.Errorf("vectorfile: %s: %w", path, err)
		}
	}
	if err := rr.Err(); err != nil {
		return fmt.Errorf("vectorfile: %s: %w", path, err)
	}
	return nil
}

// vectorCols are the indexes of VectorSchema's columns in a part, in VectorSchema's order;
// deleted is -1 in a version-1 part, which has no such column (every row live).
type vectorCols [10]int

const colDeleted = 9 // VectorSchema's index of the deleted column

// vectorColumns maps VectorSchema columns to their index in sc by name, checking types, so
// files with extra columns still read.
func vectorColumns(sc *arrow.Schema) (vectorCols, error) {
	var cols vectorCols
	want := schemas.VectorSchema(1, nil)
	for i, f := range want.Fields() {
		idx := sc.FieldIndices(f.Name)
		if len(idx) == 0 && i == colDeleted {
			cols[i] = -1
			continue
		}
		if len(idx) != 1 {
			return cols, fmt.Errorf("column %s missing", f.Name)
		}
		got := sc.Field(idx[0]).Type
		if f.Name == schemas.ColVector {
			ft, ok := got.(arrow.ListLikeType)
			if !ok || ft.Elem().ID() != arrow.FLOAT32 {
				return cols, fmt.Errorf("column %s is %v, want a list of float", f.Name, got)
			}
		} else if !arrow.TypeEqual(got, f.Type) {
			return cols, fmt.Errorf("column %s is %v, want %v", f.Name, got, f.Type)
		}
		cols[i] = idx[0]
	}
	return cols, nil
}

// partDim is the vector length a part declares in its metadata.
func partDim(pf *file.Reader) (int, error) {
	v := pf.MetaData().KeyValueMetadata().FindValue(schemas.MetaDim)
	if v == nil {
		return 0, fmt.Errorf("no %s in file metadata", schemas.MetaDim)
	}
	dim, err := strconv.Atoi(*v)
	if err != nil || dim <= 0 {
		return 0, fmt.Errorf("bad %s %q", schemas.MetaDim, *v)
	}
	return dim, nil
}

// gnCols locates the optional GN mean-pool companion columns; dim 0 means absent.
type gnCols struct{ space, vector, dim int }

func gnColumns(sc *arrow.Schema, pf *file.Reader) (gnCols, error) {
	si, vi := sc.FieldIndices(schemas.ColGNSpace), sc.FieldIndices(schemas.ColGNVector)
	if len(si) == 0 && len(vi) == 0 {
		return gnCols{}, nil
	}
	if len(si) != 1 || len(vi) != 1 || !arrow.TypeEqual(sc.Field(si[0]).Type, arrow.BinaryTypes.String) {
		return gnCols{}, fmt.Errorf("columns %s/%s malformed", schemas.ColGNSpace, schemas.ColGNVector)
	}
	if ft, ok := sc.Field(vi[0]).Type.(arrow.ListLikeType); !ok || ft.Elem().ID() != arrow.FLOAT32 {
		return gnCols{}, fmt.Errorf("column %s is %v, want a list of float", schemas.ColGNVector, sc.Field(vi[0]).Type)
	}
	v := pf.MetaData().KeyValueMetadata().FindValue(schemas.MetaGNDim)
	if v == nil {
		return gnCols{}, fmt.Errorf("no %s in file metadata", schemas.MetaGNDim)
	}
	d, err := strconv.Atoi(*v)
	if err != nil || d <= 0 {
		return gnCols{}, fmt.Errorf("bad %s %q", schemas.MetaGNDim, *v)
	}
	return gnCols{space: si[0], vector: vi[0], dim: d}, nil
}

func emitRecord(rec arrow.RecordBatch, cols vectorCols, dim int, gn gnCols, fn func(schemas.DocVector, bool) error) error {
	str := func(i int) *array.String { return rec.Column(cols[i]).(*array.String) }
	docID, title, source, version, space := str(0), str(1), str(2), str(3), str(7)
	nChunks := rec.Column(cols[4]).(*array.Int32)
	nTokens := rec.Column(cols[5]).(*array.Int64)
	hash := rec.Column(cols[6]).(*array.Uint64)
	vec := rec.Column(cols[8])
	var deleted *array.Boolean
	if cols[colDeleted] >= 0 {
		deleted = rec.Column(cols[colDeleted]).(*array.Boolean)
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		if docID.IsNull(i) {
			return fmt.Errorf("row %d has a null doc_id", i)
		}
		if deleted != nil && deleted.Value(i) {
			if err := fn(schemas.DocVector{DocID: docID.Value(i), Source: source.Value(i), Version: version.Value(i)}, true); err != nil {
				return err
			}
			continue
		}
		row, err := parquetread.FloatRow(vec, i, dim)
		if err != nil {
			return err
		}
		v := schemas.DocVector{
			DocID: docID.Value(i), Title: title.Value(i), Source: source.Value(i), Version: version.Value(i),
			NChunks: int(nChunks.Value(i)), NTokens: int(nTokens.Value(i)), ContentHash: hash.Value(i),
			Space: space.Value(i), Vector: append([]float32(nil), row...),
		}
		if gn.dim > 0 {
			g, err := parquetread.FloatRow(rec.Column(gn.vector), i, gn.dim)
			if err != nil {
				return err
			}
			v.GNSpace = rec.Column(gn.space).(*array.String).Value(i)
			v.GNVector = append([]float32(nil), g...)
		}
		if err := fn(v, false); err != nil {
			return err
		}
	}
	return nil
}
