package indexrec

import "testing"

func TestTombstoneEncoding(t *testing.T) {
	tests := []Tombstone{
		{DocID: "a", Version: "", When: 0},
		{DocID: "enwiki:12", Version: "2026-12-01T00:00:00Z", When: 1<<63 - 1},
	}
	for _, ts := range tests {
		got, err := DecodeTombstone(ts.DocID, EncodeTombstone(ts))
		if err != nil || got != ts {
			t.Errorf("round trip %+v = %+v, %v", ts, got, err)
		}
	}
	good := EncodeTombstone(tests[1])
	bad := [][]byte{nil, {}, {2, 0, 0}, good[:len(good)-1], append(append([]byte{}, good...), 0),
		{1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} // When past int64
	for _, b := range bad {
		if _, err := DecodeTombstone("x", b); err == nil {
			t.Errorf("DecodeTombstone(%x) accepted", b)
		}
	}
}

func FuzzDecodeTombstone(f *testing.F) {
	f.Add(EncodeTombstone(Tombstone{Version: "17", When: 1764633600e9}))
	f.Add([]byte{1, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := DecodeTombstone("d", b)
		if err != nil {
			return
		}
		if ts.When < 0 {
			t.Fatalf("negative time from %x", b)
		}
		if got, err := DecodeTombstone("d", EncodeTombstone(ts)); err != nil || got != ts {
			t.Fatalf("re-encode of %+v: %+v, %v", ts, got, err)
		}
	})
}
