package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
)

// S3Settings are the pipeline file's s3 section. Credentials are not among them: they come
// from the standard chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, the
// shared config and credentials files, AWS_PROFILE or Profile, web identity, instance roles),
// and nothing here prints them.
type S3Settings struct {
	Region    string `yaml:"region" doc:"the buckets' region (default: AWS_REGION, then the profile's region)"`
	Endpoint  string `yaml:"endpoint" doc:"an S3-compatible store's URL (MinIO, s3proxy, Ceph); empty: AWS"`
	PathStyle bool   `yaml:"path_style" doc:"address buckets as ENDPOINT/BUCKET/KEY instead of BUCKET.ENDPOINT/KEY (most S3-compatible stores want it)"`
	Profile   string `yaml:"profile" doc:"the shared config profile to take credentials and region from (default: AWS_PROFILE, then default)"`
	// PartBytes is the multipart upload's part size; 0: 16 MiB.
	PartBytes int64 `yaml:"part_bytes" doc:"multipart upload part size in bytes (at least 5 MiB; default 16 MiB)"`
}

const (
	defaultPartBytes = 16 << 20
	minPartBytes     = 5 << 20
	// readRetries is how often one read resumes after the connection broke mid-body, on top of
	// the SDK's own retries of each request.
	readRetries = 5
)

// Check validates the settings in the pipeline file's words.
func (s S3Settings) Check() error {
	if s.Endpoint != "" && !strings.HasPrefix(s.Endpoint, "http://") && !strings.HasPrefix(s.Endpoint, "https://") {
		return fmt.Errorf("s3.endpoint: %q is not an http:// or https:// URL", s.Endpoint)
	}
	if s.PartBytes != 0 && s.PartBytes < minPartBytes {
		return fmt.Errorf("s3.part_bytes: %d is below S3's minimum part size of 5 MiB (5242880)", s.PartBytes)
	}
	return nil
}

type s3Store struct {
	set  S3Settings
	once sync.Once
	c    *s3.Client
	err  error
}

func newS3Store(s S3Settings) *s3Store {
	if s.PartBytes == 0 {
		s.PartBytes = defaultPartBytes
	}
	return &s3Store{set: s}
}

func (s *s3Store) client(ctx context.Context) (*s3.Client, error) {
	s.once.Do(func() {
		var opts []func(*config.LoadOptions) error
		if s.set.Region != "" {
			opts = append(opts, config.WithRegion(s.set.Region))
		}
		if s.set.Profile != "" {
			opts = append(opts, config.WithSharedConfigProfile(s.set.Profile))
		}
		cfg, err := config.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			s.err = fmt.Errorf("s3: loading the AWS configuration (s3.profile, AWS_PROFILE, ~/.aws/config): %w", err)
			return
		}
		if cfg.Region == "" {
			s.err = errors.New("s3: no region: set s3.region in the pipeline file, AWS_REGION, or the profile's region")
			return
		}
		// The SDK's own log lines (a connection not reused after a read is cancelled) are
		// no news to a user; errors come back through the calls.
		cfg.Logger = logging.Nop{}
		s.c = s3.NewFromConfig(cfg, func(o *s3.Options) {
			if s.set.Endpoint != "" {
				o.BaseEndpoint = aws.String(s.set.Endpoint)
			}
			o.UsePathStyle = s.set.PathStyle
			// The SDK's default since 2025 streams uploads with trailing CRC checksums
			// (aws-chunked), which many S3-compatible stores do not take; the sinks write a
			// sha256 file beside every part of their own.
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		})
	})
	return s.c, s.err
}

