package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The JSON forms of a document vector, for consumers that are not reignpipe (sinks[].format on
// a kafka sink; WIRE.md describes both). The binary "RPDV" stays the default: it is a third of
// the size and exact by construction. These are exact too (appendJSONFloats).
const (
	SchemaDocVectorJSON        = "reignpipe.vector-json/1"
	SchemaDocVectorConnectJSON = "reignpipe.vector-connect-json/1"
)

// ConnectSchemaName names the Connect struct of a connect-json value.
const ConnectSchemaName = "reignpipe.DocVector"

// connectSchema is the "schema" half of every connect-json value: Kafka Connect's JsonConverter
// (schemas.enable=true) rebuilds a Connect schema from it. It is one constant, gn fields
// included as optional, so a Connect sink sees one schema per topic and creates nullable
// columns once. The vector carries no logical name: Debezium's io.debezium.data.FloatVector
// would make Debezium's JDBC sink store it as pgvector halfvec, which drops precision.
// content_hash is a string of 16 hex digits, as in the headers: an int64 would show half the
// hashes as negative numbers.
var connectSchema = func() []byte {
	type items struct {
		Type     string `json:"type"`
		Optional bool   `json:"optional"`
	}
	type field struct {
		Field    string `json:"field"`
		Type     string `json:"type"`
		Optional bool   `json:"optional"`
		Items    *items `json:"items,omitempty"`
	}
	item := &items{Type: "float"} // float32; Connect's "double" would be float64
	s := struct {
		Type     string  `json:"type"`
		Name     string  `json:"name"`
		Optional bool    `json:"optional"`
		Fields   []field `json:"fields"`
	}{Type: "struct", Name: ConnectSchemaName, Fields: []field{
		{Field: "doc_id", Type: "string"},
		{Field: "title", Type: "string"},
		{Field: "source", Type: "string"},
		{Field: "version", Type: "string"},
		{Field: "content_hash", Type: "string"},
		{Field: "n_chunks", Type: "int64"},
		{Field: "n_tokens", Type: "int64"},
		{Field: "space", Type: "string"},
		{Field: "vector", Type: "array", Items: item},
		{Field: "gn_space", Type: "string", Optional: true},
		{Field: "gn_vector", Type: "array", Items: item, Optional: true},
	}}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}()

// EncodeDocVectorJSON appends the "json" form of v to dst: one object,
//
//	{"doc_id","title","source","version","content_hash","n_chunks","n_tokens","space","vector"}
//
// plus "gn_space" and "gn_vector" when v carries its GN mean-pool companion.
func EncodeDocVectorJSON(dst []byte, v DocVector) ([]byte, error) {
	if err := checkVectorJSON(v); err != nil {
		return dst, err
	}
	return appendVectorPayload(dst, v, false), nil
}

// EncodeDocVectorConnectJSON appends the "connect-json" form of v to dst: Kafka Connect's
// JsonConverter envelope {"schema": ..., "payload": ...}, the payload being the "json" object
// with gn_space and gn_vector null when absent.
func EncodeDocVectorConnectJSON(dst []byte, v DocVector) ([]byte, error) {
	if err := checkVectorJSON(v); err != nil {
		return dst, err
	}
	dst = append(dst, `{"schema":`...)
	dst = append(dst, connectSchema...)
	dst = append(dst, `,"payload":`...)
	dst = appendVectorPayload(dst, v, true)
	return append(dst, '}'), nil
}

// ConnectSchema returns the connect-json schema object (a copy), for documentation and tests.
func ConnectSchema() []byte { return append([]byte(nil), connectSchema...) }

// checkVectorJSON refuses what JSON cannot carry: NaN and infinities have no JSON number.
func checkVectorJSON(v DocVector) error {
	if len(v.Vector) == 0 || len(v.Vector) > maxWireDim || len(v.GNVector) > maxWireDim {
		return fmt.Errorf("vector of %s: dimension %d (gn %d) out of range", v.DocID, len(v.Vector), len(v.GNVector))
	}
	for j, vec := range [][]float32{v.Vector, v.GNVector} {
		name := [2]string{"vector", "gn_vector"}[j]
		for i, x := range vec {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("vector of %s: %s[%d] is %v, which JSON cannot write", v.DocID, name, i, x)
			}
		}
	}
	if v.NChunks < 0 || v.NTokens < 0 {
		return errors.New("vector of " + v.DocID + ": negative chunk or token count")
	}
	return nil
}

func appendVectorPayload(dst []byte, v DocVector, nullGN bool) []byte {
	dst = appendJSONField(dst, '{', "doc_id", v.DocID)
	dst = appendJSONField(dst, ',', "title", v.Title)
	dst = appendJSONField(dst, ',', "source", v.Source)
	dst = appendJSONField(dst, ',', "version", v.Version)
	dst = appendJSONField(dst, ',', "content_hash", fmt.Sprintf("%016x", v.ContentHash))
	dst = append(dst, `,"n_chunks":`...)
	dst = strconv.AppendInt(dst, int64(v.NChunks), 10)
	dst = append(dst, `,"n_tokens":`...)
	dst = strconv.AppendInt(dst, int64(v.NTokens), 10)
	dst = appendJSONField(dst, ',', "space", v.Space)
	dst = append(dst, `,"vector":`...)
	dst = appendJSONFloats(dst, v.Vector)
	switch {
	case len(v.GNVector) > 0:
		dst = appendJSONField(dst, ',', "gn_space", v.GNSpace)
		dst = append(dst, `,"gn_vector":`...)
		dst = appendJSONFloats(dst, v.GNVector)
	case nullGN:
		dst = append(dst, `,"gn_space":null,"gn_vector":null`...)
	}
	return append(dst, '}')
}

func appendJSONField(dst []byte, sep byte, name, value string) []byte {
	dst = append(dst, sep, '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	b, _ := json.Marshal(value) // a string always marshals; invalid UTF-8 becomes U+FFFD
	return append(dst, b...)
}

// appendJSONFloats writes each component as the shortest decimal that reads back as the same
// float32 both ways a reader may parse it: straight to float32 (Go; Kafka Connect's
// JsonConverter, through BigDecimal), or to float64 and then rounded to float32 (Python's json,
// JavaScript). The shortest float32 form ('g', -1, 32: "0.1", "-2.5e-05") passes both for every
// finite float32 but two (checked exhaustively): ±7.038531e-26 reads through float64 as the
// float32 one ulp away, rounding twice. Such a value is written as the float64 value of the
// float32 ("7.038530691851209e-26"), exact both ways. Negative zero is "-0.0": "-0" reads as
// the integer 0 in Python's json, and the sign would be lost.
func appendJSONFloats(dst []byte, f []float32) []byte {
	dst = append(dst, '[')
	for i, x := range f {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONFloat32(dst, x)
	}
	return append(dst, ']')
}

func appendJSONFloat32(dst []byte, x float32) []byte {
	if x == 0 && math.Signbit(float64(x)) {
		return append(dst, "-0.0"...)
	}
	n := len(dst)
	dst = strconv.AppendFloat(dst, float64(x), 'g', -1, 32)
	if d, err := strconv.ParseFloat(string(dst[n:]), 64); err == nil && float32(d) == x {
		return dst
	}
	return strconv.AppendFloat(dst[:n], float64(x), 'g', -1, 64)
}
