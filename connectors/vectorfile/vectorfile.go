// Package vectorfile holds the file sinks for document vectors: Parquet (schemas.VectorSchema,
// zstd) and JSON Lines, and the reader that applies readers' upsert semantics to them.
//
// Layout: a sink owns one directory and writes numbered parts, part-00000001.parquet (or
// .jsonl), part-00000002..., each made visible whole by Flush (written as .part-*.tmp, fsynced,
// renamed, directory fsynced; the leading dot hides a crash-left temp from pyarrow's and
// DuckDB's directory readers, which skip hidden files). A JSONL part's sha256 is made durable
// first, in .part-<seq>.jsonl.sha256 (`sha256sum -c` format), and checked before the part is read. A part is never rewritten; a reopened sink continues after the
// highest existing sequence number of either format, so one directory may hold both formats
// over time, but only one sink may write a directory at a time. Temp files are what a crash
// leaves; readers ignore them and a new sink removes them.
//
// Readers take the newest Version of each DocID; on equal versions the later part (and within a
// part the later row) wins, so re-writing a vector after a crash is harmless. A deletion is a
// tombstone row (deleted set): where it is a document's newest row the document is gone, and a
// tombstone wins a tie with a vector of its version, wherever that vector is (Replaces). Parts
// are never rewritten, so a tombstone stays: unlike a database's deletions it is not forgotten
// after run.delete_retention.
package vectorfile

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/schemas"
)

const (
	partPrefix = "part-"
	tmpPrefix  = "." // temps are hidden: .part-00000001.parquet.tmp
	tmpSuffix  = ".tmp"
	sumSuffix  = ".sha256"
	extParquet = ".parquet"
	extJSONL   = ".jsonl"
)

var errClosed = errors.New("vectorfile: sink is closed")

type partName struct {
	seq  uint64
	ext  string
	name string
}

// parsePartName accepts exactly the names the sinks write, so temp files and strays are never
// read as parts.
func parsePartName(name string) (partName, bool) {
	ext := filepath.Ext(name)
	if (ext != extParquet && ext != extJSONL) || !strings.HasPrefix(name, partPrefix) {
		return partName{}, false
	}
	digits := strings.TrimSuffix(strings.TrimPrefix(name, partPrefix), ext)
	if len(digits) < 8 {
		return partName{}, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return partName{}, false
		}
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return partName{}, false
	}
	return partName{seq: seq, ext: ext, name: name}, true
}

// listParts returns the visible parts of dir in reading order.
func listParts(dir string) ([]partName, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("vectorfile: %w", err)
	}
	var parts []partName
	for _, e := range entries {
		if p, ok := parsePartName(e.Name()); ok && e.Type().IsRegular() {
			parts = append(parts, p)
		}
	}
	sortParts(parts)
	return parts, nil
}

// prepareDir creates dir, removes crash leftovers and returns the next free sequence number.
func prepareDir(dir string) (uint64, error) {
	if dir == "" {
		return 0, errors.New("vectorfile: Dir is required")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("vectorfile: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("vectorfile: %w", err)
	}
	for _, e := range entries {
		// Both the hidden temps and the visible ones earlier versions wrote, and checksum
		// files whose part a crash kept from becoming visible.
		n := strings.TrimPrefix(e.Name(), tmpPrefix)
		leftover := strings.HasPrefix(n, partPrefix) && strings.HasSuffix(n, tmpSuffix)
		if strings.HasPrefix(e.Name(), tmpPrefix) && strings.HasSuffix(n, sumSuffix) {
			_, err := os.Stat(filepath.Join(dir, strings.TrimSuffix(n, sumSuffix)))
			leftover = errors.Is(err, os.ErrNotExist)
		}
		if leftover {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return 0, fmt.Errorf("vectorfile: remove crash leftover: %w", err)
			}
		}
	}
	parts, err := listParts(dir)
	if err != nil {
		return 0, err
	}
	if len(parts) == 0 {
		return 1, nil
	}
	return parts[len(parts)-1].seq + 1, nil
}

