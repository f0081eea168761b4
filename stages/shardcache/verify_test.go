package shardcache

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/vecfile"
)

// verifyStore writes 40 rows (shards 1..3 of 16, 16, 8) and a manifest over all of them.
func verifyStore(t *testing.T) (Options, []Row) {
	t.Helper()
	o := testOpts(t, t.TempDir(), memory.NewGoAllocator())
	rows := testRows(40, testDim, 29)
	c := mustOpen(t, o)
	keys := make([]uint64, len(rows))
	for i, r := range rows {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
		keys[i] = r.Key
	}
	if err := c.PutManifest(Manifest{DocID: "t:doc", Version: "1", Keys: keys}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return o, rows
}

func verify(t *testing.T, o Options, repair bool) VerifyReport {
	t.Helper()
	c := mustOpen(t, o)
	defer c.Close()
	rep, err := c.Verify(repair)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestVerifyCleanStore(t *testing.T) {
	o, _ := verifyStore(t)
	rep := verify(t, o, false)
	if !rep.OK() || rep.Shards != 3 || rep.Rows != 40 || rep.Entries != 40 || rep.Manifests != 1 {
		t.Fatalf("clean store: %+v", rep)
	}
}

// A damaged shard is reported; --repair quarantines it and drops its entries, after which the
// store verifies clean except for the manifest keys that now need the GN, and those windows are
// plain misses (embedded again on demand), not errors.
func TestVerifyRepairsDamagedShard(t *testing.T) {
	o, rows := verifyStore(t)
	sd := filepath.Join(o.Dir, "shards")
	flipByte(t, filepath.Join(sd, shardfile.VecName(2)), vecfile.HeaderSize+5*vecfile.Stride(testDim)+vecfile.RowHeader+2)
	rep := verify(t, o, false)
	if rep.OK() || len(rep.Damaged) != 1 || rep.Damaged[0].Shard != 2 || rep.Damaged[0].Rows != 16 || rep.Repaired {
		t.Fatalf("damaged store: %+v", rep)
	}
	rep = verify(t, o, true)
	if !rep.Repaired || rep.EntriesDrop != 16 || len(rep.Quarantined) != 2 {
		t.Fatalf("repair: %+v", rep)
	}
	for _, q := range rep.Quarantined {
		if _, err := os.Stat(q); err != nil {
			t.Errorf("quarantined file %s: %v", q, err)
		}
	}
	after := verify(t, o, false)
	if len(after.Damaged) != 0 || after.Stale != 0 || after.MissingKeys != 16 || after.MissingDocs[0] != "t:doc" {
		t.Fatalf("after repair: %+v", after)
	}
	c := mustOpen(t, o)
	defer c.Close()
	dst := make([]float32, testDim)
	if ok, err := c.Get(rows[20].Key, dst); ok || err != nil {
		t.Fatalf("a quarantined window: Get = %v, %v; want a miss", ok, err)
	}
	checkGet(t, c, append(append([]Row{}, rows[:16]...), rows[32:]...))
}

// A shard deleted by hand leaves index entries naming it: reported stale, dropped by repair.
func TestVerifyDropsStaleEntries(t *testing.T) {
	o, _ := verifyStore(t)
	sd := filepath.Join(o.Dir, "shards")
	for _, n := range []string{shardfile.Name(3), shardfile.VecName(3)} {
		if err := os.Remove(filepath.Join(sd, n)); err != nil {
			t.Fatal(err)
		}
	}
	rep := verify(t, o, false)
	if rep.Stale != 8 || rep.OK() {
		t.Fatalf("deleted shard: %+v", rep)
	}
	if rep = verify(t, o, true); rep.EntriesDrop != 8 {
		t.Fatalf("repair: %+v", rep)
	}
	if after := verify(t, o, false); after.Stale != 0 || after.MissingKeys != 8 {
		t.Fatalf("after repair: %+v", after)
	}
}
