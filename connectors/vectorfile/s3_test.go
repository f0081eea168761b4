package vectorfile

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/internal/s3test"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/schemas"
)

// The file sinks write the same parts to a bucket as to a folder, byte for byte, each visible
// only once its commit is done; the reader reads them back from the bucket (the JSONL parts
// checked against their checksum objects), and pyarrow's own S3 client reads the Parquet.
func TestSinksToBucket(t *testing.T) {
	ctx := context.Background()
	set := s3test.Settings(t)
	bucket := s3test.Bucket(t, set)
	st := objstore.New(set)
	local := t.TempDir()
	open := map[string]func(st *objstore.Store, dir string) (connectors.Sink, error){
		"parquet": func(st *objstore.Store, dir string) (connectors.Sink, error) {
			return NewParquet(ParquetOptions{Dir: dir, Store: st, Dim: testDim, BatchRows: 3, Metadata: map[string]string{schemas.MetaGNFingerprint: "fp"}})
		},
		"jsonl": func(st *objstore.Store, dir string) (connectors.Sink, error) {
			return NewJSONL(JSONLOptions{Dir: dir, Store: st})
		},
	}
	vecs := testVectors(8, "7")
	for name, mk := range open {
		t.Run(name, func(t *testing.T) {
			remoteDir := "s3://" + bucket + "/vectors-" + name
			localDir := filepath.Join(local, name)
			for _, dir := range []struct {
				st   *objstore.Store
				path string
			}{{nil, localDir}, {st, remoteDir}} {
				s, err := mk(dir.st, dir.path)
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range vecs {
					if err := s.Write(ctx, v); err != nil {
						t.Fatal(err)
					}
					if i == 3 {
						if dir.st != nil {
							// Written, not committed: nothing is visible in the bucket yet.
							if objs, _ := st.List(ctx, remoteDir); len(objs) != 0 {
								t.Fatalf("parts visible before the commit: %v", objs)
							}
						}
						if err := s.Flush(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := s.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			objs, err := st.List(ctx, remoteDir)
			if err != nil || len(objs) != 2 {
				t.Fatalf("bucket parts %v, %v", objs, err)
			}
			for _, o := range objs {
				got, err := st.ReadFile(ctx, o.Path)
				if err != nil {
					t.Fatal(err)
				}
				want, err := os.ReadFile(filepath.Join(localDir, objstore.Base(o.Path)))
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s differs from the part written on disk (%v)", o.Path, err)
				}
			}
			if name == "jsonl" {
				sum, err := st.ReadFile(ctx, remoteDir+"/.part-00000001.jsonl.sha256")
				want, _ := os.ReadFile(filepath.Join(localDir, ".part-00000001.jsonl.sha256"))
				if err != nil || !bytes.Equal(sum, want) {
					t.Fatalf("checksum object %q, on disk %q (%v)", sum, want, err)
				}
			}
			fromBucket, err := LatestIn(ctx, st, remoteDir)
			if err != nil {
				t.Fatal(err)
			}
			fromDisk, err := Latest(localDir)
			if err != nil || !reflect.DeepEqual(fromBucket, fromDisk) || len(fromBucket) != len(vecs) {
				t.Fatalf("read back %d from the bucket, %d from disk (%v)", len(fromBucket), len(fromDisk), err)
			}
			if ups, err := st.OpenUploads(ctx, remoteDir); err != nil || len(ups) != 0 {
				t.Fatalf("uploads left open: %v %v", ups, err)
			}
		})
	}

	t.Run("pyarrow", func(t *testing.T) {
		py := testenv.Python(t, "pyarrow")
		cmd := exec.Command(py, filepath.Join(testenv.Root(), "ops", "oracles", "read_s3_parquet.py"), set.Endpoint, bucket+"/vectors-parquet")
		cmd.Env = append(os.Environ(), "AWS_REGION="+set.Region)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("pyarrow: %v %s", err, exitStderr(err))
		}
		var got struct {
			Files, DatasetFiles []string
			Rows                int
			DocIDs              []string `json:"doc_ids"`
			VectorType          string   `json:"vector_type"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if got.Rows != len(vecs) || len(got.DocIDs) != len(vecs) || got.DocIDs[0] != vecs[0].DocID {
			t.Fatalf("pyarrow read %d rows: %v", got.Rows, got.DocIDs)
		}
		if got.VectorType != "fixed_size_list<element: float not null>[6]" {
			t.Errorf("vector type %q", got.VectorType)
		}
	})
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// A sink killed mid-upload leaves an open multipart upload, invisible; the next sink of the
// prefix aborts it before it writes, and its parts continue the sequence.
func TestSinkAbortsAKilledUpload(t *testing.T) {
	ctx := context.Background()
	set := s3test.Settings(t)
	bucket := s3test.Bucket(t, set)
	st := objstore.New(set)
	dir := "s3://" + bucket + "/out"
	s, err := NewJSONL(JSONLOptions{Dir: dir, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, testVectors(1, "1")[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// What a kill during the next part's upload leaves: an upload begun, never completed.
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(set.Region))
	if err != nil {
		t.Fatal(err)
	}
	c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint = aws.String(set.Endpoint); o.UsePathStyle = true })
	if _, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String("out/part-00000002.jsonl")}); err != nil {
		t.Fatal(err)
	}
	s2, err := NewJSONL(JSONLOptions{Dir: dir, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Write(ctx, testVectors(2, "2")[1]); err != nil {
		t.Fatal(err)
	}
	if ups, _ := st.OpenUploads(ctx, dir); len(ups) != 0 {
		t.Fatalf("the killed sink's upload is still open: %v", ups)
	}
	if err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	objs, err := st.List(ctx, dir)
	if err != nil || len(objs) != 2 || objstore.Base(objs[1].Path) != "part-00000002.jsonl" {
		t.Fatalf("parts %v %v", objs, err)
	}
}
