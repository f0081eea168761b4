package indexrec

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/reignpipe/reignpipe/stages/shardcache/internal/shardfile"
)

func TestLocationRoundTrip(t *testing.T) {
	tests := []Location{{0, 0}, {1, 8191}, {1 << 40, 1<<31 - 1}}
	for _, l := range tests {
		got, err := DecodeLocation(EncodeLocation(nil, l))
		if err != nil || got != l {
			t.Errorf("round trip %v = %v, %v", l, got, err)
		}
	}
	bad := [][]byte{nil, {}, {2, 1, 1}, {1}, {1, 0x80}, {1, 1, 1, 0}, {1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}}
	for _, b := range bad {
		if _, err := DecodeLocation(b); err == nil {
			t.Errorf("decodeLocation(%x) accepted", b)
		}
	}
}

func FuzzDecodeLocation(f *testing.F) {
	f.Add(EncodeLocation(nil, Location{Shard: 3, Row: 17}))
	f.Add([]byte{1, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeLocation(b)
		if err != nil {
			return
		}
		if l.Row < 0 {
			t.Fatalf("negative row from %x", b)
		}
		if got, err := DecodeLocation(EncodeLocation(nil, l)); err != nil || got != l {
			t.Fatalf("re-encode of %v: %v, %v", l, got, err)
		}
	})
}

func FuzzDecodeMarker(f *testing.F) {
	f.Add(EncodeMarker(Marker{Rows: 8192, Bytes: 1 << 30}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := DecodeMarker(b); err == nil && (m.Rows < 0 || m.Bytes < 0) {
			t.Fatalf("negative counts from %x", b)
		}
	})
}

func FuzzDecodeSpace(f *testing.F) {
	f.Add(EncodeSpace(shardfile.Space{Fingerprint: "gn@1", Dim: 384, K: 510, S: 256}))
	f.Fuzz(func(t *testing.T, b []byte) {
		sp, err := DecodeSpace(b)
		if err == nil && !reflect.DeepEqual(mustDecodeSpace(t, EncodeSpace(sp)), sp) {
			t.Fatalf("space round trip of %x", b)
		}
	})
}

func mustDecodeSpace(t *testing.T, b []byte) shardfile.Space {
	sp, err := DecodeSpace(b)
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
		got, err := DecodeManifest(EncodeManifest(m))
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("round trip %+v = %+v, %v", m, got, err)
		}
	}
	good := EncodeManifest(tests[1])
	for _, b := range [][]byte{nil, good[:len(good)-1], append(append([]byte{}, good...), 0), {1, 0xff, 0xff, 0xff, 0xff, 0x0f}} {
		if _, err := DecodeManifest(b); err == nil {
			t.Errorf("decodeManifest(%x) accepted", b)
		}
	}
}

func FuzzDecodeManifest(f *testing.F) {
	f.Add(EncodeManifest(Manifest{DocID: "d", Version: "1", Fingerprint: "fp", K: 5, S: 2, Keys: []uint64{7, 8}}))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			return
		}
		if got, err := DecodeManifest(EncodeManifest(m)); err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("re-encode of %+v: %+v, %v", m, got, err)
		}
	})
}

// Manifests written before Title/Source/NTokens existed still decode.
func TestManifestVersion1Decodes(t *testing.T) {
	m := Manifest{DocID: "enwiki:1", Version: "9", Fingerprint: "fp", ContentHash: 42, K: 512, S: 512, Keys: []uint64{7, 8}}
	b := []byte{valueVersion}
	b = appendString(b, m.DocID)
	b = appendString(b, m.Version)
	b = appendString(b, m.Fingerprint)
	b = binary.LittleEndian.AppendUint64(b, m.ContentHash)
	b = binary.AppendUvarint(b, 512)
	b = binary.AppendUvarint(b, 512)
	b = binary.AppendUvarint(b, 2)
	b = binary.LittleEndian.AppendUint64(b, 7)
	b = binary.LittleEndian.AppendUint64(b, 8)
	got, err := DecodeManifest(b)
	if err != nil || got.DocID != m.DocID || got.ContentHash != 42 || len(got.Keys) != 2 || got.Keys[1] != 8 || got.Title != "" {
		t.Fatalf("got %+v, %v", got, err)
	}
	m.Title, m.Source, m.NTokens = "T", "enwiki", 99
	if rt, err := DecodeManifest(EncodeManifest(m)); err != nil || rt.Title != "T" || rt.NTokens != 99 || rt.K != 512 {
		t.Fatalf("round trip %+v, %v", rt, err)
	}
}
