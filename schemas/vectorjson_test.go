package schemas

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// jsonVector is what a JSON reader makes of a vector record; pointers tell absent from empty.
type jsonVector struct {
	DocID       string     `json:"doc_id"`
	Title       string     `json:"title"`
	Source      string     `json:"source"`
	Version     string     `json:"version"`
	ContentHash string     `json:"content_hash"`
	NChunks     int        `json:"n_chunks"`
	NTokens     int        `json:"n_tokens"`
	Space       string     `json:"space"`
	Vector      []float32  `json:"vector"`
	GNSpace     *string    `json:"gn_space"`
	GNVector    *[]float32 `json:"gn_vector"`
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d components, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v (%#x), want %v (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

func TestDocVectorJSON(t *testing.T) {
	meanPool := DocVector{DocID: "t:1", Title: `A "quoted" <title>`, Source: "t", Version: "7", ContentHash: 0x00ab_cdef_0123_4567,
		NChunks: 2, NTokens: 130, Space: "gn-meanpool:fp", Vector: []float32{0.1, -2.5e-5, 1, float32(math.Copysign(0, -1))}}
	reign := meanPool
	reign.Space, reign.GNSpace, reign.GNVector = "reign:ck", "gn-meanpool:fp", []float32{0.6, 0.8}
	for _, tc := range []struct {
		name string
		v    DocVector
		want string
	}{
		{"mean-pool, no companion", meanPool, `{"doc_id":"t:1","title":"A \"quoted\" \u003ctitle\u003e","source":"t","version":"7",` +
			`"content_hash":"00abcdef01234567","n_chunks":2,"n_tokens":130,"space":"gn-meanpool:fp","vector":[0.1,-2.5e-05,1,-0.0]}`},
		{"reign with its GN companion", reign, `{"doc_id":"t:1","title":"A \"quoted\" \u003ctitle\u003e","source":"t","version":"7",` +
			`"content_hash":"00abcdef01234567","n_chunks":2,"n_tokens":130,"space":"reign:ck","vector":[0.1,-2.5e-05,1,-0.0],` +
			`"gn_space":"gn-meanpool:fp","gn_vector":[0.6,0.8]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := EncodeDocVectorJSON(nil, tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("got  %s\nwant %s", b, tc.want)
			}
			var got jsonVector
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			checkJSONVector(t, got, tc.v, false)
		})
	}
}

// checkJSONVector compares a decoded JSON vector with what was encoded, field by field.
func checkJSONVector(t *testing.T, got jsonVector, v DocVector, nullGN bool) {
	t.Helper()
	if got.DocID != v.DocID || got.Title != v.Title || got.Source != v.Source || got.Version != v.Version ||
		got.ContentHash != padHex(v.ContentHash) ||
		got.NChunks != v.NChunks || got.NTokens != v.NTokens || got.Space != v.Space {
		t.Fatalf("decoded %+v from %+v", got, v)
	}
	sameBits(t, "vector", got.Vector, v.Vector)
	if len(v.GNVector) == 0 {
		if !nullGN && (got.GNSpace != nil || got.GNVector != nil) {
			t.Fatalf("gn fields present without a companion: %v %v", got.GNSpace, got.GNVector)
		}
		if nullGN && (got.GNSpace != nil || got.GNVector != nil) {
			t.Fatalf("gn fields not null without a companion")
		}
		return
	}
	if got.GNSpace == nil || *got.GNSpace != v.GNSpace || got.GNVector == nil {
		t.Fatalf("gn companion lost: %v", got.GNSpace)
	}
	sameBits(t, "gn_vector", *got.GNVector, v.GNVector)
}

func padHex(h uint64) string {
	s := strconv.FormatUint(h, 16)
	return strings.Repeat("0", 16-len(s)) + s
}

// Every component reads back as the same float32 both ways a reader may parse it: straight to
// float32 (Go), or to float64 then rounded to float32 (Python's json, Jackson in Kafka Connect).
func TestDocVectorJSONFloatsRoundTrip(t *testing.T) {
	special := []float32{math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.MaxFloat32, -math.MaxFloat32,
		1.17549435e-38, 16777216, 16777218, 3.4e38, 1e-45, 0.1, 1.0 / 3, 0, float32(math.Copysign(0, -1)), 1e21, 123456789,
		// Its shortest float32 form, 7.038531e-26, reads as the next float32 through float64.
		math.Float32frombits(363742205)}
	r := rand.New(rand.NewPCG(1, 2))
	vec := append([]float32(nil), special...)
	for len(vec) < 60000 {
		x := math.Float32frombits(r.Uint32())
		if !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) {
			vec = append(vec, x)
		}
	}
	v := DocVector{DocID: "f", Space: "s", Vector: vec, GNSpace: "g", GNVector: vec[:100]}
	b, err := EncodeDocVectorJSON(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	var got jsonVector
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "vector (parsed as float32)", got.Vector, vec)
	var raw struct{ Vector []json.Number }
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	via64 := make([]float32, len(raw.Vector))
	for i, n := range raw.Vector {
		d, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			t.Fatal(err)
		}
		via64[i] = float32(d)
	}
	sameBits(t, "vector (parsed as float64, then float32)", via64, vec)
	if n := raw.Vector[len(special)-1]; n != "7.038530691851209e-26" {
		t.Errorf("the float32 that rounds twice is written %s", n)
	}
}

func TestDocVectorJSONRefuses(t *testing.T) {
	ok := DocVector{DocID: "x", Space: "s", Vector: []float32{1}}
	for name, v := range map[string]DocVector{
		"empty vector":   {DocID: "x", Space: "s"},
		"NaN":            {DocID: "x", Space: "s", Vector: []float32{1, float32(math.NaN())}},
		"infinite gn":    {DocID: "x", Space: "s", Vector: []float32{1}, GNVector: []float32{float32(math.Inf(-1))}},
		"negative count": {DocID: "x", Space: "s", Vector: []float32{1}, NTokens: -1},
	} {
		for _, enc := range []func([]byte, DocVector) ([]byte, error){EncodeDocVectorJSON, EncodeDocVectorConnectJSON} {
			if b, err := enc(nil, v); err == nil {
				t.Errorf("%s: encoded %s", name, b)
			}
		}
	}
	if _, err := EncodeDocVectorConnectJSON(nil, ok); err != nil {
		t.Fatal(err)
	}
}

// connectEnvelope is a connect-json value as JsonConverter reads it.
type connectEnvelope struct {
	Schema  json.RawMessage `json:"schema"`
	Payload json.RawMessage `json:"payload"`
}

func TestDocVectorConnectJSON(t *testing.T) {
	wantSchema := `{"type":"struct","name":"reignpipe.DocVector","optional":false,"fields":[` +
		`{"field":"doc_id","type":"string","optional":false},{"field":"title","type":"string","optional":false},` +
		`{"field":"source","type":"string","optional":false},{"field":"version","type":"string","optional":false},` +
		`{"field":"content_hash","type":"string","optional":false},{"field":"n_chunks","type":"int64","optional":false},` +
		`{"field":"n_tokens","type":"int64","optional":false},{"field":"space","type":"string","optional":false},` +
		`{"field":"vector","type":"array","optional":false,"items":{"type":"float","optional":false}},` +
		`{"field":"gn_space","type":"string","optional":true},` +
		`{"field":"gn_vector","type":"array","optional":true,"items":{"type":"float","optional":false}}]}`
	if string(ConnectSchema()) != wantSchema {
		t.Fatalf("schema\n got %s\nwant %s", ConnectSchema(), wantSchema)
	}
	base := DocVector{DocID: "t:2", Title: "T", Source: "t", Version: "1", ContentHash: math.MaxUint64, NChunks: 1, NTokens: 9,
		Space: "gn-meanpool:fp", Vector: []float32{0.25, -0.5}}
	withGN := base
	withGN.Space, withGN.GNSpace, withGN.GNVector = "reign:ck", "gn-meanpool:fp", []float32{1e-7}
	for _, v := range []DocVector{base, withGN} {
		b, err := EncodeDocVectorConnectJSON(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		// JsonConverter refuses any envelope but exactly {"schema", "payload"}.
		var top map[string]json.RawMessage
		if err := json.Unmarshal(b, &top); err != nil || len(top) != 2 {
			t.Fatalf("envelope %s: %v", b, err)
		}
		var env connectEnvelope
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&env); err != nil {
			t.Fatal(err)
		}
		if string(env.Schema) != wantSchema {
			t.Fatalf("schema of the record differs from ConnectSchema: %s", env.Schema)
		}
		var p map[string]json.RawMessage
		if err := json.Unmarshal(env.Payload, &p); err != nil || len(p) != 11 {
			t.Fatalf("payload %s must hold all 11 fields: %v", env.Payload, err)
		}
		var got jsonVector
		if err := json.Unmarshal(env.Payload, &got); err != nil {
			t.Fatal(err)
		}
		checkJSONVector(t, got, v, true)
		if len(v.GNVector) == 0 && (string(p["gn_space"]) != "null" || string(p["gn_vector"]) != "null") {
			t.Fatalf("absent companion must be null: %s", env.Payload)
		}
	}
}

// FuzzDocVectorJSON: whatever the strings and float bits, both forms are valid JSON that read
// back to the vector written (or the vector is refused for NaN or infinity).
func FuzzDocVectorJSON(f *testing.F) {
	f.Add("t:1", "title", "1", []byte{0, 0, 128, 63, 205, 204, 204, 61}, false)
	f.Add("\xff\x00", "\u2028<&>", "", []byte{0, 0, 0, 128, 1, 0, 0, 0, 255, 255, 127, 127}, true)
	f.Fuzz(func(t *testing.T, id, title, version string, bits []byte, gn bool) {
		var vec []float32
		for len(bits) >= 4 {
			vec = append(vec, math.Float32frombits(binary.LittleEndian.Uint32(bits)))
			bits = bits[4:]
		}
		v := DocVector{DocID: id, Title: title, Version: version, Space: "s", Vector: vec, NChunks: len(vec)}
		if gn {
			v.GNSpace, v.GNVector = "g", vec
		}
		b, err := EncodeDocVectorJSON(nil, v)
		if err != nil {
			if checkVectorJSON(v) == nil {
				t.Fatalf("refused a valid vector: %v", err)
			}
			return
		}
		var got jsonVector
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("invalid JSON %q: %v", b, err)
		}
		sameBits(t, "vector", got.Vector, vec)
		var raw struct{ Vector []json.Number }
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatal(err)
		}
		for i, n := range raw.Vector {
			if d, err := strconv.ParseFloat(string(n), 64); err != nil || math.Float32bits(float32(d)) != math.Float32bits(vec[i]) {
				t.Fatalf("component %d written %s reads as %v through float64, want %v", i, n, float32(d), vec[i])
			}
		}
		c, err := EncodeDocVectorConnectJSON(nil, v)
		if err != nil || !json.Valid(c) {
			t.Fatalf("connect-json %q: %v", c, err)
		}
	})
}