// explain turns an S3 error into one that says which bucket and key, what happened and what
// to check. Absent objects keep fs.ErrNotExist.
func (s *s3Store) explain(op string, loc Location, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	where := loc.String()
	var apiErr smithy.APIError
	code := ""
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	status := 0
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	switch {
	case code == "NoSuchBucket":
		return fmt.Errorf("%s %s: no such bucket %q (check the bucket name, and s3.endpoint/s3.region: it may exist elsewhere)", op, where, loc.Bucket)
	case code == "NoSuchUpload":
		return fmt.Errorf("%s %s: the multipart upload was aborted while it ran (another writer of the prefix, or a lifecycle rule, aborted it): %w", op, where, err)
	case code == "NoSuchKey" || code == "NotFound" || status == http.StatusNotFound:
		return &fs.PathError{Op: op, Path: where, Err: fs.ErrNotExist}
	case code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "InvalidToken" || code == "ExpiredToken":
		return fmt.Errorf("%s %s: the credentials were refused (%s): check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, the shared credentials file or s3.profile", op, where, code)
	case code == "AccessDenied" || status == http.StatusForbidden:
		return fmt.Errorf("%s %s: access denied: the credentials in use may not %s this bucket (check its policy and the identity's permissions)", op, where, strings.ToLower(op))
	case code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" || status == http.StatusMovedPermanently:
		region := ""
		if re != nil && re.Response != nil {
			region = re.Response.Header.Get("X-Amz-Bucket-Region")
		}
		if region != "" {
			return fmt.Errorf("%s %s: bucket %q is in region %s, not %s: set s3.region: %s", op, where, loc.Bucket, region, s.regionName(), region)
		}
		return fmt.Errorf("%s %s: wrong region for bucket %q (%s): check s3.region", op, where, loc.Bucket, code)
	}
	var netErr net.Error
	var opErr *net.OpError
	if errors.As(err, &opErr) || errors.As(err, &netErr) {
		ep := s.set.Endpoint
		if ep == "" {
			ep = "AWS S3"
		}
		return fmt.Errorf("%s %s: cannot reach %s (check s3.endpoint and the network): %v", op, where, ep, innermost(err))
	}
	return fmt.Errorf("%s %s: %w", op, where, err)
}

func (s *s3Store) regionName() string {
	if s.c != nil {
		return s.c.Options().Region
	}
	return s.set.Region
}

// innermost is the root cause, without the SDK's layers of operation names and retries.
func innermost(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// locate parses an s3:// path and returns it with the client that reaches it.
func (s *s3Store) locate(ctx context.Context, p string) (Location, *s3.Client, error) {
	loc, err := Parse(p)
	if err != nil {
		return Location{}, nil, err
	}
	c, err := s.client(ctx)
	return loc, c, err
}

func (s *s3Store) stat(ctx context.Context, p string) (Object, error) {
	loc, c, err := s.locate(ctx, p)
	if err != nil {
		return Object{}, err
	}
	out, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &loc.Bucket, Key: &loc.Key})
	if err != nil {
		var re *awshttp.ResponseError
		if errors.As(err, &re) && (re.HTTPStatusCode() == http.StatusNotFound || re.HTTPStatusCode() == http.StatusForbidden) {
			// A HEAD answer has no body, so no error code: a missing bucket looks like a
			// missing key and a refused signature like a refused permission. A one-byte GET
			// gets the code that tells them apart.
			rng := "bytes=0-0"
			if _, gerr := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &loc.Bucket, Key: &loc.Key, Range: &rng}); gerr != nil {
				err = gerr
			}
		}
		return Object{}, s.explain("read", loc, err)
	}
	return Object{Path: p, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified), ETag: aws.ToString(out.ETag)}, nil
}

func (s *s3Store) open(ctx context.Context, p string) (File, error) {
	o, err := s.stat(ctx, p)
	if err != nil {
		return nil, err
	}
	loc, _ := Parse(p)
	ctx, cancel := context.WithCancel(ctx)
	return &s3File{s: s, loc: loc, obj: o, ctx: ctx, cancel: cancel}, nil
}

// s3File reads an object by ranged GETs pinned to the ETag it had when opened. Read streams
// one GET from the current position and resumes with a new one where a connection breaks;
// ReadAt is one GET of exactly the range asked (a zip's directory, a dump's stream).
type s3File struct {
	s      *s3Store
	loc    Location
	obj    Object
	ctx    context.Context
	cancel context.CancelFunc

	mu   sync.Mutex // Read's state; ReadAt is independent and concurrent
	pos  int64
	body io.ReadCloser

	// ReadAt's block: readers that walk a range in small ReadAts (a section reader under a
	// decompressor, a scan for the next bz2 stream header) cost one GET per block, not one
	// per call. One block an open object bounds its memory.
	bmu      sync.Mutex
	block    []byte
	blockOff int64
}

