package vectorfile

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/internal/parquetread"
)

// folder is where a sink's parts live: a local directory, or an S3 prefix (s3://bucket/key).
// In a bucket a part is written to a local temp file, as on disk, and published at its commit
// by one PUT (a multipart upload completed last when larger than s3.part_bytes), so the prefix
// shows whole parts only, under the same names, each with its checksum object written before
// it. A sink killed mid-upload may leave an open multipart upload, which the next sink of the
// prefix aborts; a checksum object whose part never
// appeared is hidden, and overwritten when its sequence number is written again.
type folder struct {
	st  *objstore.Store
	dir string
}

func folderOf(st *objstore.Store, dir string) folder {
	if st == nil {
		st = objstore.Local
	}
	return folder{st: st, dir: dir}
}

func (f folder) remote() bool { return objstore.IsS3(f.dir) }

func (f folder) path(name string) string { return objstore.Join(f.dir, name) }

// prepareRemote aborts the uploads a killed sink left open and returns the next free sequence
// number. Local folders are prepared by prepareDir.
func (f folder) prepareRemote(ctx context.Context) (uint64, error) {
	if _, err := f.st.AbortUploads(ctx, f.dir); err != nil {
		return 0, fmt.Errorf("vectorfile: %w", err)
	}
	parts, err := f.parts(ctx)
	if err != nil {
		return 0, err
	}
	if len(parts) == 0 {
		return 1, nil
	}
	return parts[len(parts)-1].seq + 1, nil
}

// parts lists the visible parts in reading order.
func (f folder) parts(ctx context.Context) ([]partName, error) {
	if !f.remote() {
		return listParts(f.dir)
	}
	objs, err := f.st.List(ctx, f.dir)
	if err != nil {
		return nil, fmt.Errorf("vectorfile: %w", err)
	}
	var parts []partName
	for _, o := range objs {
		if p, ok := parsePartName(objstore.Base(o.Path)); ok {
			parts = append(parts, p)
		}
	}
	sortParts(parts)
	return parts, nil
}

func sortParts(parts []partName) {
	sort.Slice(parts, func(i, j int) bool {
		if parts[i].seq != parts[j].seq {
			return parts[i].seq < parts[j].seq
		}
		return parts[i].ext < parts[j].ext
	})
}

// exists says whether the folder is there (a prefix: whether it holds anything).
func (f folder) exists(ctx context.Context) (bool, error) {
	if !f.remote() {
		_, err := os.Stat(f.dir)
		return err == nil, nil
	}
	objs, err := f.st.List(ctx, f.dir)
	return len(objs) > 0, err
}

// tempFor is where a part is written before its commit: beside it on disk (the commit is a
// rename), in the system's temp folder for a bucket (the commit uploads it).
func (f folder) tempFor(name string) (*os.File, string, error) {
	if !f.remote() {
		tmp := filepath.Join(f.dir, tmpPrefix+name+tmpSuffix)
		fh, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
		return fh, tmp, err
	}
	fh, err := os.CreateTemp("", "reignpipe-"+name+"-*"+tmpSuffix)
	if err != nil {
		return nil, "", err
	}
	return fh, fh.Name(), nil
}

// publishRemote uploads a committed part's checksum (when it has one), then the part.
func (f folder) publishRemote(ctx context.Context, tmp, final string, sumLine []byte) error {
	if sumLine != nil {
		if err := f.st.WriteFile(ctx, sumPath(final), sumLine); err != nil {
			return fmt.Errorf("vectorfile: checksum: %w", err)
		}
	}
	if err := f.st.Publish(ctx, tmp, final); err != nil {
		return fmt.Errorf("vectorfile: %w", err)
	}
	return nil
}

// open opens a part for reading.
func (f folder) open(ctx context.Context, path string) (objstore.File, error) {
	fh, err := f.st.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("vectorfile: %w", err)
	}
	return fh, nil
}

// openParquet opens a Parquet part: locally through its file, in a bucket by ranged reads
// (footer, then row groups), never a whole download.
func (f folder) openParquet(ctx context.Context, path string) (*file.Reader, io.Closer, error) {
	if !f.remote() {
		pf, err := parquetread.Open(path)
		return pf, pf, err
	}
	fh, err := f.open(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	pf, err := parquetread.OpenReader(io.NewSectionReader(fh, 0, fh.Size()))
	if err != nil {
		fh.Close()
		return nil, nil, err
	}
	return pf, closers{pf, fh}, nil
}

type closers []io.Closer

func (c closers) Close() error {
	var first error
	for _, x := range c {
		if err := x.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// partSeq is a sink's folder and the sequence number of its next part. A local folder is
// prepared when the sink opens (prepareDir); a bucket's at the first write, which has the
// caller's context for the listing and the aborts it takes.
type partSeq struct {
	dir folder
	seq uint64 // 0: not prepared yet
}

func newPartSeq(st *objstore.Store, dir string) (partSeq, error) {
	f := folderOf(st, dir)
	if f.remote() {
		if _, err := objstore.Parse(dir); err != nil {
			return partSeq{}, fmt.Errorf("vectorfile: %w", err)
		}
		return partSeq{dir: f}, nil
	}
	seq, err := prepareDir(dir)
	return partSeq{dir: f, seq: seq}, err
}

// create starts the next part.
func (p *partSeq) create(ctx context.Context, ext string) (*partFile, error) {
	if p.seq == 0 {
		seq, err := p.dir.prepareRemote(ctx)
		if err != nil {
			return nil, err
		}
		p.seq = seq
	}
	return createPart(p.dir, p.seq, ext)
}

// fileCounts gives a vector file sink its connectors.SinkCounter: the vectors (written) and
// tombstone rows (deleted) in parts a Flush made visible.
type fileCounts struct{ counts connectors.FlushCounts }

// counted counts one row under name when err says it was appended.
func (f *fileCounts) counted(name string, err error) error {
	if err == nil {
		f.counts.Add(name)
	}
	return err
}

// Counts is the rows in visible parts: written (vectors) and deleted (tombstones).
func (f *fileCounts) Counts() map[string]int64 {
	return f.counts.Counts(connectors.CountWritten, connectors.CountDeleted)
}
