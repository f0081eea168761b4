package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// TestShortCampaign is the campaign's short form for every test run: a clean run, then one
// random-kill trial, a kill in a shard write, a kill in a checkpoint write, a soft stop, a
// damaged companion row (healed by the run and verify --repair) and (as root) a full disk
// under the cache, each followed by a run to the end that must lose nothing,
// change nothing and account for every input. `go run ./ops/faults` is the full campaign.
func TestShortCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real pipeline about a dozen times")
	}
	testenv.GN(t, "all-minilm-l6-v2")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	work := t.TempDir()
	bin := filepath.Join(work, "reignpipe")
	build := exec.Command("go", "build", "-o", bin, "./cmd/reignpipe")
	build.Dir = testenv.Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	c := &Campaign{Bin: bin, Work: work, Input: filepath.Join(work, "corpus.jsonl"), Model: "all-minilm-l6-v2", K: 128,
		Timeout: 4 * time.Minute, Logf: t.Logf}
	if err := Corpus(c.Input, 24, 7); err != nil {
		t.Fatal(err)
	}
	if err := c.Reference(); err != nil {
		t.Fatal(err)
	}
	targeted := c.TargetedFaults()
	faults := append(c.RandomFaults(1, 7), targeted[0], targeted[3], targeted[4], c.CorruptFaults()[0])
	if err := CanFillDisks(); err != nil {
		t.Logf("disk-full trial left out: %v", err)
	} else {
		faults = append(faults, c.DiskFullFaults()[0])
	}
	var rs []Result
	for i, f := range faults {
		r := c.Trial(i, f)
		rs = append(rs, r)
		if !r.OK() {
			t.Errorf("%s: %+v", f.Name, r)
		}
		if (f.OnTemp != "" || f.DiskFull != "" || f.Corrupt != "") && r.Kills != 1 {
			t.Errorf("%s: the fault did not land, so the trial tested nothing", f.Name)
		}
	}
	// Distributed mode under make test (ops/with-kafka exports the broker): one trial.
	if b, err := BrokerFromEnv(); err != nil {
		t.Logf("distributed trial left out: %v", err)
	} else {
		f := c.RandomDistFaults(1, 7)[0]
		r := c.DistTrial(len(faults), f, b)
		rs = append(rs, r)
		if !r.OK() || r.Kills != len(f.Kills) {
			t.Errorf("%s (victims %v): %+v", f.Name, f.Victims, r)
		}
	}
	t.Log("\n" + Table(rs))
	_ = os.RemoveAll(work)
}

// A stage's summary is found on its standard output after its logs, whatever objects it nests.
func TestStageSummary(t *testing.T) {
	out := "time=... level=INFO msg=x\n{\n  \"stopped\": \"stopped\",\n  \"inputs_read\": 3,\n  \"docs_written\": 2,\n  \"docs_skipped\": {\n    \"empty\": 1\n  },\n  \"docs_failed\": 1\n}\n"
	s, err := stageSummary(out)
	if err != nil || s.Stopped != "stopped" || s.InputsRead != 3 || s.DocsWritten != 2 || s.DocsFailed != 1 {
		t.Fatalf("%+v %v", s, err)
	}
	if _, err := stageSummary("logs only\n"); err == nil {
		t.Error("no summary: want an error")
	}
}