// blockBytes is the ReadAt block: small enough to hold one per open object and worker, and
// about one stream of a multistream dump (100 pages, a few hundred KB of bz2), so reading a
// stream fetches little past its end; large enough that a GET's latency is a small part of it.
const blockBytes = 1 << 20

func (f *s3File) Name() string { return f.obj.Path }
func (f *s3File) Size() int64  { return f.obj.Size }

func (f *s3File) get(from, to int64) (io.ReadCloser, error) {
	c, err := f.s.client(f.ctx)
	if err != nil {
		return nil, err
	}
	rng := fmt.Sprintf("bytes=%d-", from)
	if to >= 0 {
		rng = fmt.Sprintf("bytes=%d-%d", from, to)
	}
	in := &s3.GetObjectInput{Bucket: &f.loc.Bucket, Key: &f.loc.Key, Range: &rng}
	if f.obj.ETag != "" {
		in.IfMatch = aws.String(f.obj.ETag)
	}
	out, err := c.GetObject(f.ctx, in)
	if err != nil {
		var apiErr smithy.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode() == "PreconditionFailed" {
			return nil, fmt.Errorf("read %s: the object was replaced while it was being read (ETag %s no longer matches)", f.loc, f.obj.ETag)
		}
		return nil, f.s.explain("read", f.loc, err)
	}
	return out.Body, nil
}

func (f *s3File) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx.Err() != nil {
		return 0, f.ctx.Err()
	}
	if f.pos >= f.obj.Size {
		return 0, io.EOF
	}
	var lastErr error
	for attempt := 0; attempt <= readRetries; attempt++ {
		if f.body == nil {
			b, err := f.get(f.pos, -1)
			if err != nil {
				return 0, err
			}
			f.body = b
		}
		n, err := f.body.Read(p)
		f.pos += int64(n)
		if err == nil || n > 0 && err == io.EOF {
			if err == io.EOF {
				f.body.Close()
				f.body = nil
			}
			return n, nil
		}
		f.body.Close()
		f.body = nil
		if err == io.EOF {
			if f.pos >= f.obj.Size {
				return 0, io.EOF
			}
			err = io.ErrUnexpectedEOF
		}
		if f.ctx.Err() != nil {
			return n, f.ctx.Err()
		}
		lastErr = err
		if n > 0 {
			return n, nil // the next Read resumes at f.pos
		}
		if !sleepCtx(f.ctx, time.Duration(attempt+1)*200*time.Millisecond) {
			return 0, f.ctx.Err()
		}
	}
	return 0, fmt.Errorf("read %s at byte %d: the connection broke %d times: %w", f.loc, f.pos, readRetries+1, lastErr)
}

func (f *s3File) ReadAt(p []byte, off int64) (int, error) {
	if off >= f.obj.Size {
		return 0, io.EOF
	}
	if len(p) < blockBytes/4 {
		return f.readAtBlock(p, off)
	}
	return f.readAtDirect(p, off)
}

// readAtBlock answers a small ReadAt from the block holding off, fetching it when needed.
func (f *s3File) readAtBlock(p []byte, off int64) (int, error) {
	f.bmu.Lock()
	defer f.bmu.Unlock()
	done := 0
	for done < len(p) {
		at := off + int64(done)
		if at >= f.obj.Size {
			return done, io.EOF
		}
		if f.block == nil || at < f.blockOff || at >= f.blockOff+int64(len(f.block)) {
			start := at - at%blockBytes
			n := min(int64(blockBytes), f.obj.Size-start)
			if cap(f.block) < int(n) {
				f.block = make([]byte, n)
			}
			f.block = f.block[:n]
			if _, err := f.readAtDirect(f.block, start); err != nil && err != io.EOF {
				f.block = nil
				return done, err
			}
			f.blockOff = start
		}
		done += copy(p[done:], f.block[at-f.blockOff:])
	}
	return done, nil
}

