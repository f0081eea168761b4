package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/internal/s3test"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, bucket, key, err string
	}{
		{"s3://dumps/enwiki/x.bz2", "dumps", "enwiki/x.bz2", ""},
		{"s3://dumps", "dumps", "", ""},
		{"s3://dumps/", "dumps", "", ""},
		{"s3:///x", "", "", "names no bucket"},
		{"s3://Dumps/x", "", "", "not a valid bucket name"},
		{"s3://ab/x", "", "", "not a valid bucket name"},
		{"/tmp/x", "", "", "not an s3:// path"},
	} {
		loc, err := objstore.Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || loc.Bucket != tc.bucket || loc.Key != tc.key {
			t.Errorf("%s: %+v %v", tc.in, loc, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"s3://b/k", "s3://", "s3://bucket/a/*.bz2", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		loc, err := objstore.Parse(p)
		if err == nil && loc.String() != strings.TrimSuffix(p, "") && !strings.HasPrefix(p, "s3://"+loc.Bucket) {
			t.Fatalf("%q parsed to %+v", p, loc)
		}
	})
}

// store is one of the two kinds of places a connector reads and writes, with a way to put a
// file there as a user would.
type place struct {
	name string
	st   *objstore.Store
	root string
	put  func(t *testing.T, rel string, data []byte)
}

func places(t *testing.T) []place {
	dir := t.TempDir()
	local := place{"local", objstore.Local, dir, func(t *testing.T, rel string, data []byte) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}}
	set := s3test.Settings(t)
	bucket := s3test.Bucket(t, set)
	st := objstore.New(set)
	remote := place{"s3", st, "s3://" + bucket, func(t *testing.T, rel string, data []byte) {
		if err := st.WriteFile(context.Background(), "s3://"+bucket+"/"+rel, data); err != nil {
			t.Fatal(err)
		}
	}}
	return []place{local, remote}
}

// Listing, reading in order and at offsets behave the same on disk and in a bucket.
func TestListAndRead(t *testing.T) {
	ctx := context.Background()
	for _, pl := range places(t) {
		t.Run(pl.name, func(t *testing.T) {
			big := make([]byte, 3<<20)
			rand.New(rand.NewSource(1)).Read(big)
			pl.put(t, "feed/b.jsonl", []byte("b\n"))
			pl.put(t, "feed/a.jsonl", []byte("a\n"))
			pl.put(t, "feed/c.zip", big)
			pl.put(t, "feed/.hidden", []byte("h"))
			pl.put(t, "feed/sub/d.jsonl", []byte("d\n"))
			names := func(p string) []string {
				objs, err := pl.st.List(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, o := range objs {
					out = append(out, strings.TrimPrefix(o.Path, pl.root+"/"))
				}
				return out
			}
			for _, tc := range []struct{ path, want string }{
				{"feed", "feed/a.jsonl feed/b.jsonl feed/c.zip"},
				{"feed/*.jsonl", "feed/a.jsonl feed/b.jsonl"},
				{"feed/c.zip", "feed/c.zip"},
				{"feed/missing", ""},
			} {
				if got := strings.Join(names(objstore.Join(pl.root, tc.path)), " "); got != tc.want {
					t.Errorf("List(%s) = %q, want %q", tc.path, got, tc.want)
				}
			}
			f, err := pl.st.Open(ctx, objstore.Join(pl.root, "feed/c.zip"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Size() != int64(len(big)) {
				t.Fatalf("size %d", f.Size())
			}
			got, err := io.ReadAll(f)
			if err != nil || !bytes.Equal(got, big) {
				t.Fatalf("ReadAll: %d bytes, %v", len(got), err)
			}
			buf := make([]byte, 1000)
			if n, err := f.ReadAt(buf, 12345); n != 1000 || err != nil || !bytes.Equal(buf, big[12345:13345]) {
				t.Fatalf("ReadAt: %d %v", n, err)
			}
			if n, err := f.ReadAt(buf, int64(len(big))-10); n != 10 || err != io.EOF {
				t.Fatalf("ReadAt at the end: %d %v", n, err)
			}
			if _, err := pl.st.Open(ctx, objstore.Join(pl.root, "feed/nope")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("missing object: %v", err)
			}
		})
	}
}

// Publish makes a file visible whole, in several parts when large, and leaves no upload open.
func TestPublish(t *testing.T) {
	ctx := context.Background()
	set := s3test.Settings(t)
	set.PartBytes = 5 << 20
	bucket := s3test.Bucket(t, set)
	st := objstore.New(set)
	data := make([]byte, 11<<20+17) // three parts
	rand.New(rand.NewSource(2)).Read(data)
	src := filepath.Join(t.TempDir(), "part")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dst := "s3://" + bucket + "/out/part-00000001.parquet"
	if err := st.Publish(ctx, src, dst); err != nil {
		t.Fatal(err)
	}
	got, err := st.ReadFile(ctx, dst)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
	if ups, err := st.OpenUploads(ctx, "s3://"+bucket+"/out"); err != nil || len(ups) != 0 {
		t.Fatalf("open uploads %v %v", ups, err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := st.Publish(ctx, empty, "s3://"+bucket+"/out/empty"); err != nil {
		t.Fatal(err)
	}
	if o, err := st.Stat(ctx, "s3://"+bucket+"/out/empty"); err != nil || o.Size != 0 {
		t.Fatalf("empty object %+v %v", o, err)
	}
	// A cancelled upload is aborted, not left open, and nothing is visible.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := st.Publish(cctx, src, "s3://"+bucket+"/out/cancelled"); err == nil {
		t.Fatal("a cancelled upload succeeded")
	}
	if _, err := st.Stat(ctx, "s3://"+bucket+"/out/cancelled"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("cancelled upload visible: %v", err)
	}
}

// An upload a killed writer left open is listed and aborted by the next writer of the prefix.
func TestAbortUploads(t *testing.T) {
	ctx := context.Background()
	set := s3test.Settings(t)
	bucket := s3test.Bucket(t, set)
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(set.Region))
	if err != nil {
		t.Fatal(err)
	}
	c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint = aws.String(set.Endpoint); o.UsePathStyle = true })
	for _, k := range []string{"out/part-00000002.parquet", "other/x"} {
		if _, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String(k)}); err != nil {
			t.Fatal(err)
		}
	}
	st := objstore.New(set)
	ups, err := st.OpenUploads(ctx, "s3://"+bucket+"/out")
	if err != nil || len(ups) != 1 || ups[0] != "out/part-00000002.parquet" {
		t.Fatalf("open uploads %v %v", ups, err)
	}
	if n, err := st.AbortUploads(ctx, "s3://"+bucket+"/out"); n != 1 || err != nil {
		t.Fatalf("aborted %d %v", n, err)
	}
	if ups, _ := st.OpenUploads(ctx, "s3://"+bucket+"/out"); len(ups) != 0 {
		t.Fatalf("still open: %v", ups)
	}
	if ups, _ := st.OpenUploads(ctx, "s3://"+bucket+"/other"); len(ups) != 1 {
		t.Fatalf("another prefix's upload was touched: %v", ups)
	}
}

