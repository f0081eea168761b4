// Package s3test gives tests the real S3 API server that ops/s3proxy runs (`make test` starts
// it through ops/with-s3proxy and sets REIGNPIPE_S3_ENDPOINT). Without a server a test skips,
// or fails under REIGNPIPE_STRICT=1, so nothing S3-related passes by not running.
//
// Every test package shares the one server; Bucket gives each test a bucket of its own, emptied
// and removed when the test ends.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/internal/testenv"
)

// Settings are the s3 settings that reach the test server. The key pair is put in the
// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) for the test's lifetime: the client
// takes it from the standard chain, as it would from a user's shell. Tests using it must not
// be parallel (t.Setenv refuses).
func Settings(t testing.TB) objstore.S3Settings {
	t.Helper()
	ep := os.Getenv("REIGNPIPE_S3_ENDPOINT")
	if ep == "" {
		testenv.Missing(t, "REIGNPIPE_S3_ENDPOINT not set: object-storage tests against a real S3 API server run under make test, which starts s3proxy (ops/with-s3proxy; by hand: ops/with-s3proxy go test ./...)")
	}
	t.Setenv("AWS_ACCESS_KEY_ID", os.Getenv("REIGNPIPE_S3_ACCESS_KEY_ID"))
	t.Setenv("AWS_SECRET_ACCESS_KEY", os.Getenv("REIGNPIPE_S3_SECRET_ACCESS_KEY"))
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	// No shared files of the machine's user leak into the test.
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", dir+"/config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", dir+"/credentials")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return objstore.S3Settings{Region: "us-east-1", Endpoint: ep, PathStyle: true}
}

// Bucket creates a bucket no other test uses and returns its name; it is emptied and removed
// when the test ends.
func Bucket(t testing.TB, set objstore.S3Settings) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "t-" + strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name())), "-")
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(name, "-") + "-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := objstore.CreateBucket(ctx, set, name); err != nil {
		t.Fatalf("s3test: creating bucket %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := objstore.RemoveBucket(ctx, set, name); err != nil {
			t.Errorf("s3test: removing bucket %s: %v", name, err)
		}
	})
	return name
}