func (f *s3File) readAtDirect(p []byte, off int64) (int, error) {
	want := p
	if rem := f.obj.Size - off; int64(len(want)) > rem {
		want = want[:rem]
	}
	done := 0
	var lastErr error
	for attempt := 0; attempt <= readRetries && done < len(want); attempt++ {
		b, err := f.get(off+int64(done), off+int64(len(want))-1)
		if err != nil {
			return done, err
		}
		n, err := io.ReadFull(b, want[done:])
		b.Close()
		done += n
		if err == nil {
			break
		}
		if f.ctx.Err() != nil {
			return done, f.ctx.Err()
		}
		lastErr = err
		if !sleepCtx(f.ctx, time.Duration(attempt+1)*200*time.Millisecond) {
			return done, f.ctx.Err()
		}
	}
	if done < len(want) {
		return done, fmt.Errorf("read %s bytes %d-%d: %w", f.loc, off, off+int64(len(want))-1, lastErr)
	}
	if len(want) < len(p) {
		return done, io.EOF
	}
	return done, nil
}

func (f *s3File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.body != nil {
		f.body.Close()
		f.body = nil
	}
	f.cancel()
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// globMeta is where a key's glob begins.
func globMeta(key string) int { return strings.IndexAny(key, "*?[") }

func (s *s3Store) isPrefix(ctx context.Context, p string) (bool, error) {
	loc, err := Parse(p)
	if err != nil {
		return false, err
	}
	if loc.Key == "" || strings.HasSuffix(loc.Key, "/") {
		return true, nil
	}
	c, err := s.client(ctx)
	if err != nil {
		return false, err
	}
	prefix := loc.Key + "/"
	out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &loc.Bucket, Prefix: &prefix, MaxKeys: aws.Int32(1)})
	if err != nil {
		return false, s.explain("list", loc, err)
	}
	return len(out.Contents) > 0, nil
}

// list: a prefix's objects directly under it, a glob's matches in its last element, or the
// object itself.
func (s *s3Store) list(ctx context.Context, p string) ([]Object, error) {
	loc, c, err := s.locate(ctx, p)
	if err != nil {
		return nil, err
	}
	var prefix, pattern string
	switch i := globMeta(loc.Key); {
	case i >= 0:
		dir := loc.Key[:strings.LastIndex(loc.Key[:i], "/")+1]
		if strings.Contains(loc.Key[len(dir):], "/") {
			return nil, fmt.Errorf("%s: a glob may only be in the last part of the key", p)
		}
		if _, err := path.Match(loc.Key[len(dir):], ""); err != nil {
			return nil, fmt.Errorf("%q is not a valid glob pattern: %w", p, err)
		}
		prefix, pattern = dir, loc.Key[len(dir):]
	default:
		isDir, err := s.isPrefix(ctx, p)
		if err != nil {
			return nil, err
		}
		if !isDir {
			o, err := s.stat(ctx, p)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			return []Object{o}, nil
		}
		prefix = loc.Key
		if prefix != "" && !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
	}
	var out []Object
	pg := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &loc.Bucket, Prefix: &prefix, Delimiter: aws.String("/")})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, s.explain("list", loc, err)
		}
		for _, o := range page.Contents {
			name := strings.TrimPrefix(aws.ToString(o.Key), prefix)
			if name == "" || name[0] == '.' {
				continue
			}
			if pattern != "" {
				if ok, _ := path.Match(pattern, name); !ok {
					continue
				}
			}
			out = append(out, Object{Path: Scheme + loc.Bucket + "/" + aws.ToString(o.Key), Size: aws.ToInt64(o.Size),
				ModTime: aws.ToTime(o.LastModified), ETag: aws.ToString(o.ETag)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (s *s3Store) put(ctx context.Context, p string, data []byte) error {
	loc, c, err := s.locate(ctx, p)
	if err != nil {
		return err
	}
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &loc.Bucket, Key: &loc.Key, Body: strings.NewReader(string(data)),
		ContentLength: aws.Int64(int64(len(data)))})
	return s.explain("write", loc, err)
}

func (s *s3Store) remove(ctx context.Context, p string) error {
	loc, c, err := s.locate(ctx, p)
	if err != nil {
		return err
	}
	_, err = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &loc.Bucket, Key: &loc.Key})
	if err = s.explain("delete", loc, err); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// publish uploads src as dst in parts of PartBytes, completing the upload last: the object
