package hashindex

import (
	"errors"
	"math/rand/v2"
	"os"
	"testing"
)

// A Reader beside a live Table: it sees entries as they are inserted, keeps reading its file
// when a doubling renames a new table over the path, sees the new one after Refresh, reports a
// damaged page as ErrCorrupt (never a wrong location), and never writes: the writer's header
// stays as the writer left it.
func TestReaderBesideTable(t *testing.T) {
	tab, path := create(t, 0)
	defer tab.Close()
	r, err := OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	want := fill(t, tab, rng, 1, 100) // fits one bucket: no doubling yet
	for k, w := range want {
		if s, row, ok, err := r.Lookup(k); err != nil || !ok || s != w.shard || row != w.row {
			t.Fatalf("reader Lookup(%x) = %d %d %v %v, want %v", k, s, row, ok, err, w)
		}
	}
	if changed, err := r.Refresh(); changed || err != nil {
		t.Fatalf("Refresh of an unchanged table = %v, %v", changed, err)
	}
	more := fill(t, tab, rng, 3, 400) // overflows: the table doubles, a new file at path
	if tab.Bits() == 0 {
		t.Fatal("the table did not double")
	}
	if changed, err := r.Refresh(); !changed || err != nil {
		t.Fatalf("Refresh after a doubling = %v, %v", changed, err)
	}
	for k, w := range more {
		if s, row, ok, err := r.Lookup(k); err != nil || !ok || s != w.shard || row != w.row {
			t.Fatalf("after refresh Lookup(%x) = %d %d %v %v, want %v", k, s, row, ok, err, w)
		}
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Damage the page of one key behind the writer's back.
	var key uint64
	for k := range more {
		key = k
		break
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := pageOffset(bucketOf(key, uint32(tab.Bits()))) + pageHead + 3
	if _, err := f.WriteAt([]byte{before[at] ^ 0xff}, at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, _, _, err := r.Lookup(key); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Lookup on a damaged page: %v", err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	after[at] = before[at]
	if string(after) != string(before) {
		t.Fatal("the reader wrote to the table")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Refresh(); err == nil {
		t.Fatal("Refresh after Close succeeded")
	}
	if _, _, _, err := r.Lookup(key); err == nil {
		t.Fatal("Lookup after Close succeeded")
	}
}
