package wikipedia

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitest"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/internal/s3test"
)

// A multistream dump and its index in a bucket read as the same dump on disk: the same pages
// in the same order, with one worker and with several reading streams by ranged GETs.
func TestMultistreamFromBucket(t *testing.T) {
	ctx := context.Background()
	set := s3test.Settings(t)
	bucket := s3test.Bucket(t, set)
	st := objstore.New(set)
	dir := t.TempDir()
	dump, index := wikitest.WriteMultistream(t, dir, "s3wiki", siteinfo, articlePages(40), 4)
	for _, p := range []string{dump, index} {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.WriteFile(ctx, "s3://"+bucket+"/dumps/"+filepath.Base(p), data); err != nil {
			t.Fatal(err)
		}
	}
	local, _, err := readAll(t, Options{Path: dump, Workers: 1})
	if err != nil || len(local.docs) != 40 {
		t.Fatalf("local read: %d docs, %v", len(local.docs), err)
	}
	for _, workers := range []int{1, 3} {
		r, err := OpenIn(ctx, Options{Path: "s3://" + bucket + "/dumps/" + filepath.Base(dump), Workers: workers, Store: st})
		if err != nil {
			t.Fatal(err)
		}
		if !r.multistream {
			t.Fatal("the index beside the dump in the bucket was not found")
		}
		var got result
		for {
			d, ack, err := r.Read(ctx)
			if err != nil {
				break
			}
			got.docs = append(got.docs, d)
			_ = ack(ctx, nil)
		}
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.docs, local.docs) {
			t.Fatalf("workers %d: %d docs from the bucket differ from the %d read on disk", workers, len(got.docs), len(local.docs))
		}
	}
}
