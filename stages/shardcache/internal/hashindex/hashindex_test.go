package hashindex

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

type loc struct {
	shard uint64
	row   int32
}

func create(t testing.TB, bits int) (*Table, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "index.hash")
	tab, err := Create(path, bits)
	if err != nil {
		t.Fatal(err)
	}
	return tab, path
}

func reopen(t *testing.T, path string) *Table {
	t.Helper()
	tab, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// fill inserts shards 1..n of rows random keys each and returns the model of what the table
// should hold.
func fill(t *testing.T, tab *Table, rng *rand.Rand, shards, rows int) map[uint64]loc {
	t.Helper()
	want := map[uint64]loc{}
	for s := 1; s <= shards; s++ {
		keys := make([]uint64, rows)
		for i := range keys {
			keys[i] = rng.Uint64()
			want[keys[i]] = loc{uint64(s), int32(i)}
		}
		if err := tab.Insert(uint64(s), keys); err != nil {
			t.Fatal(err)
		}
		if err := tab.Commit(uint64(s)); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

func check(t *testing.T, tab *Table, want map[uint64]loc, rng *rand.Rand) {
	t.Helper()
	for k, w := range want {
		s, r, ok, err := tab.Lookup(k)
		if err != nil || !ok || s != w.shard || r != w.row {
			t.Fatalf("Lookup(%016x) = %d, %d, %v, %v; want %v", k, s, r, ok, err, w)
		}
	}
	for i := 0; i < 1000; i++ {
		k := rng.Uint64()
		if _, ok := want[k]; ok {
			continue
		}
		if _, _, ok, err := tab.Lookup(k); ok || err != nil {
			t.Fatalf("Lookup of an absent key = %v, %v", ok, err)
		}
	}
	if tab.Len() != int64(len(want)) {
		t.Fatalf("Len = %d, want %d", tab.Len(), len(want))
	}
	n := 0
	if err := tab.Scan(func(e Entry) error {
		w, ok := want[e.Key]
		if !ok || w.shard != uint64(e.Shard) || w.row != int32(e.Row) {
			t.Fatalf("Scan: entry %+v, want %v", e, w)
		}
		n++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Fatalf("Scan saw %d entries, want %d", n, len(want))
	}
}

// Starting from one bucket, 20 shards of 500 keys overflow buckets many times over; every key
// must still be found, before and after a reopen.
func TestInsertLookupAndDoubling(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tab, path := create(t, 0)
	want := fill(t, tab, rng, 20, 500)
	if tab.Bits() < 5 { // 10,000 keys cannot fit in fewer than 40 buckets of 255
		t.Fatalf("Bits = %d after 10,000 keys: the table did not grow", tab.Bits())
	}
	check(t, tab, want, rng)
	if err := tab.Close(); err != nil {
		t.Fatal(err)
	}
	tab = reopen(t, path)
	defer tab.Close()
	check(t, tab, want, rng)
	if tab.Watermark() != 20 || tab.MaxSeq() != 20 {
		t.Fatalf("watermark %d, max seq %d; want 20, 20", tab.Watermark(), tab.MaxSeq())
	}
}

// Keys sharing their top bits all land in one bucket: it must double until they split.
func TestOneBucketOverflows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tab, _ := create(t, 4)
	defer tab.Close()
	keys := make([]uint64, 2*Slots)
	want := map[uint64]loc{}
	for i := range keys {
		keys[i] = 0x7<<60 | rng.Uint64()>>4
		want[keys[i]] = loc{9, int32(i)}
	}
	if err := tab.Insert(9, keys); err != nil {
		t.Fatal(err)
	}
	if tab.Bits() <= 4 {
		t.Fatalf("Bits = %d: a bucket of %d keys did not double", tab.Bits(), len(keys))
	}
	check(t, tab, want, rng)
}

// A key in two shards (a damaged row re-added) resolves to the newer shard whatever the order
// the shards are inserted in, as Open's replay needs.
func TestHigherShardWins(t *testing.T) {
	tab, _ := create(t, 2)
	defer tab.Close()
	for _, seq := range []uint64{5, 3, 7, 6} {
		if err := tab.Insert(seq, []uint64{42}); err != nil {
			t.Fatal(err)
		}
	}
	if s, _, ok, err := tab.Lookup(42); !ok || err != nil || s != 7 {
		t.Fatalf("Lookup = %d, %v, %v; want shard 7", s, ok, err)
	}
	if tab.Len() != 1 {
		t.Fatalf("Len = %d, want 1", tab.Len())
	}
}

func TestDelete(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tab, _ := create(t, 3)
	defer tab.Close()
	want := fill(t, tab, rng, 4, 300)
	var drop []uint64
	for k, w := range want {
		if w.shard == 2 {
			drop = append(drop, k)
		}
	}
	drop = append(drop, 12345) // absent: ignored
	if err := tab.Delete(drop); err != nil {
		t.Fatal(err)
	}
	for _, k := range drop {
		delete(want, k)
	}
	check(t, tab, want, rng)
}

func rewrite(t *testing.T, path string, edit func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, edit(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// firstFullPage is the offset of a bucket page holding entries.
func firstFullPage(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := int64(PageSize); off < int64(len(b)); off += PageSize {
		if b[off+4] != 0 {
			return off
		}
	}
	t.Fatal("no page with entries")
	return 0
}

// What a crash (or damage) can leave is refused by Open as ErrCorrupt, so the caller rebuilds;
// it is never read as entries.
func TestDamageDetected(t *testing.T) {
	for _, tc := range []struct {
		name  string
		clean bool // closed cleanly before the damage
		edit  func(t *testing.T, path string)
	}{
		{"truncated", true, func(t *testing.T, path string) {
			rewrite(t, path, func(b []byte) []byte { return b[:len(b)-PageSize/2] })
		}},
		{"header checksum", true, func(t *testing.T, path string) {
			rewrite(t, path, func(b []byte) []byte { b[21] ^= 1; return b })
		}},
		{"empty file", true, func(t *testing.T, path string) {
			rewrite(t, path, func([]byte) []byte { return nil })
		}},
		{"torn page after a crash", false, func(t *testing.T, path string) {
			off := firstFullPage(t, path)
			rewrite(t, path, func(b []byte) []byte { b[off+pageHead+5] ^= 0x40; return b })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 8))
			tab, path := create(t, 2)
			fill(t, tab, rng, 3, 200)
			if tc.clean {
				if err := tab.Close(); err != nil {
					t.Fatal(err)
				}
			} else if err := tab.Abandon(); err != nil {
				t.Fatal(err)
			}
			tc.edit(t, path)
			if tab, err := Open(path); !errors.Is(err, ErrCorrupt) {
				if err == nil {
					tab.Close()
				}
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
		})
	}
}

// A page damaged while the table was closed cleanly is found by the read that meets it: an
// error, not a location, and the table is left unclean so the next Open checks every page.
func TestDamagedPageOnRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	tab, path := create(t, 2)
	want := fill(t, tab, rng, 2, 100)
	if err := tab.Close(); err != nil {
		t.Fatal(err)
	}
	off := firstFullPage(t, path)
	rewrite(t, path, func(b []byte) []byte { b[off+20] ^= 0x01; return b })
	tab = reopen(t, path)
	bad := 0
	for k := range want {
		_, _, _, err := tab.Lookup(k)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Lookup error %v, want ErrCorrupt", err)
			}
			bad++
		}
	}
	if bad == 0 {
		t.Fatal("no lookup met the damaged page")
	}
	if err := tab.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open after a damaged read = %v, want ErrCorrupt", err)
	}
}

