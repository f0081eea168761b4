package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitest"
	"github.com/reignpipe/reignpipe/internal/objstore"
	"github.com/reignpipe/reignpipe/internal/s3test"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
)

// A multistream dump in a bucket becomes vectors in a bucket equal, bit for bit, to those of the
// same run on local files; a run killed with SIGKILL
// mid-way and restarted leaves no incomplete part visible and no upload open, re-embeds
// nothing it had cached, and ends with the same vectors, bit for bit; pyarrow's own S3 client
// reads the prefix.
func TestS3DumpToBucket(t *testing.T) {
	model, tok := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	py := testenv.Python(t, "pyarrow")
	set := s3test.Settings(t)
	bucket := s3test.Bucket(t, set)
	st := objstore.New(set)
	ctx := context.Background()
	dir := t.TempDir()

	var pages []string
	for i := range 80 {
		text := fmt.Sprintf("Article %d is about the river %d, which runs past the town of %d. ", i, i*7, i*13)
		pages = append(pages, wikitest.Page(100+i, 0, 5000+i, fmt.Sprintf("Page %d", i), strings.Repeat(text, 3+i%5), false))
	}
	dump, index := wikitest.WriteMultistream(t, dir, "s3wiki", wikitest.Siteinfo("s3wiki"), pages, 4)
	for _, p := range []string{dump, index} {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.WriteFile(ctx, "s3://"+bucket+"/dumps/"+filepath.Base(p), data); err != nil {
			t.Fatal(err)
		}
	}
	remoteDump := "s3://" + bucket + "/dumps/" + filepath.Base(dump)
	pipeline := func(name, source, vectors string) string {
		y := fmt.Sprintf(`version: 1
name: %s
source: {type: wikipedia, path: %q, workers: 3}
gn: {name: bge-small-en-v15, model: %q, tokenizer: %q}
batching: {max_wait: 5ms}
cache: {dir: %q}
sinks: [{type: parquet, dir: %q}]
run: {state_dir: %q, summary: %q, progress: off, commit_every: 4}
s3: {endpoint: %q, path_style: true, region: %s}
`, name, source, model, tok, filepath.Join(dir, name, "cache"), vectors, filepath.Join(dir, name, "state"),
			filepath.Join(dir, name, "summary.json"), set.Endpoint, set.Region)
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	runIn := func(p string) {
		t.Helper()
		cfg, err := pipelines.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := run(ctx, cfg, false)
		if err != nil || sum.DocsWritten != 80 {
			t.Fatalf("run %s: %+v %v", p, sum, err)
		}
	}
	localVectors := filepath.Join(dir, "local-vectors")
	runIn(pipeline("local", dump, localVectors))
	wholeVectors := "s3://" + bucket + "/whole"
	runIn(pipeline("whole", remoteDump, wholeVectors))
	local, err := vectorfile.Latest(localVectors)
	if err != nil || len(local) != 80 {
		t.Fatalf("local vectors: %d %v", len(local), err)
	}
	// Every vector, bit for bit (the parts' rows are in the order documents finished, which
	// parallel streams make differ from run to run, so the files themselves are compared only
	// through what they hold).
	whole, err := vectorfile.LatestIn(ctx, st, wholeVectors)
	if err != nil || !reflect.DeepEqual(whole, local) {
		t.Fatalf("vectors in the bucket: %d, %v; not the local run's %d", len(whole), err, len(local))
	}

	// The same run into another prefix, killed once a part is in the bucket, then restarted.
	bin := filepath.Join(dir, "reignpipe")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	killedVectors := "s3://" + bucket + "/killed"
	p := pipeline("killed", remoteDump, killedVectors)
	cmd := exec.Command(bin, "run", p)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		objs, _ := st.List(ctx, killedVectors)
		if len(objs) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no part in the bucket after 3 minutes: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	atKill, err := vectorfile.LatestIn(ctx, st, killedVectors)
	if err != nil {
		t.Fatalf("a part the killed run left is not whole: %v", err)
	}
	out, err := exec.Command(bin, "run", p).Output()
	if err != nil {
		t.Fatalf("restart: %v %s", err, exitStderr(err))
	}
	var sum struct {
		Resumed   int64 `json:"docs_resumed"`
		Windows   int64 `json:"windows"`
		CacheHits int64 `json:"cache_hits"`
		GNWindows int64 `json:"gn_windows"`
	}
	if err := json.Unmarshal(lastJSON(out), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, out)
	}
	// A document the killed run committed is either skipped (the restart resumes after the
	// longest committed prefix) or read again with its windows, at least one, all cached: none
	// of them goes to the GN again.
	if sum.CacheHits < int64(len(atKill))-sum.Resumed || sum.GNWindows+sum.CacheHits != sum.Windows {
		t.Fatalf("the restart resumed %d inputs and found %d of %d windows cached (%d to the GN) after the killed run committed %d documents",
			sum.Resumed, sum.CacheHits, sum.Windows, sum.GNWindows, len(atKill))
	}
	if ups, err := st.OpenUploads(ctx, killedVectors); err != nil || len(ups) != 0 {
		t.Fatalf("uploads left open after the restart: %v %v", ups, err)
	}
	killed, err := vectorfile.LatestIn(ctx, st, killedVectors)
	if err != nil || !reflect.DeepEqual(killed, local) {
		t.Fatalf("after the kill and restart: %d vectors, %v; not the local run's %d", len(killed), err, len(local))
	}

	c := exec.Command(py, filepath.Join(testenv.Root(), "ops", "oracles", "read_s3_parquet.py"), set.Endpoint, bucket+"/whole")
	c.Env = append(os.Environ(), "AWS_REGION="+set.Region)
	res, err := c.Output()
	if err != nil {
		t.Fatalf("pyarrow: %v %s", err, exitStderr(err))
	}
	var got struct {
		Rows   int      `json:"rows"`
		DocIDs []string `json:"doc_ids"`
	}
	if err := json.Unmarshal(res, &got); err != nil || got.Rows != 80 {
		t.Fatalf("pyarrow read %d rows (%v): %s", got.Rows, err, res)
	}
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// lastJSON is the JSON object a command's output ends with (its summary).
func lastJSON(out []byte) []byte {
	if i := bytes.LastIndex(out, []byte("\n{")); i >= 0 {
		return out[i+1:]
	}
	return out
}
