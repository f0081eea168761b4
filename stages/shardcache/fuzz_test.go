package shardcache

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestLocationRoundTrip(t *testing.T) {
	tests := []location{{0, 0}, {1, 8191}, {1 << 40, 1<<31 - 1}}
	for _, l := range tests {
		got, err := decodeLocation(encodeLocation(nil, l))
		if err != nil || got != l {
			t.Errorf("round trip %v = %v, %v", l, got, err)
		}
	}
	bad := [][]byte{nil, {}, {2, 1, 1}, {1}, {1, 0x80}, {1, 1, 1, 0}, {1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}}
	for _, b := range bad {
		if _, err := decodeLocation(b); err == nil {
			t.Errorf("decodeLocation(%x) accepted", b)
		}
	}
}

func FuzzDecodeLocation(f *testing.F) {
	f.Add(encodeLocation(nil, location{Shard: 3, Row: 17}))
	f.Add([]byte{1, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := decodeLocation(b)
		if err != nil {
			return
		}
		if l.Row < 0 {
			t.Fatalf("negative row from %x", b)
		}
		if got, err := decodeLocation(encodeLocation(nil, l)); err != nil || got != l {
			t.Fatalf("re-encode of %v: %v, %v", l, got, err)
		}
	})
}

func FuzzDecodeMarker(f *testing.F) {
	f.Add(encodeMarker(marker{Rows: 8192, Bytes: 1 << 30}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := decodeMarker(b); err == nil && (m.Rows < 0 || m.Bytes < 0) {
			t.Fatalf("negative counts from %x", b)
		}
	})
}

func FuzzDecodeSpace(f *testing.F) {
	f.Add(encodeSpace(space{Fingerprint: "gn@1", Dim: 384, K: 510, S: 256}))
	f.Fuzz(func(t *testing.T, b []byte) {
		sp, err := decodeSpace(b)
		if err == nil && !reflect.DeepEqual(mustDecodeSpace(t, encodeSpace(sp)), sp) {
			t.Fatalf("space round trip of %x", b)
		}
	})
}

func mustDecodeSpace(t *testing.T, b []byte) space {
	sp, err := decodeSpace(b)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func TestManifestEncoding(t *testing.T) {
	tests := []Manifest{
		{DocID: "a", Keys: []uint64{}},
		{DocID: "enwiki:12", Version: "99", ContentHash: 1<<64 - 1, Fingerprint: "fp", K: 510, S: 256, Keys: []uint64{1, 2, 1<<64 - 1}},
	}
	for _, m := range tests {
		got, err := decodeManifest(encodeManifest(m))
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("round trip %+v = %+v, %v", m, got, err)
		}
	}
	good := encodeManifest(tests[1])
	for _, b := range [][]byte{nil, good[:len(good)-1], append(append([]byte{}, good...), 0), {1, 0xff, 0xff, 0xff, 0xff, 0x0f}} {
		if _, err := decodeManifest(b); err == nil {
			t.Errorf("decodeManifest(%x) accepted", b)
		}
	}
}

func FuzzDecodeManifest(f *testing.F) {
	f.Add(encodeManifest(Manifest{DocID: "d", Version: "1", Fingerprint: "fp", K: 5, S: 2, Keys: []uint64{7, 8}}))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b)
		if err != nil {
			return
		}
		if got, err := decodeManifest(encodeManifest(m)); err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("re-encode of %+v: %+v, %v", m, got, err)
		}
	})
}

// FuzzReadShard feeds mutated shard files to the reader: it must return an error or rows, never
// panic or leak Arrow memory.
func FuzzReadShard(f *testing.F) {
	dir := f.TempDir()
	o := testOpts(f, dir, nil)
	c := mustOpen(f, o)
	for _, r := range testRows(5, testDim, 1) {
		if _, err := c.Add(r); err != nil {
			f.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, "shards", shardName(1)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, 0, byte(0))
	f.Add(good, len(good)-9, byte(0x40))
	f.Add(good[:len(good)/2], 3, byte(1))
	f.Add([]byte("PAR1PAR1"), 0, byte(0))
	sp := space{Fingerprint: o.Fingerprint, Dim: o.Dim, K: o.K, S: o.S}
	f.Fuzz(func(t *testing.T, data []byte, at int, flip byte) {
		data = append([]byte(nil), data...)
		if len(data) > 0 {
			if at < 0 {
				at = -at
			}
			data[at%len(data)] ^= flip
		}
		path := filepath.Join(t.TempDir(), shardName(1))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
		d, err := readShard(path, sp, alloc)
		if err == nil && (len(d.emb) != len(d.keys)*testDim) {
			t.Fatalf("inconsistent shard decoded: %d keys, %d floats", len(d.keys), len(d.emb))
		}
		if err == nil {
			alloc.AssertSize(t, 0)
		}
	})
}