// A crash after inserts but before their Commit leaves the older watermark; the table opens
// (every page checked) and what was committed is there.
func TestCrashKeepsWatermark(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	tab, path := create(t, 2)
	want := fill(t, tab, rng, 3, 100)
	if err := tab.Insert(4, []uint64{rng.Uint64(), rng.Uint64()}); err != nil {
		t.Fatal(err)
	}
	if err := tab.Abandon(); err != nil {
		t.Fatal(err)
	}
	tab = reopen(t, path)
	defer tab.Close()
	if tab.Watermark() != 3 {
		t.Fatalf("watermark %d after a crash before Commit(4), want 3", tab.Watermark())
	}
	for k, w := range want {
		if s, r, ok, err := tab.Lookup(k); err != nil || !ok || s != w.shard || r != w.row {
			t.Fatalf("committed key %016x lost: %d %d %v %v", k, s, r, ok, err)
		}
	}
}

// A doubling interrupted before its rename leaves a temp file that Open removes, and the old
// table intact.
func TestTempFromInterruptedDoubling(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	tab, path := create(t, 1)
	want := fill(t, tab, rng, 1, 100)
	if err := tab.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", []byte("half a table"), 0o644); err != nil {
		t.Fatal(err)
	}
	tab = reopen(t, path)
	defer tab.Close()
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temp file survived Open: %v", err)
	}
	check(t, tab, want, rng)
}

func TestPageRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, n := range []int{0, 1, Slots / 2, Slots} {
		var p, q page
		p.n = n
		for i := range n {
			p.es[i] = Entry{Key: rng.Uint64(), Shard: rng.Uint32(), Row: rng.Uint32()}
		}
		b := make([]byte, PageSize)
		encodePage(b, &p)
		if err := decodePage(b, &q); err != nil {
			t.Fatal(err)
		}
		if q.n != p.n || q.es != p.es {
			t.Fatalf("%d entries: round trip differs", n)
		}
	}
}

// FuzzDecodePage: arbitrary bytes never panic, and whatever decodes re-encodes to a page that
// decodes the same (the checksum is what makes random bytes fail).
func FuzzDecodePage(f *testing.F) {
	var p page
	p.n = 2
	p.es[0], p.es[1] = Entry{1, 2, 3}, Entry{4, 5, 6}
	b := make([]byte, PageSize)
	encodePage(b, &p)
	f.Add(b)
	f.Add(make([]byte, PageSize))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p, q page
		if decodePage(b, &p) != nil {
			return
		}
		out := make([]byte, PageSize)
		encodePage(out, &p)
		if err := decodePage(out, &q); err != nil || q.n != p.n || q.es != p.es {
			t.Fatalf("re-encoded page: %v", err)
		}
	})
}

func FuzzDecodeHeader(f *testing.F) {
	f.Add(encodeHeader(header{Bits: 3, Watermark: 9, MaxSeq: 11, Entries: 100}))
	f.Add(encodeHeader(header{Bits: 40}))
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			return
		}
		if h.Bits > MaxBits {
			t.Fatalf("decoded bits %d past MaxBits", h.Bits)
		}
		if g, err := decodeHeader(encodeHeader(h)); err != nil || g != h {
			t.Fatalf("re-encoded header: %+v, %v", g, err)
		}
	})
}

// BenchmarkLookup is one hit's table cost at a given fill; run with -bench, not a timed test.
func BenchmarkLookup(b *testing.B) {
	rng := rand.New(rand.NewPCG(17, 18))
	tab, _ := create(b, 10)
	defer tab.Close()
	keys := make([]uint64, 100_000)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	if err := tab.Insert(1, keys); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, ok, err := tab.Lookup(keys[i%len(keys)]); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
