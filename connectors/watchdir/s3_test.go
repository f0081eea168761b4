package watchdir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/jsonl"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/internal/s3test"
)

// A watched prefix picks up objects uploaded while it polls, in name order, each read once: one
// put whole, one uploaded in parts whose object appears, and is read, only once the upload is
// completed. A restart reads nothing again.
func TestWatchBucketPrefix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	set := s3test.Settings(t)
	bucket := s3test.Bucket(t, set)
	st := objstore.New(set)
	prefix := "s3://" + bucket + "/feed/"
	state := filepath.Join(t.TempDir(), "state.json")
	lines := func(from, n int) []byte {
		var b bytes.Buffer
		for i := from; i < from+n; i++ {
			fmt.Fprintf(&b, "{\"id\": \"d%03d\", \"text\": \"document %d\"}\n", i, i)
		}
		return b.Bytes()
	}
	if err := st.WriteFile(ctx, prefix+"a.jsonl", lines(0, 3)); err != nil {
		t.Fatal(err)
	}
	watch := func() *Watcher {
		w, err := Open(Options{Dir: prefix, Store: st, Pattern: "*.jsonl", StateFile: state, Poll: 20 * time.Millisecond, SaveEvery: time.Nanosecond,
			Open: func(ctx context.Context, p string) (connectors.Source, error) {
				return jsonl.OpenIn(ctx, st, jsonl.Options{Path: p, Source: "t"})
			}})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w := watch()
	next := func() string {
		d, ack, err := w.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ack(ctx, nil); err != nil {
			t.Fatal(err)
		}
		return d.ID
	}
	for i := 0; i < 3; i++ {
		if id := next(); id != fmt.Sprintf("t:d%03d", i) {
			t.Fatalf("read %s", id)
		}
	}

	// A multipart upload begun while the watcher polls: nothing of it is read until it completes.
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(set.Region))
	if err != nil {
		t.Fatal(err)
	}
	c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint, o.UsePathStyle = aws.String(set.Endpoint), true
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	})
	key := "feed/b.jsonl"
	upload := func() error {
		up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key})
		if err != nil {
			t.Fatal(err)
		}
		first := append(lines(3, 1), bytes.Repeat([]byte(" "), 5<<20)...) // a part must be 5 MiB but the last
		first = append(first, '\n')
		var parts []types.CompletedPart
		for i, body := range [][]byte{first, lines(4, 2)} {
			out, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: &key, UploadId: up.UploadId,
				PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))})
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(i + 1))})
			if i == 0 {
				// Half uploaded: the watcher, polling, finds nothing to read.
				rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
				d, _, err := w.Read(rctx)
				rcancel()
				if err == nil {
					t.Fatalf("read %s from an upload not yet completed", d.ID)
				}
			}
		}
		_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: up.UploadId,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
		return err
	}
	// s3proxy (the test server, not the code under test) now and then answers a completion with
	// NoSuchKey on a loaded machine, its upload's parts all acknowledged: the uploader here does
	// what a real one would, and uploads again.
	for attempt := 1; ; attempt++ {
		err := upload()
		var ae smithy.APIError
		if err == nil {
			break
		}
		if !errors.As(err, &ae) || ae.ErrorCode() != "NoSuchKey" || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("upload %d: %v; uploading again", attempt, err)
	}
	for i := 3; i < 6; i++ {
		if id := next(); id != fmt.Sprintf("t:d%03d", i) {
			t.Fatalf("read %s, want d%03d", id, i)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A restart reads only what arrives later.
	if err := st.WriteFile(ctx, prefix+"c.jsonl", lines(6, 1)); err != nil {
		t.Fatal(err)
	}
	w = watch()
	defer w.Close(ctx)
	if id := next(); id != "t:d006" {
		t.Fatalf("after the restart read %s, want t:d006", id)
	}
}