// appears whole at CompleteMultipartUpload or not at all. Any failure aborts the upload.
func (s *s3Store) publish(ctx context.Context, src, dst string) (err error) {
	loc, c, err := s.locate(ctx, dst)
	if err != nil {
		return err
	}
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size, partBytes := fi.Size(), s.set.PartBytes
	if size <= partBytes {
		// One PUT is as atomic as a completed upload and leaves nothing behind when it fails.
		_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &loc.Bucket, Key: &loc.Key,
			Body: io.NewSectionReader(f, 0, size), ContentLength: aws.Int64(size)})
		return s.explain("write", loc, err)
	}
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &loc.Bucket, Key: &loc.Key})
	if err != nil {
		return s.explain("write", loc, err)
	}
	defer func() {
		if err != nil {
			// The caller's ctx may be what failed: the abort gets a short one of its own, so
			// that an interrupted upload does not stay open (the next writer aborts it too).
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_, _ = c.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &loc.Bucket, Key: &loc.Key, UploadId: up.UploadId})
		}
	}()
	var parts []types.CompletedPart
	for off, n := int64(0), int32(1); off < size; off, n = off+partBytes, n+1 {
		l := min(partBytes, size-off)
		out, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &loc.Bucket, Key: &loc.Key, UploadId: up.UploadId,
			PartNumber: aws.Int32(n), Body: io.NewSectionReader(f, off, l), ContentLength: aws.Int64(l)})
		if err != nil {
			return s.explain(fmt.Sprintf("write (part %d)", n), loc, err)
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(n)})
	}
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &loc.Bucket, Key: &loc.Key, UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	var re *awshttp.ResponseError
	if err != nil && errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		// The SDK retries a completion whose answer it did not get; if the first attempt did
		// complete, the retry finds no upload. The object then is there, whole, at its size.
		if o, serr := s.stat(ctx, dst); serr == nil && o.Size == size {
			return nil
		}
	}
	return s.explain("write (completing the upload)", loc, err)
}

func (s *s3Store) uploads(ctx context.Context, dir string, each func(key, id string) error) error {
	loc, c, err := s.locate(ctx, dir)
	if err != nil {
		return err
	}
	prefix := loc.Key
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	in := &s3.ListMultipartUploadsInput{Bucket: &loc.Bucket, Prefix: &prefix}
	for {
		out, err := c.ListMultipartUploads(ctx, in)
		if err != nil {
			return s.explain("list uploads of", loc, err)
		}
		for _, u := range out.Uploads {
			if err := each(aws.ToString(u.Key), aws.ToString(u.UploadId)); err != nil {
				return err
			}
		}
		if !aws.ToBool(out.IsTruncated) {
			return nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

func (s *s3Store) abortUploads(ctx context.Context, dir string) (int, error) {
	loc, _ := Parse(dir)
	n := 0
	err := s.uploads(ctx, dir, func(key, id string) error {
		_, err := s.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &loc.Bucket, Key: &key, UploadId: &id})
		if err != nil {
			return s.explain("abort the upload of", Location{Bucket: loc.Bucket, Key: key}, err)
		}
		n++
		return nil
	})
	return n, err
}

func (s *s3Store) openUploads(ctx context.Context, dir string) ([]string, error) {
	var keys []string
	err := s.uploads(ctx, dir, func(key, _ string) error { keys = append(keys, key); return nil })
	return keys, err
}

// CreateBucket makes a bucket (tests, and the bench's set-up; the sinks never create one: a
// missing bucket is the user's to make, with the policy they want).
func CreateBucket(ctx context.Context, set S3Settings, name string) error {
	s := newS3Store(set)
	c, err := s.client(ctx)
	if err != nil {
		return err
	}
	_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &name})
	return s.explain("create", Location{Bucket: name}, err)
}

// RemoveBucket aborts a bucket's open uploads, deletes every object in it and then the bucket.
func RemoveBucket(ctx context.Context, set S3Settings, name string) error {
	s := newS3Store(set)
	c, err := s.client(ctx)
	if err != nil {
		return err
	}
	root := Scheme + name + "/"
	if _, err := s.abortUploads(ctx, root); err != nil {
		return err
	}
	pg := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &name})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return s.explain("list", Location{Bucket: name}, err)
		}
		for _, o := range page.Contents {
			if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &name, Key: o.Key}); err != nil {
				return s.explain("delete", Location{Bucket: name, Key: aws.ToString(o.Key)}, err)
			}
		}
	}
	_, err = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &name})
	return s.explain("delete", Location{Bucket: name}, err)
}
