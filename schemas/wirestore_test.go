package schemas

import (
	"math"
	"reflect"
	"testing"
)

func TestWindowKeyOneSpelling(t *testing.T) {
	for _, k := range []uint64{0, 1, 0xabcdef, math.MaxUint64} {
		s := WindowKeyString(k)
		if len(s) != 16 {
			t.Fatalf("%x -> %q", k, s)
		}
		back, err := ParseWindowKey(s)
		if err != nil || back != k {
			t.Fatalf("%q -> %x, %v", s, back, err)
		}
	}
	// Another spelling of one key would be another key to the compactor: refused.
	for _, bad := range []string{"abc", "00000000000000AB", "0x0000000000000ab", "000000000000000g", "+000000000000001"} {
		if _, err := ParseWindowKey(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestWindowValue(t *testing.T) {
	emb := []float32{1, -0.5, float32(math.Inf(1)), 3.25e-7}
	v := AppendWindowValue(nil, emb)
	got := make([]float32, len(emb))
	if err := DecodeWindowValue(v, got); err != nil || !reflect.DeepEqual(got, emb) {
		t.Fatalf("%v, %v", got, err)
	}
	if err := DecodeWindowValue(v[:len(v)-1], got); err == nil {
		t.Fatal("a short value decoded")
	}
}

func TestManifestRoundTrip(t *testing.T) {
	m := StoreManifest{DocID: "uspto:US1", Version: "20070925B2", ContentHash: 42, Fingerprint: "fp", K: 64, S: 48, Dim: 384,
		Title: "T", Source: "uspto", NTokens: 1000, Keys: []uint64{3, 1, 3, math.MaxUint64}}
	b, err := EncodeManifest(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeManifest(b)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("%+v, %v", got, err)
	}
	for i := 0; i < len(b); i++ {
		if _, err := DecodeManifest(b[:i]); err == nil {
			t.Fatalf("truncated to %d bytes: decoded", i)
		}
	}
	if _, err := DecodeManifest(append(b, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
}