// partFile is a part being written under its temp name.
type partFile struct {
	dir        folder
	f          *os.File
	w          *bufio.Writer
	tmp, final string
	sum        hash.Hash // JSONL parts: sha256 of every byte written, for the checksum file
}

func createPart(dir folder, seq uint64, ext string) (*partFile, error) {
	name := fmt.Sprintf("%s%08d%s", partPrefix, seq, ext)
	f, tmp, err := dir.tempFor(name)
	if err != nil {
		return nil, fmt.Errorf("vectorfile: %w", err)
	}
	// bufio.Writer also hides f's Close from the Parquet writer, which would otherwise close
	// the file before it can be fsynced.
	p := &partFile{dir: dir, f: f, tmp: tmp, final: dir.path(name)}
	var w io.Writer = f
	if ext == extJSONL {
		// Parquet pages and footer carry their own checks; a JSONL line does not, and one
		// changed digit would otherwise read back as a valid vector.
		p.sum = sha256.New()
		w = io.MultiWriter(f, p.sum)
	}
	p.w = bufio.NewWriterSize(w, 1<<20)
	return p, nil
}

// sumPath is the checksum file of a part: `sha256sum -c` reads it. Hidden, like the temps, so
// directory readers do not take it for data.
func sumPath(part string) string {
	if objstore.IsS3(part) {
		i := strings.LastIndex(part, "/")
		return part[:i+1] + "." + part[i+1:] + sumSuffix
	}
	return filepath.Join(filepath.Dir(part), "."+filepath.Base(part)+sumSuffix)
}

// verifySum checks a part against its checksum file; a part without one (written before
// checksums existed) passes.
func verifySum(ctx context.Context, dir folder, part string) error {
	want, err := dir.st.ReadFile(ctx, sumPath(part))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("vectorfile: %w", err)
	}
	fields := strings.Fields(string(want))
	if len(fields) != 2 || fields[1] != objstore.Base(part) {
		return fmt.Errorf("vectorfile: %s is not a checksum line for %s", sumPath(part), objstore.Base(part))
	}
	f, err := dir.open(ctx, part)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("vectorfile: %s: %w", part, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != fields[0] {
		return fmt.Errorf("vectorfile: %s was changed or damaged after it was written: sha256 %s, its checksum file says %s", part, got, fields[0])
	}
	return nil
}

