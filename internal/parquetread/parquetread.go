// Package parquetread holds what every reader of reignpipe's Parquet files (chunk shards,
// vector parts) needs to read untrusted files safely.
package parquetread

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
)

// Open opens path with its ARROW:schema entry removed. arrow-go decodes that flatbuffer
// trusting its length fields, so a corrupt one can demand tens of gigabytes and kill the
// process outright (found by fuzzing; recover cannot catch it). The Parquet schema carries all
// we need; a vector column then reads as list<float> and FloatRow checks each row's length.
func Open(path string) (*file.Reader, error) {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return nil, err
	}
	return stripArrowSchema(pf), nil
}

// OpenReader is Open for a file read through r (an object in a bucket, by ranged reads).
func OpenReader(r parquet.ReaderAtSeeker) (*file.Reader, error) {
	pf, err := file.NewParquetReader(r)
	if err != nil {
		return nil, err
	}
	return stripArrowSchema(pf), nil
}

func stripArrowSchema(pf *file.Reader) *file.Reader {
	md := pf.MetaData()
	kv := md.KeyValueMetadata()
	kept := kv[:0:0]
	for _, e := range kv {
		if e != nil && e.Key != "ARROW:schema" {
			kept = append(kept, e)
		}
	}
	md.FileMetaData.KeyValueMetadata = kept
	return pf
}

// FloatRow returns row i of a list or fixed_size_list of float32 column, which must hold
// exactly dim non-null items. The slice aliases the column's buffer.
func FloatRow(col arrow.Array, i, dim int) ([]float32, error) {
	l, ok := col.(interface {
		ValueOffsets(int) (int64, int64)
		ListValues() arrow.Array
	})
	if !ok || col.IsNull(i) {
		return nil, fmt.Errorf("row %d: vector is null or not a list", i)
	}
	vals, ok := l.ListValues().(*array.Float32)
	if !ok {
		return nil, fmt.Errorf("row %d: vector items are not float32", i)
	}
	start, end := l.ValueOffsets(i)
	if start < 0 || end-start != int64(dim) || end > int64(vals.Len()) {
		return nil, fmt.Errorf("row %d: vector has items [%d,%d), want %d", i, start, end, dim)
	}
	for j := int(start); j < int(end); j++ {
		if vals.IsNull(j) {
			return nil, fmt.Errorf("row %d: vector item %d is null", i, j-int(start))
		}
	}
	return vals.Float32Values()[start:end], nil
}
