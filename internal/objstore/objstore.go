// Package objstore is where reignpipe's sources read and its file sinks write: a local path or
// an S3 object (s3://bucket/key), behind one small set of calls, so a connector is written once
// for both. S3 is reached with aws-sdk-go-v2 and its standard credential chain (environment,
// shared config and credentials files, a profile, web identity, instance roles); an endpoint
// and path-style addressing make it talk to S3-compatible stores (MinIO, s3proxy, Ceph).
//
// What the connectors rely on from S3:
//   - a PUT and a multipart upload's completion are atomic: an object is either absent or
//     whole, so a reader never sees half an upload (the vector sinks upload a part at the
//     commit that makes it durable and complete it last; the sources read only listed, complete
//     objects);
//   - an object read in several requests (ranged GETs) is pinned by its ETag (If-Match): an
//     object replaced while it is read fails the read instead of mixing two versions;
//   - a multipart upload that was never completed is invisible, and is aborted by the next
//     writer of the prefix (AbortUploads), so a crash leaves no upload open for long.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Scheme prefixes an S3 path.
const Scheme = "s3://"

// IsS3 says whether p names an S3 object or prefix.
func IsS3(p string) bool { return strings.HasPrefix(p, Scheme) }

// Location is an S3 path taken apart.
type Location struct{ Bucket, Key string }

func (l Location) String() string { return Scheme + l.Bucket + "/" + l.Key }

// Parse splits s3://bucket/key. The key may be empty (the bucket's root) and may hold a glob.
func Parse(p string) (Location, error) {
	if !IsS3(p) {
		return Location{}, fmt.Errorf("%q is not an s3:// path", p)
	}
	rest := strings.TrimPrefix(p, Scheme)
	bucket, key, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return Location{}, fmt.Errorf("%q names no bucket (s3://BUCKET/KEY)", p)
	}
	if !validBucket(bucket) {
		return Location{}, fmt.Errorf("%q: %q is not a valid bucket name (3 to 63 lower-case letters, digits, dots and hyphens)", p, bucket)
	}
	return Location{Bucket: bucket, Key: key}, nil
}

func validBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// Join joins a directory (local or S3) and a name.
func Join(dir, name string) string {
	if IsS3(dir) {
		return strings.TrimSuffix(dir, "/") + "/" + name
	}
	return filepath.Join(dir, name)
}

// Base is the last element of p.
func Base(p string) string {
	if IsS3(p) {
		return path.Base(p)
	}
	return filepath.Base(p)
}

// Object is one listed file or object.
type Object struct {
	Path    string // as the caller names it: a local path or s3://bucket/key
	Size    int64
	ModTime time.Time
	// ETag pins an S3 object's content between requests; "" for a local file.
	ETag string
}

// File is an open file or object: readable in order (Read) and at offsets (ReadAt, what a zip
// archive or a multistream dump's streams need), of known size. Close releases it; a read
// after Close fails.
type File interface {
	io.Reader
	io.ReaderAt
	io.Closer
	Size() int64
	// Name is the path it was opened by.
	Name() string
}

// Store opens paths: local ones through the file system, s3:// ones through the S3 client
// its settings make (created on first use, so a pipeline that names no s3:// path never loads
// AWS configuration). A Store is safe for concurrent use.
type Store struct {
	s3 *s3Store
}

// New makes a Store with S3 settings s (the pipeline file's s3 section).
func New(s S3Settings) *Store { return &Store{s3: newS3Store(s)} }

// Local is a Store for local paths only: an s3:// path is an error saying where S3 is set up.
var Local = &Store{}

func (st *Store) s3For(p string) (*s3Store, error) {
	if st == nil || st.s3 == nil {
		return nil, fmt.Errorf("%s: s3:// paths need the pipeline file's s3 section (at least s3.region, or AWS_REGION)", p)
	}
	return st.s3, nil
}

// Open opens a file or an object for reading; ctx bounds every request made for it until
// Close. A path that does not exist is an error satisfying errors.Is(err, fs.ErrNotExist).
func (st *Store) Open(ctx context.Context, p string) (File, error) {
	if !IsS3(p) {
		return openLocal(p)
	}
	s, err := st.s3For(p)
	if err != nil {
		return nil, err
	}
	return s.open(ctx, p)
}

