package schemas

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"
)

func sampleChunkDoc() ChunkDoc {
	c := ChunkDoc{
		DocID: "enwiki:12", Source: "enwiki", Version: "rev-7", Title: "Anarchism — ü",
		ContentHash: 0xdeadbeefcafef00d, NTokens: 1021, Fingerprint: "bge:abc", K: 512, S: 256, Dim: 3,
		Keys: []uint64{1, 1 << 63, 42},
	}
	for i := 0; i < 9; i++ {
		c.Embeddings = append(c.Embeddings, float32(i)*0.25-1)
	}
	return c
}

func TestChunkDocRoundTrip(t *testing.T) {
	c := sampleChunkDoc()
	b, err := EncodeChunkDoc(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeChunkDoc(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
	}
	if ch := got.Chunk(2); ch[0] != c.Embeddings[6] || len(ch) != 3 {
		t.Fatalf("Chunk(2) = %v", ch)
	}
	// The documented layout: magic, version, then the first string's length.
	if string(b[:4]) != "RPCE" || b[4] != 1 || binary.LittleEndian.Uint32(b[5:]) != uint32(len(c.DocID)) {
		t.Fatalf("header % x", b[:9])
	}
}

func TestDocVectorRoundTrip(t *testing.T) {
	for _, v := range []DocVector{
		{DocID: "a", Space: "gn-meanpool:x", Vector: []float32{1, 0, -0.5}, NChunks: 2, NTokens: 700, ContentHash: 9},
		{DocID: "uspto:US1", Title: "T", Source: "uspto", Version: "20240102", Space: "reign:c", Vector: []float32{0.5},
			GNSpace: "gn-meanpool:x", GNVector: []float32{float32(math.Inf(1)), 3}},
	} {
		b, err := EncodeDocVector(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeDocVector(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, v)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	good, _ := EncodeChunkDoc(nil, sampleChunkDoc())
	vec, _ := EncodeDocVector(nil, DocVector{DocID: "d", Vector: []float32{1}})
	bumped := append([]byte(nil), good...)
	bumped[4] = 2
	for name, tc := range map[string]struct {
		b    []byte
		dec  func([]byte) error
		want string
	}{
		"empty":          {nil, chunkErr, "truncated"},
		"wrong magic":    {vec, chunkErr, "magic"},
		"newer version":  {bumped, chunkErr, "version 2"},
		"truncated":      {good[:len(good)-1], chunkErr, "do not match"},
		"trailing":       {append(append([]byte(nil), good...), 0), chunkErr, "do not match"},
		"vector cut":     {vec[:len(vec)-5], vectorErr, "truncated"},
		"vector extra":   {append(append([]byte(nil), vec...), 1), vectorErr, "trailing"},
		"huge string":    {append([]byte("RPDV\x01"), 0xff, 0xff, 0xff, 0xff), vectorErr, "over the"},
		"raw not object": {[]byte(`["x"]`), rawErr, "not a JSON object"},
		"raw no id":      {[]byte(`{"text":"x"}`), rawErr, "empty"},
		"raw trailing":   {[]byte(`{"id":"a","text":"x"} {}`), rawErr, "trailing"},
		"raw bad field":  {[]byte(`{"id":"a","text":5}`), rawErr, "raw document"},
	} {
		err := tc.dec(tc.b)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, tc.want)
		}
	}
}

func chunkErr(b []byte) error  { _, err := DecodeChunkDoc(b); return err }
func vectorErr(b []byte) error { _, err := DecodeDocVector(b); return err }
func rawErr(b []byte) error    { _, err := DecodeRawDocument(b); return err }

func TestRawDocumentRoundTrip(t *testing.T) {
	d := Document{ID: "uspto:US1", Source: "uspto", Version: "2024", Title: "T", Text: "claims\n\ndescription é", Meta: map[string]string{"kind": "B2"}}
	b, err := EncodeRawDocument(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRawDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, d) {
		t.Fatalf("got %+v want %+v", got, d)
	}
	// What a user types into kcat: only id and text.
	got, err = DecodeRawDocument([]byte(`{"id":"x:1","text":"hello"}`))
	if err != nil || got.ID != "x:1" || got.Text != "hello" {
		t.Fatalf("minimal: %+v %v", got, err)
	}
	// A broken document still names itself for the dead letter.
	got, err = DecodeRawDocument([]byte(`{"id":"x:2","text":["not","a","string"]}`))
	if err == nil || got.ID != "x:2" {
		t.Fatalf("broken: id %q err %v", got.ID, err)
	}
}

func FuzzDecodeChunkDoc(f *testing.F) {
	good, _ := EncodeChunkDoc(nil, sampleChunkDoc())
	f.Add(good)
	f.Add([]byte("RPCE\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeChunkDoc(b)
		if err != nil {
			return
		}
		again, err := EncodeChunkDoc(nil, c)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("decoded value does not re-encode to its input: %v", err)
		}
	})
}

func FuzzDecodeDocVector(f *testing.F) {
	good, _ := EncodeDocVector(nil, DocVector{DocID: "d", Space: "s", Vector: []float32{1, 2}, GNVector: []float32{3}})
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeDocVector(b)
		if err != nil {
			return
		}
		again, err := EncodeDocVector(nil, v)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("decoded value does not re-encode to its input: %v", err)
		}
	})
}

func FuzzDecodeRawDocument(f *testing.F) {
	f.Add([]byte(`{"id":"a","text":"b","meta":{"k":"v"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeRawDocument(b)
		if err != nil {
			return
		}
		if d.ID == "" {
			t.Fatal("accepted a document without an id")
		}
		again, err := EncodeRawDocument(d)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := DecodeRawDocument(again)
		if err != nil || !reflect.DeepEqual(d, d2) {
			t.Fatalf("re-encoded document differs: %v", err)
		}
	})
}
