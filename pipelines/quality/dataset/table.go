package dataset

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/reignpipe/reignpipe/internal/parquetread"

	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
)

// row is one record of a table file: the requested columns present in it, as Go values
// (string, int64, float64, bool, []any, or nil for null). JSON numbers stay json.Number so an
// id keeps its source spelling.
type row map[string]any

// mem allocates the Arrow buffers of Parquet and IPC reads; tests swap in a checked allocator.
var mem memory.Allocator = memory.DefaultAllocator

// isTableFile says whether readRows can read path, by its name.
func isTableFile(path string) bool {
	name := strings.ToLower(filepath.Base(path))
	for _, ext := range []string{".jsonl", ".jsonl.gz", ".parquet", ".arrow"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

// tableFiles lists the table files under dir, recursively, in lexical path order; symbolic
// links and hidden entries (.cache, .git) are skipped.
func tableFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && isTableFile(p) {
			out = append(out, p)
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

// readRows calls fn for each record of a .jsonl(.gz), .parquet or .arrow (Arrow IPC stream or
// file, as Hugging Face datasets' save_to_disk writes) file, with only the listed columns.
// Errors name the file and, for JSONL, the line.
func readRows(path string, cols []string, fn func(row) error) error {
	name := strings.ToLower(path)
	var err error
	switch {
	case strings.HasSuffix(name, ".parquet"):
		err = readParquet(path, cols, fn)
	case strings.HasSuffix(name, ".arrow"):
		err = readArrowIPC(path, cols, fn)
	default:
		return readJSONL(path, cols, fn) // its errors name the file and line already
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// readJSONL reads path (gunzipped when it ends in .gz) with the plain BEIR loader's line reader, one
// JSON object per non-blank line; errors carry the file and line.
func readJSONL(path string, cols []string, fn func(row) error) error {
	return beir.EachFileLine(path, func(line []byte) error {
		rw, err := parseJSONRow(line, cols)
		if err != nil {
			return err
		}
		return fn(rw)
	})
}

func parseJSONRow(line []byte, cols []string) (row, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(line, &all); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	rw := row{}
	for _, c := range cols {
		raw, ok := all[c]
		if !ok {
			continue
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("field %q: %w", c, err)
		}
		rw[c] = v
	}
	return rw, nil
}

// readParquet streams the file in record batches so a multi-gigabyte corpus shard is never
// decoded whole. A panic of the Parquet decoder on malformed bytes becomes an error.
func readParquet(path string, cols []string, fn func(row) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt Parquet file: %v", r)
		}
	}()
	pf, err := parquetread.Open(path)
	if err != nil {
		return err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1024}, mem)
	if err != nil {
		return err
	}
	sc, err := fr.Schema()
	if err != nil {
		return err
	}
	var idx []int
	for _, c := range cols {
		idx = append(idx, sc.FieldIndices(c)...)
	}
	slices.Sort(idx)
	if len(idx) == 0 {
		return fmt.Errorf("none of the columns %s", strings.Join(cols, ", "))
	}
	rr, err := fr.GetRecordReader(context.Background(), idx, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	for rr.Next() {
		if err := emitRecord(rr.RecordBatch(), fn); err != nil {
			return err
		}
	}
	return rr.Err()
}

// readArrowIPC reads the IPC stream format (Hugging Face .arrow files) or, when the file
// starts with the "ARROW1" magic, the IPC file format.
func readArrowIPC(path string, cols []string, fn func(row) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt Arrow IPC file: %v", r)
		}
	}()
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	magic := make([]byte, 6)
	if _, err := io.ReadFull(f, magic); err == nil && string(magic) == "ARROW1" {
		fr, err := ipc.NewFileReader(f, ipc.WithAllocator(mem))
		if err != nil {
			return err
		}
		defer fr.Close()
		for i := 0; i < fr.NumRecords(); i++ {
			rec, err := fr.RecordBatch(i)
			if err != nil {
				return err
			}
			if err := emitProjected(rec, cols, fn); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	r, err := ipc.NewReader(bufio.NewReaderSize(f, 1<<20), ipc.WithAllocator(mem))
	if err != nil {
		return err
	}
	defer r.Release()
	for r.Next() {
		if err := emitProjected(r.RecordBatch(), cols, fn); err != nil {
			return err
		}
	}
	return r.Err()
}

// emitProjected emits the listed columns of rec (an IPC file carries every column).
func emitProjected(rec arrow.RecordBatch, cols []string, fn func(row) error) error {
	var fields []arrow.Field
	var arrs []arrow.Array
	for _, c := range cols {
		for _, i := range rec.Schema().FieldIndices(c) {
			fields = append(fields, rec.Schema().Field(i))
			arrs = append(arrs, rec.Column(i))
		}
	}
	p := array.NewRecordBatch(arrow.NewSchema(fields, nil), arrs, rec.NumRows())
	defer p.Release()
	return emitRecord(p, fn)
}

func emitRecord(rec arrow.RecordBatch, fn func(row) error) error {
	sc := rec.Schema()
	for i := 0; i < int(rec.NumRows()); i++ {
		rw := make(row, rec.NumCols())
		for c := 0; c < int(rec.NumCols()); c++ {
			v, err := value(rec.Column(c), i)
			if err != nil {
				return fmt.Errorf("column %q: %w", sc.Field(c).Name, err)
			}
			rw[sc.Field(c).Name] = v
		}
		if err := fn(rw); err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
	}
	return nil
}

// value converts element i of an Arrow array to a plain Go value.
func value(a arrow.Array, i int) (any, error) {
	if a.IsNull(i) {
		return nil, nil
	}
	switch a := a.(type) {
	case *array.String:
		return a.Value(i), nil
	case *array.LargeString:
		return a.Value(i), nil
	case *array.StringView:
		return a.Value(i), nil
	case *array.Int8:
		return int64(a.Value(i)), nil
	case *array.Int16:
		return int64(a.Value(i)), nil
	case *array.Int32:
		return int64(a.Value(i)), nil
	case *array.Int64:
		return a.Value(i), nil
	case *array.Uint8:
		return int64(a.Value(i)), nil
	case *array.Uint16:
		return int64(a.Value(i)), nil
	case *array.Uint32:
		return int64(a.Value(i)), nil
	case *array.Float32:
		return float64(a.Value(i)), nil
	case *array.Float64:
		return a.Value(i), nil
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Dictionary:
		return value(a.Dictionary(), a.GetValueIndex(i))
	case array.ListLike:
		start, end := a.ValueOffsets(i)
		out := make([]any, 0, end-start)
		for j := start; j < end; j++ {
			v, err := value(a.ListValues(), int(j))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported type %s", a.DataType())
}

// str returns a text or id value; ok is false when the column is absent or null.
func str(rw row, col string) (s string, ok bool, err error) {
	switch v := rw[col].(type) {
	case nil:
		return "", false, nil
	case string:
		return v, true, nil
	case json.Number:
		return v.String(), true, nil
	case int64:
		return strconv.FormatInt(v, 10), true, nil
	}
	return "", false, fmt.Errorf("column %q: want a string, got %T", col, rw[col])
}

// strs returns a list-of-strings value (LoCo's answer_pids).
func strs(rw row, col string) ([]string, error) {
	v, ok := rw[col].([]any)
	if !ok {
		if rw[col] == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("column %q: want a list, got %T", col, rw[col])
	}
	out := make([]string, 0, len(v))
	for _, x := range v {
		s, ok, err := str(row{col: x}, col)
		if err != nil || !ok {
			return nil, fmt.Errorf("column %q: list item %v is not a string", col, x)
		}
		out = append(out, s)
	}
	return out, nil
}

// grade returns an integer relevance score; integral floats (1.0) are accepted because
// Hugging Face qrels store scores as float64.
func grade(rw row, col string) (int, error) {
	var x float64
	switch v := rw[col].(type) {
	case int64:
		return int(v), nil
	case float64:
		x = v
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return 0, fmt.Errorf("column %q: %w", col, err)
		}
		x = f
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("column %q: score %q is not a number", col, v)
		}
		x = f
	case nil:
		return 0, fmt.Errorf("column %q is missing", col)
	default:
		return 0, fmt.Errorf("column %q: want a number, got %T", col, v)
	}
	if x != float64(int64(x)) || x > 1e9 || x < -1e9 {
		return 0, fmt.Errorf("column %q: score %v is not an integer", col, x)
	}
	return int(x), nil
}
