package shardcache

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/indexrec"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
	"github.com/reignpipe/reignpipe/stages/shardcache/internal/vecfile"
)

// writeStore adds rows, closes, and returns the shard directory.
func writeStore(t *testing.T, o Options, rows []Row) string {
	t.Helper()
	c := mustOpen(t, o)
	for _, r := range rows {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(o.Dir, "shards")
}

// dropIndexOf deletes a shard's index entries and marker: the state a crash after the shard's
// files became visible and before its index batch leaves.
func dropIndexOf(t *testing.T, dir string, rows []Row, seq uint64) {
	t.Helper()
	db, err := pebble.Open(filepath.Join(dir, "index"), &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	for _, r := range rows {
		k := indexrec.KeyOf(r.Key)
		_ = b.Delete(k[:], nil)
	}
	sk := indexrec.ShardKeyOf(seq)
	_ = b.Delete(sk[:], nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, at int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[at] ^= 0x10
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCompanionServesHits: every shard gets a companion of the documented size, and hits are
// served from it: they stay right when the Parquet shard under it is corrupted, and no shard is
// decoded.
func TestCompanionServesHits(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	o := testOpts(t, t.TempDir(), alloc)
	rows := testRows(40, testDim, 5) // shards of 16, 16, 8
	sd := writeStore(t, o, rows)
	for seq, n := range map[uint64]int64{1: 16, 2: 16, 3: 8} {
		st, err := os.Stat(filepath.Join(sd, shardfile.VecName(seq)))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != vecfile.Size(n, testDim) {
			t.Errorf("companion %d: %d bytes, want %d", seq, st.Size(), vecfile.Size(n, testDim))
		}
	}
	path := filepath.Join(sd, shardfile.Name(1))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(data) / 3; i < len(data)/3+64; i++ {
		data[i] ^= 0xA5
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c := mustOpen(t, o)
	defer c.Close()
	checkGet(t, c, rows)
	if st := c.Stats(); st.ShardLoads != 0 || st.FileOpens == 0 || st.Rebuilt != 0 {
		t.Errorf("stats = %+v", st)
	}
}

// TestCrashAroundCompanion: a crash after the shard's rename leaves either a complete companion
// or a torn temp, and no index entries; Open must index the shard, leave a good companion and
// serve every row.
func TestCrashAroundCompanion(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, sd string)
	}{
		{"companion visible, index not", func(t *testing.T, sd string) {}},
		{"companion torn", func(t *testing.T, sd string) {
			if err := os.Rename(filepath.Join(sd, shardfile.VecName(2)), filepath.Join(sd, shardfile.VecName(2)+shardfile.TmpSuffix)); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(filepath.Join(sd, shardfile.VecName(2)+shardfile.TmpSuffix), 100); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer alloc.AssertSize(t, 0)
			o := testOpts(t, t.TempDir(), alloc)
			rows := testRows(40, testDim, 9)
			sd := writeStore(t, o, rows)
			dropIndexOf(t, o.Dir, rows[16:32], 2)
			tc.edit(t, sd)
			c := mustOpen(t, o)
			defer c.Close()
			if _, err := os.Stat(filepath.Join(sd, shardfile.VecName(2)+shardfile.TmpSuffix)); !os.IsNotExist(err) {
				t.Errorf("temp companion survived Open: %v", err)
			}
			if st, err := os.Stat(filepath.Join(sd, shardfile.VecName(2))); err != nil || st.Size() != vecfile.Size(16, testDim) {
				t.Errorf("companion 2 after Open: %v, %v", st, err)
			}
			checkGet(t, c, rows)
			if st := c.Stats(); st.Rows != 40 || st.Shards != 3 || st.ShardLoads != 0 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

// TestCorruptCompanionDetected: damage Open cannot see by size must surface as ErrCorrupt on
// the rows it touches, never as a wrong vector; damage it can see is rebuilt.
func TestCorruptCompanionDetected(t *testing.T) {
	stride := vecfile.Stride(testDim)
	tests := []struct {
		name    string
		edit    func(t *testing.T, sd string)
		bad     []int // rows (of 40) whose Get must fail
		rebuilt int64
	}{
		{"embedding bit", func(t *testing.T, sd string) {
			flipByte(t, filepath.Join(sd, shardfile.VecName(1)), vecfile.HeaderSize+3*stride+vecfile.RowHeader+5)
		}, []int{3}, 0},
		{"key bit", func(t *testing.T, sd string) {
			flipByte(t, filepath.Join(sd, shardfile.VecName(2)), vecfile.HeaderSize+4*stride+1)
		}, []int{20}, 0},
		{"row checksum", func(t *testing.T, sd string) {
			flipByte(t, filepath.Join(sd, shardfile.VecName(3)), vecfile.HeaderSize+7*stride+9)
		}, []int{39}, 0},
		{"header", func(t *testing.T, sd string) {
			flipByte(t, filepath.Join(sd, shardfile.VecName(1)), 17)
		}, []int{0, 7, 15}, 0},
		{"another shard's companion", func(t *testing.T, sd string) {
			data, err := os.ReadFile(filepath.Join(sd, shardfile.VecName(1)))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sd, shardfile.VecName(2)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}, []int{16, 31}, 0},
		{"truncated", func(t *testing.T, sd string) {
			if err := os.Truncate(filepath.Join(sd, shardfile.VecName(2)), vecfile.Size(15, testDim)); err != nil {
				t.Fatal(err)
			}
		}, nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer alloc.AssertSize(t, 0)
			o := testOpts(t, t.TempDir(), alloc)
			rows := testRows(40, testDim, 13)
			sd := writeStore(t, o, rows)
			tc.edit(t, sd)
			c := mustOpen(t, o)
			defer c.Close()
			bad := map[int]bool{}
			for _, i := range tc.bad {
				bad[i] = true
				dst := make([]float32, testDim)
				if ok, err := c.Get(rows[i].Key, dst); !errors.Is(err, ErrCorrupt) {
					t.Errorf("Get(row %d) = %v, %v, want ErrCorrupt", i, ok, err)
				}
				hit := make([]bool, 1)
				if _, err := c.GetMany([]uint64{rows[i].Key}, [][]float32{dst}, hit); !errors.Is(err, ErrCorrupt) || hit[0] {
					t.Errorf("GetMany(row %d) = %v, %v, want ErrCorrupt", i, hit[0], err)
				}
			}
			var good []Row
			for i, r := range rows {
				if !bad[i] && !(tc.name == "header" && i < 16) && !(tc.name == "another shard's companion" && i >= 16 && i < 32) {
					good = append(good, r)
				}
			}
			checkGet(t, c, good)
			if st := c.Stats(); st.Rebuilt != tc.rebuilt {
				t.Errorf("stats = %+v, want %d rebuilt", st, tc.rebuilt)
			}
		})
	}
}

// TestMissingCompanionRebuilt covers a cache written before companions existed (or one removed
// by hand): Open rebuilds it from the shard; a companion whose shard is gone is removed.
func TestMissingCompanionRebuilt(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	o := testOpts(t, t.TempDir(), alloc)
	rows := testRows(40, testDim, 17)
	sd := writeStore(t, o, rows)
	for _, seq := range []uint64{1, 3} {
		if err := os.Remove(filepath.Join(sd, shardfile.VecName(seq))); err != nil {
			t.Fatal(err)
		}
	}
	orphan := filepath.Join(sd, shardfile.VecName(9))
	if err := os.WriteFile(orphan, vecfile.EncodeHeader(9, testDim, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	c := mustOpen(t, o)
	defer c.Close()
	if st := c.Stats(); st.Rebuilt != 2 || st.Broken != 0 {
		t.Errorf("stats = %+v", st)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("orphan companion survived Open: %v", err)
	}
	checkGet(t, c, rows)
	if st := c.Stats(); st.ShardLoads != 0 {
		t.Errorf("hits decoded shards: %+v", st)
	}
}

// TestGetMany: buffered, flushed and unknown keys in one call agree with Get, on both read
// paths, with fewer companion files open than shards.
func TestGetMany(t *testing.T) {
	for _, parquetPath := range []bool{false, true} {
		alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
		o := testOpts(t, t.TempDir(), alloc)
		o.ReadParquet, o.OpenFiles = parquetPath, 1
		rows := testRows(60, testDim, 23)
		c := mustOpen(t, o)
		for _, r := range rows {
			if _, err := c.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		more := testRows(5, testDim, 1<<40) // buffered, not flushed
		for _, r := range more {
			if _, err := c.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		all := append(append([]Row(nil), rows...), more...)
		// Reverse order across shards, with an unknown key in the middle.
		var keys []uint64
		var want [][]float32
		for i := len(all) - 1; i >= 0; i -= 3 {
			keys, want = append(keys, all[i].Key), append(want, all[i].Embedding)
			if len(keys) == 8 {
				keys, want = append(keys, 424242), append(want, nil)
			}
		}
		dst := make([][]float32, len(keys))
		for i := range dst {
			dst[i] = make([]float32, testDim)
		}
		hit := make([]bool, len(keys))
		n, err := c.GetMany(keys, dst, hit)
		if err != nil || n != len(keys)-1 {
			t.Fatalf("ReadParquet=%v: GetMany = %d, %v, want %d", parquetPath, n, err, len(keys)-1)
		}
		for i := range keys {
			if hit[i] != (want[i] != nil) {
				t.Fatalf("hit[%d] = %v", i, hit[i])
			}
			for j := range want[i] {
				if math.Float32bits(dst[i][j]) != math.Float32bits(want[i][j]) {
					t.Fatalf("ReadParquet=%v: key %d dim %d: %v, want %v", parquetPath, i, j, dst[i][j], want[i][j])
				}
			}
		}
		if _, err := c.GetMany(keys, dst[:1], hit); err == nil {
			t.Error("GetMany accepted too few dst")
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		alloc.AssertSize(t, 0)
	}
}

// TestConcurrentReadsFewFiles: readers on many shards through a one-file LRU, so evictions
// happen while other readers hold the file (run with -race).
func TestConcurrentReadsFewFiles(t *testing.T) {
	o := testOpts(t, t.TempDir(), nil)
	o.OpenFiles = 1
	rows := testRows(160, testDim, 29)
	writeStore(t, o, rows)
	c := mustOpen(t, o)
	defer c.Close()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			dst := make([]float32, testDim)
			for n := 0; n < 400; n++ {
				r := rows[(n*37+g*11)%len(rows)]
				if ok, err := c.Get(r.Key, dst); err != nil || !ok {
					errc <- errors.Join(err, errors.New("miss"))
					return
				}
				if math.Float32bits(dst[1]) != math.Float32bits(r.Embedding[1]) {
					errc <- errors.New("wrong vector")
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// A damaged row heals: once a read has met it, Add of the same key (the window re-embedded)
// replaces the row instead of keeping the broken one, and the new row survives a reopen. Rows of
// a shard that cannot be read at all heal the same way.
func TestDamagedRowHealsOnAdd(t *testing.T) {
	stride := vecfile.Stride(testDim)
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, sd string)
		row  int
	}{
		{"flipped embedding bit", func(t *testing.T, sd string) {
			flipByte(t, filepath.Join(sd, shardfile.VecName(1)), vecfile.HeaderSize+3*stride+vecfile.RowHeader+5)
		}, 3},
		{"unreadable shard", func(t *testing.T, sd string) {
			if err := os.Remove(filepath.Join(sd, shardfile.VecName(2))); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sd, shardfile.Name(2)), []byte("not parquet"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOpts(t, t.TempDir(), memory.NewGoAllocator())
			rows := testRows(40, testDim, 13)
			sd := writeStore(t, o, rows)
			tc.edit(t, sd)
			c := mustOpen(t, o)
			dst := make([]float32, testDim)
			key := rows[tc.row].Key
			if _, err := c.Get(key, dst); !errors.Is(err, ErrCorrupt) {
				c.Close()
				t.Fatalf("Get of the damaged row = %v, want ErrCorrupt", err)
			}
			fresh := Row{Key: key, DocID: "re-embedded", Embedding: rows[tc.row].Embedding}
			if _, err := c.Add(fresh); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			if ok, err := c.Get(key, dst); !ok || err != nil || !slices.Equal(dst, rows[tc.row].Embedding) {
				t.Fatalf("after the re-embedded Add: Get = %v, %v", ok, err)
			}
			if st := c.Stats(); st.Corrupt == 0 {
				t.Errorf("stats = %+v, want the corrupt read counted", st)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			c = mustOpen(t, o)
			defer c.Close()
			if ok, err := c.Get(key, dst); !ok || err != nil || !slices.Equal(dst, rows[tc.row].Embedding) {
				t.Fatalf("after reopen: Get = %v, %v", ok, err)
			}
			// A key whose row was never found damaged is still not written twice.
			before := c.Stats().Rows
			if _, err := c.Add(rows[0]); err != nil {
				t.Fatal(err)
			}
			if c.Stats().Rows != before {
				t.Fatal("Add of a healthy cached key added a row")
			}
		})
	}
}