// An object replaced while it is read fails the read rather than mixing two versions.
func TestReplacedWhileRead(t *testing.T) {
	ctx := context.Background()
	set := s3test.Settings(t)
	bucket := s3test.Bucket(t, set)
	st := objstore.New(set)
	p := "s3://" + bucket + "/dump.xml"
	if err := st.WriteFile(ctx, p, bytes.Repeat([]byte("a"), 4096)); err != nil {
		t.Fatal(err)
	}
	f, err := st.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := st.WriteFile(ctx, p, bytes.Repeat([]byte("b"), 4096)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, 10), 0); err == nil || !strings.Contains(err.Error(), "replaced while it was being read") {
		t.Fatalf("read of a replaced object: %v", err)
	}
}

// A wrong credential, a missing bucket and an unreachable endpoint each say which.
func TestErrorsSayWhich(t *testing.T) {
	ctx := context.Background()
	set := s3test.Settings(t)
	bucket := s3test.Bucket(t, set)
	good := objstore.New(set)
	if err := good.WriteFile(ctx, "s3://"+bucket+"/x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		setup func(t *testing.T) objstore.S3Settings
		path  string
		want  []string
	}{
		{"wrong credential", func(t *testing.T) objstore.S3Settings {
			t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
			return set
		}, "s3://" + bucket + "/x", []string{"credentials were refused", "s3://" + bucket + "/x", "AWS_ACCESS_KEY_ID"}},
		{"missing bucket", func(t *testing.T) objstore.S3Settings { return set }, "s3://no-such-bucket-here/x",
			[]string{"no such bucket \"no-such-bucket-here\""}},
		{"unreachable endpoint", func(t *testing.T) objstore.S3Settings {
			s := set
			s.Endpoint = "http://127.0.0.1:1"
			return s
		}, "s3://" + bucket + "/x", []string{"cannot reach http://127.0.0.1:1", "s3.endpoint"}},
		{"no region", func(t *testing.T) objstore.S3Settings {
			t.Setenv("AWS_REGION", "")
			t.Setenv("AWS_DEFAULT_REGION", "")
			s := set
			s.Region = ""
			return s
		}, "s3://" + bucket + "/x", []string{"no region", "s3.region"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := objstore.New(tc.setup(t))
			_, err := st.Open(ctx, tc.path)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "reignpipe-test-secret") || strings.Contains(err.Error(), "not-the-secret") {
				t.Errorf("error shows the secret: %v", err)
			}
		})
	}
}

// Credentials come from the standard chain: a profile in the shared files works as the
// environment does.
func TestSharedCredentialsProfile(t *testing.T) {
	ctx := context.Background()
	set := s3test.Settings(t)
	bucket := s3test.Bucket(t, set)
	key, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	creds := os.Getenv("AWS_SHARED_CREDENTIALS_FILE")
	if err := os.WriteFile(creds, []byte("[lake]\naws_access_key_id = "+key+"\naws_secret_access_key = "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set.Profile = "lake"
	st := objstore.New(set)
	if err := st.WriteFile(ctx, "s3://"+bucket+"/p", []byte("p")); err != nil {
		t.Fatalf("with profile lake: %v", err)
	}
}