// commit makes the part visible complete: flush, fsync, rename, fsync dir (in a bucket:
// flush, then upload its checksum and the part, completed last).
func (p *partFile) commit(ctx context.Context) error {
	if err := p.w.Flush(); err != nil {
		p.abort()
		return fmt.Errorf("vectorfile: %w", err)
	}
	if err := p.f.Sync(); err != nil {
		p.abort()
		return fmt.Errorf("vectorfile: %w", err)
	}
	if err := p.f.Close(); err != nil {
		_ = os.Remove(p.tmp)
		return fmt.Errorf("vectorfile: %w", err)
	}
	if p.dir.remote() {
		var line []byte
		if p.sum != nil {
			line = fmt.Appendf(nil, "%x  %s\n", p.sum.Sum(nil), objstore.Base(p.final))
		}
		err := p.dir.publishRemote(ctx, p.tmp, p.final, line)
		_ = os.Remove(p.tmp)
		return err
	}
	if p.sum != nil {
		// Durable before the part is visible, so a visible part always has its checksum.
		line := fmt.Sprintf("%x  %s\n", p.sum.Sum(nil), filepath.Base(p.final))
		if err := atomicfile.Write(sumPath(p.final), []byte(line)); err != nil {
			_ = os.Remove(p.tmp)
			return fmt.Errorf("vectorfile: checksum: %w", err)
		}
	}
	if err := os.Rename(p.tmp, p.final); err != nil {
		_ = os.Remove(p.tmp)
		return fmt.Errorf("vectorfile: %w", err)
	}
	d, err := os.Open(filepath.Dir(p.final))
	if err != nil {
		return fmt.Errorf("vectorfile: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("vectorfile: sync dir: %w", err)
	}
	return nil
}

func (p *partFile) abort() {
	_ = p.f.Close()
	_ = os.Remove(p.tmp)
}

// ReadVectors calls fn for every row in dir's parts, in part order and row order: a vector
// (deleted false), or a deletion's tombstone (deleted true; v then holds only DocID, Source
// and Version). It holds one record batch (Parquet) or one line (JSONL) at a time.
func ReadVectors(dir string, fn func(v schemas.DocVector, deleted bool) error) error {
	return readVectors(context.Background(), folderOf(nil, dir), memory.DefaultAllocator, fn)
}

// ReadVectorsIn is ReadVectors for a folder that may be an s3:// prefix, opened through st.
func ReadVectorsIn(ctx context.Context, st *objstore.Store, dir string, fn func(v schemas.DocVector, deleted bool) error) error {
	return readVectors(ctx, folderOf(st, dir), memory.DefaultAllocator, fn)
}

func readVectors(ctx context.Context, dir folder, mem memory.Allocator, fn func(schemas.DocVector, bool) error) error {
	parts, err := dir.parts(ctx)
	if err != nil {
		return err
	}
	for _, p := range parts {
		path := dir.path(p.name)
		var err error
		if p.ext == extParquet {
			err = readParquetPart(ctx, dir, path, mem, fn)
		} else {
			err = readJSONLPart(ctx, dir, path, fn)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Replaces says whether a row of a document read after the one kept so far takes its place:
// the newer version wins; on equal versions a tombstone wins over a vector, and otherwise the
// later row. A tombstone without a version removes whatever was kept, and is not remembered:
// any later row takes its place.
func Replaces(keptVersion string, keptDeleted bool, version string, deleted bool) bool {
	switch {
	case deleted && version == "", keptDeleted && keptVersion == "":
		return true
	}
	c := schemas.CompareVersions(version, keptVersion)
	return c > 0 || c == 0 && (deleted || !keptDeleted)
}

// Fold keeps, for each doc id, the row that wins as rows are added in part and row order
// (Replaces), with a value of the caller's for the vectors.
type Fold[T any] struct{ m map[string]*folded[T] }

type folded[T any] struct {
	version string
	deleted bool
	val     T
}

// NewFold returns an empty fold.
func NewFold[T any]() *Fold[T] { return &Fold[T]{m: map[string]*folded[T]{}} }

// Add folds in the next row of docID; val is kept for a vector (deleted false). It reports
// whether the row now stands for the document.
func (f *Fold[T]) Add(docID, version string, deleted bool, val T) bool {
	k := f.m[docID]
	if k != nil && !Replaces(k.version, k.deleted, version, deleted) {
		return false
	}
	if k == nil {
		k = &folded[T]{}
		f.m[docID] = k
	}
	var zero T
	k.version, k.deleted, k.val = version, deleted, val
	if deleted {
		k.val = zero
	}
	return true
}

// Live calls fn for every document whose winning row is a vector, in no particular order.
func (f *Fold[T]) Live(fn func(docID string, val T)) {
	for id, k := range f.m {
		if !k.deleted {
			fn(id, k.val)
		}
	}
}

// Latest returns the newest vector of each DocID in dir that is not deleted (see the package
// comment for ties). Memory is one vector per document.
func Latest(dir string) (map[string]schemas.DocVector, error) {
	return LatestIn(context.Background(), nil, dir)
}

// LatestIn is Latest for a folder that may be an s3:// prefix, opened through st.
func LatestIn(ctx context.Context, st *objstore.Store, dir string) (map[string]schemas.DocVector, error) {
	f := NewFold[schemas.DocVector]()
	err := ReadVectorsIn(ctx, st, dir, func(v schemas.DocVector, deleted bool) error {
		f.Add(v.DocID, v.Version, deleted, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := map[string]schemas.DocVector{}
	f.Live(func(id string, v schemas.DocVector) { out[id] = v })
	return out, nil
}

// sinkState is what both sinks refuse a call for: closed, or a sticky error (after a failed
// write the open part is gone, so later calls fail too).
type sinkState struct {
	err    error
	closed bool
}

func (s *sinkState) usable(ctx context.Context) error {
	if s.closed {
		return errClosed
	}
	if s.err != nil {
		return s.err
	}
	return ctx.Err()
}
