package shardcache

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/hashindex"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/indexrec"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/vecfile"
)

func tablePath(o Options) string { return filepath.Join(o.Dir, tableName) }

func keysOf(rows []Row) []uint64 {
	ks := make([]uint64, len(rows))
	for i, r := range rows {
		ks[i] = r.Key
	}
	return ks
}

// writeTable replaces the key table with one holding only the given shards' rows (rows of 16 per
// shard, as testOpts writes them) and watermark, left unclean as a crash leaves it.
func writeTable(t *testing.T, o Options, rows []Row, shards []uint64, watermark uint64) {
	t.Helper()
	tab, err := hashindex.Create(tablePath(o), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range shards {
		lo := int(seq-1) * 16
		if err := tab.Insert(seq, keysOf(rows[lo:min(lo+16, len(rows))])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tab.Commit(watermark); err != nil {
		t.Fatal(err)
	}
	if err := tab.Abandon(); err != nil {
		t.Fatal(err)
	}
}

func dropMarker(t *testing.T, dir string, seq uint64) {
	t.Helper()
	db, err := pebble.Open(filepath.Join(dir, "index"), &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	sk := indexrec.ShardKeyOf(seq)
	if err := db.Delete(sk[:], pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// Every state a crash in the middle of a table insert, a doubling or a rebuild can leave, and
// damage to the table itself, opens to a cache that returns every vector right.
func TestTableCrashStatesRecover(t *testing.T) {
	old := replayBatch
	replayBatch = 20 // replays cross batches: 40 rows in shards of 16
	defer func() { replayBatch = old }()
	for _, tc := range []struct {
		name    string
		edit    func(t *testing.T, o Options, rows []Row)
		rebuilt bool
	}{
		{"table missing", func(t *testing.T, o Options, _ []Row) {
			if err := os.Remove(tablePath(o)); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"truncated", func(t *testing.T, o Options, _ []Row) {
			if err := os.Truncate(tablePath(o), hashindex.PageSize+100); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"header checksum", func(t *testing.T, o Options, _ []Row) {
			flipByte(t, tablePath(o), 22)
		}, true},
		{"torn page after a crash", func(t *testing.T, o Options, rows []Row) {
			writeTable(t, o, rows, []uint64{1, 2, 3}, 3)
			data, err := os.ReadFile(tablePath(o))
			if err != nil {
				t.Fatal(err)
			}
			for off := int64(hashindex.PageSize); off < int64(len(data)); off += hashindex.PageSize {
				if data[off+4] != 0 { // a page with entries: tear its first one
					flipByte(t, tablePath(o), off+16+3)
					return
				}
			}
			t.Fatal("no page with entries")
		}, true},
		{"stale watermark, shard marked", func(t *testing.T, o Options, rows []Row) {
			// Open's re-insert of shards 2 and 3 crashed before its Commit.
			writeTable(t, o, rows, []uint64{1}, 1)
		}, false},
		{"crash before the marker", func(t *testing.T, o Options, rows []Row) {
			// Shard 3's entries written, not committed, its marker never written.
			writeTable(t, o, rows, []uint64{1, 2, 3}, 2)
			dropMarker(t, o.Dir, 3)
		}, false},
		{"crash mid-insert", func(t *testing.T, o Options, rows []Row) {
			// Half of shard 3's entries reached the table, none of its marker.
			writeTable(t, o, rows[:40], []uint64{1, 2}, 2)
			tab, err := hashindex.Open(tablePath(o))
			if err != nil {
				t.Fatal(err)
			}
			if err := tab.Insert(3, keysOf(rows[32:36])); err != nil {
				t.Fatal(err)
			}
			if err := tab.Abandon(); err != nil {
				t.Fatal(err)
			}
			dropMarker(t, o.Dir, 3)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer alloc.AssertSize(t, 0)
			o := testOpts(t, t.TempDir(), alloc)
			rows := testRows(40, testDim, 31)
			writeStore(t, o, rows)
			tc.edit(t, o, rows)
			c := mustOpen(t, o)
			checkGet(t, c, rows)
			st := c.Stats()
			if st.TableRebuilt != tc.rebuilt || st.Rows != 40 || st.Shards != 3 {
				t.Errorf("stats = %+v, want table_rebuilt=%v", st, tc.rebuilt)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			c = mustOpen(t, o) // the repaired table is durable and clean
			defer c.Close()
			if c.Stats().TableRebuilt {
				t.Error("table rebuilt again on the next Open")
			}
			checkGet(t, c, rows)
			rep, err := c.Verify(false)
			if err != nil || !rep.OK() || rep.Entries != 40 {
				t.Fatalf("Verify = %+v, %v", rep, err)
			}
		})
	}
}

// A table entry naming the wrong row, with a valid page checksum, must be caught by the
// companion's key check: an error, never another window's vector.
func TestWrongTableEntryIsNotAVector(t *testing.T) {
	o := testOpts(t, t.TempDir(), memory.NewGoAllocator())
	rows := testRows(40, testDim, 37)
	writeStore(t, o, rows)
	tab, err := hashindex.Open(tablePath(o))
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.InsertEntries([]hashindex.Entry{{Key: rows[5].Key, Shard: 1, Row: 6}}); err != nil {
		t.Fatal(err)
	}
	if err := tab.Close(); err != nil {
		t.Fatal(err)
	}
	c := mustOpen(t, o)
	defer c.Close()
	dst := make([]float32, testDim)
	if ok, err := c.Get(rows[5].Key, dst); ok || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get through a wrong entry = %v, %v; want ErrCorrupt", ok, err)
	}
	checkGet(t, c, slices.Delete(slices.Clone(rows), 5, 6))
}

// A cache written before the key table (per-key Pebble entries, no index.hash) opens, gets its
// table built from the shards, serves every row, and loses its Pebble key entries.
func TestLegacyCacheGetsTable(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	o := testOpts(t, t.TempDir(), alloc)
	rows := testRows(40, testDim, 41)
	writeStore(t, o, rows)
	if err := os.Remove(tablePath(o)); err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(filepath.Join(o.Dir, "index"), &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	for i, r := range rows { // what commitIndex used to write
		k := indexrec.KeyOf(r.Key)
		_ = b.Set(k[:], indexrec.EncodeLocation(nil, indexrec.Location{Shard: uint64(i/16 + 1), Row: int32(i % 16)}), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	c := mustOpen(t, o)
	checkGet(t, c, rows)
	if st := c.Stats(); !st.TableRebuilt || st.Rows != 40 {
		t.Errorf("stats = %+v", st)
	}
	if added, err := c.Add(rows[7]); added || err != nil {
		t.Fatalf("Add of a migrated key = %v, %v; want a no-op", added, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = pebble.Open(filepath.Join(o.Dir, "index"), &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{indexrec.PrefixKey}, UpperBound: []byte{indexrec.PrefixKey + 1}})
	if err != nil {
		t.Fatal(err)
	}
	left := it.First()
	_ = it.Close()
	_ = db.Close()
	if left {
		t.Error("legacy key entries survived the migration")
	}
	c = mustOpen(t, o)
	defer c.Close()
	if c.Stats().TableRebuilt {
		t.Error("table rebuilt again after migration")
	}
	checkGet(t, c, rows)
}

// From a one-bucket table, a few hundred rows overflow buckets: the table doubles under the
// cache and every row stays readable, then and after a reopen.
func TestTableOverflowDoubles(t *testing.T) {
	old := minTableBits
	minTableBits = 0
	defer func() { minTableBits = old }()
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	o := testOpts(t, t.TempDir(), alloc)
	rows := testRows(1200, testDim, 43)
	c := mustOpen(t, o)
	if c.tab.Bits() != 0 {
		t.Fatalf("new table has %d bits, want 0", c.tab.Bits())
	}
	for i, r := range rows {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 { // reads between doublings
			checkGet(t, c, rows[:i+1])
		}
	}
	if c.tab.Bits() < 3 { // 1,200 keys need at least 5 buckets of 255
		t.Fatalf("table has %d bits after %d rows", c.tab.Bits(), len(rows))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, o)
	defer c.Close()
	checkGet(t, c, rows)
}

// After a damaged row is healed by Add, a table rebuilt from the shards must name the new row,
// not the damaged one, though both shards hold the key.
func TestRebuildKeepsHealedRow(t *testing.T) {
	o := testOpts(t, t.TempDir(), memory.NewGoAllocator())
	rows := testRows(40, testDim, 47)
	sd := writeStore(t, o, rows)
	flipByte(t, filepath.Join(sd, shardfile.VecName(1)), vecfile.HeaderSize+3*vecfile.Stride(testDim)+vecfile.RowHeader+5)
	c := mustOpen(t, o)
	dst := make([]float32, testDim)
	if _, err := c.Get(rows[3].Key, dst); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of the damaged row = %v, want ErrCorrupt", err)
	}
	if _, err := c.Add(rows[3]); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(tablePath(o)); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, o)
	defer c.Close()
	if !c.Stats().TableRebuilt {
		t.Fatal("table not rebuilt")
	}
	ok, err := c.Get(rows[3].Key, dst)
	if !ok || err != nil || math.Float32bits(dst[0]) != math.Float32bits(rows[3].Embedding[0]) {
		t.Fatalf("healed row after rebuild: Get = %v, %v", ok, err)
	}
}

// Quarantining the newest shard deletes its marker; its sequence must still not be reused,
// or an entry left by a crash mid-repair could name a row of the new shard.
func TestQuarantinedSeqNotReused(t *testing.T) {
	o, _ := verifyStore(t)
	flipByte(t, filepath.Join(o.Dir, "shards", shardfile.VecName(3)), vecfile.HeaderSize+vecfile.RowHeader+1)
	if rep := verify(t, o, true); !rep.Repaired {
		t.Fatalf("repair: %+v", rep)
	}
	c := mustOpen(t, o)
	if _, err := c.Add(testRows(1, testDim, 99)[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(o.Dir, "shards", shardfile.Name(3))); !os.IsNotExist(err) {
		t.Fatalf("a new shard took the quarantined sequence 3: %v", err)
	}
	if _, err := os.Stat(filepath.Join(o.Dir, "shards", shardfile.Name(4))); err != nil {
		t.Fatalf("new shard: %v", err)
	}
}

// A key-table page damaged at rest (the table closed clean, so Open does not check its pages):
// the damaged keys read as ErrCorrupt, never a wrong vector or a run-stopping error; re-adding
// one works; and the next Open replays every shard, so every key hits again with its own row.
func TestDamagedTablePageHeals(t *testing.T) {
	o := testOpts(t, t.TempDir(), memory.DefaultAllocator)
	rows := testRows(64, testDim, 7)
	c := mustOpen(t, o)
	for _, r := range rows {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(tablePath(o))
	if err != nil {
		t.Fatal(err)
	}
	for p := hashindex.PageSize; p < len(b); p += hashindex.PageSize {
		b[p+16] ^= 0x40 // the first entry's key in every bucket page
	}
	if err := os.WriteFile(tablePath(o), b, 0o644); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, o)
	dst := make([]float32, testDim)
	damaged := 0
	for _, r := range rows {
		ok, err := c.Get(r.Key, dst)
		switch {
		case errors.Is(err, ErrCorrupt):
			damaged++
		case err != nil || !ok:
			t.Fatalf("Get(%x) = %v, %v; want a hit or ErrCorrupt", r.Key, ok, err)
		}
	}
	if damaged == 0 {
		t.Fatal("no lookup met the damaged pages")
	}
	if _, err := c.Add(rows[0]); err != nil {
		t.Fatalf("Add over a damaged page: %v", err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("Flush over a damaged page: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, o)
	defer c.Close()
	checkGet(t, c, rows)
}

// Verify names a damaged key table, and --repair leaves it for the next Open to rebuild, after
// which the cache verifies clean and every key hits with its own row.
func TestVerifyRepairsDamagedTable(t *testing.T) {
	o := testOpts(t, t.TempDir(), memory.DefaultAllocator)
	rows := testRows(48, testDim, 11)
	c := mustOpen(t, o)
	for _, r := range rows {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(tablePath(o))
	if err != nil {
		t.Fatal(err)
	}
	b[hashindex.PageSize+16] ^= 0x40
	if err := os.WriteFile(tablePath(o), b, 0o644); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, o)
	if rep, err := c.Verify(false); err != nil || rep.OK() || rep.TableDamaged == "" {
		t.Fatalf("verify of a damaged table: %+v, %v", rep, err)
	}
	if rep, err := c.Verify(true); err != nil || !rep.Repaired {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, o)
	defer c.Close()
	if rep, err := c.Verify(false); err != nil || !rep.OK() {
		t.Fatalf("after the rebuild: %+v, %v", rep, err)
	}
	checkGet(t, c, rows)
}