// Stat describes one file or object; errors.Is(err, fs.ErrNotExist) when absent.
func (st *Store) Stat(ctx context.Context, p string) (Object, error) {
	if !IsS3(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return Object{}, err
		}
		return Object{Path: p, Size: fi.Size(), ModTime: fi.ModTime()}, nil
	}
	s, err := st.s3For(p)
	if err != nil {
		return Object{}, err
	}
	return s.stat(ctx, p)
}

// IsDir says whether p is a directory, or an S3 prefix (p ends in "/", or objects exist under
// p + "/").
func (st *Store) IsDir(ctx context.Context, p string) (bool, error) {
	if !IsS3(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return false, err
		}
		return fi.IsDir(), nil
	}
	s, err := st.s3For(p)
	if err != nil {
		return false, err
	}
	return s.isPrefix(ctx, p)
}

// List names the files a path stands for, sorted by name: a directory's (or an S3 prefix's)
// regular files directly under it, leaving out hidden ones (a leading "."); the matches of a
// glob (in the last element only for S3: s3://dumps/enwiki-*.xml.bz2); or the path itself.
// Nothing matching is an empty list, not an error.
func (st *Store) List(ctx context.Context, p string) ([]Object, error) {
	if !IsS3(p) {
		return listLocal(p)
	}
	s, err := st.s3For(p)
	if err != nil {
		return nil, err
	}
	return s.list(ctx, p)
}

// ReadFile reads a whole small file or object (a checksum, a state file).
func (st *Store) ReadFile(ctx context.Context, p string) ([]byte, error) {
	f, err := st.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
}

// Publish makes the local file src visible at dst, complete or not at all: a local dst is a
// rename (the caller fsyncs); an S3 one a single PUT when src fits in one part (s3.part_bytes),
// else a multipart upload from src completed last, aborted on any error (src is then left for
// the caller). Either is read from src as it is sent, so memory stays at one part whatever the
// file's size.
func (st *Store) Publish(ctx context.Context, src, dst string) error {
	if !IsS3(dst) {
		return os.Rename(src, dst)
	}
	s, err := st.s3For(dst)
	if err != nil {
		return err
	}
	return s.publish(ctx, src, dst)
}

// WriteFile makes data visible at p, whole or not at all (a checksum line, a state file).
func (st *Store) WriteFile(ctx context.Context, p string, data []byte) error {
	if !IsS3(p) {
		return errors.New("objstore: WriteFile is for s3:// paths; local files use internal/atomicfile")
	}
	s, err := st.s3For(p)
	if err != nil {
		return err
	}
	return s.put(ctx, p, data)
}

// Remove deletes a file or object; one already absent is not an error.
func (st *Store) Remove(ctx context.Context, p string) error {
	if !IsS3(p) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	s, err := st.s3For(p)
	if err != nil {
		return err
	}
	return s.remove(ctx, p)
}

// AbortUploads aborts the multipart uploads left open under the S3 prefix dir (a writer
// killed mid-upload leaves one; it is invisible, but a bucket bills its parts until it goes)
// and returns how many it aborted. A local dir has none. Only the one writer of a prefix may
// call it: it cannot tell another live writer's upload from a dead one's.
func (st *Store) AbortUploads(ctx context.Context, dir string) (int, error) {
	if !IsS3(dir) {
		return 0, nil
	}
	s, err := st.s3For(dir)
	if err != nil {
		return 0, err
	}
	return s.abortUploads(ctx, dir)
}

// OpenUploads lists the multipart uploads open under the S3 prefix dir (keys), for checks.
func (st *Store) OpenUploads(ctx context.Context, dir string) ([]string, error) {
	if !IsS3(dir) {
		return nil, nil
	}
	s, err := st.s3For(dir)
	if err != nil {
		return nil, err
	}
	return s.openUploads(ctx, dir)
}

type localFile struct {
	*os.File
	size int64
}

func (f *localFile) Size() int64 { return f.size }

func openLocal(p string) (File, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &localFile{File: f, size: fi.Size()}, nil
}

func listLocal(p string) ([]Object, error) {
	var names []string
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.Type().IsRegular() && e.Name()[0] != '.' {
				names = append(names, filepath.Join(p, e.Name()))
			}
		}
	} else {
		m, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("%q is not a valid glob pattern: %w", p, err)
		}
		names = m
	}
	sort.Strings(names)
	out := make([]Object, 0, len(names))
	for _, n := range names {
		fi, err := os.Stat(n)
		if err != nil {
			continue // gone since it was listed
		}
		if fi.Mode().IsRegular() {
			out = append(out, Object{Path: n, Size: fi.Size(), ModTime: fi.ModTime()})
		}
	}
	return out, nil
}
