package onnxinfo

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// Hand-built ONNX protobuf pieces, so the tests need no fetched model.

func field(b []byte, num protowire.Number, payload []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, payload)
}

func varintField(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// valueInfo encodes a tensor ValueInfoProto; a dim is an int64 (dim_value) or a string
// (dim_param).
func valueInfo(name string, elem int32, dims ...any) []byte {
	var shape []byte
	for _, d := range dims {
		var dim []byte
		switch d := d.(type) {
		case int:
			dim = varintField(nil, dimValue, uint64(d))
		case string:
			dim = field(nil, dimParam, []byte(d))
		}
		shape = field(shape, shapeDim, dim)
	}
	tensor := varintField(nil, tensorElemType, uint64(elem))
	tensor = field(tensor, tensorShape, shape)
	v := field(nil, valueName, []byte(name))
	v = field(v, valueType, field(nil, typeTensor, tensor))
	return field(v, 3, []byte("doc string"))
}

// model encodes a ModelProto shaped like a sentence-embedding GN, with an initializer of
// weightBytes bytes between the nodes and the declarations.
func model(weightBytes int) []byte {
	var g []byte
	g = field(g, 1, field(nil, 4, []byte("Gather"))) // a node
	g = field(g, 2, []byte("main_graph"))
	g = field(g, 5, append(varintField(nil, 1, 384), make([]byte, weightBytes)...)) // initializer
	g = field(g, graphInput, valueInfo("input_ids", ElemInt64, "batch_size", "sequence_length"))
	g = field(g, graphInput, valueInfo("attention_mask", ElemInt64, "batch_size", "sequence_length"))
	g = field(g, graphOutput, valueInfo("last_hidden_state", ElemFloat, "batch_size", "sequence_length", 384))
	var m []byte
	m = varintField(m, 1, 8) // ir_version
	m = field(m, 2, []byte("hand-built"))
	m = field(m, modelGraph, g)
	m = field(m, 8, varintField(nil, 2, 14)) // opset_import
	return m
}

var wantModel = &Info{
	Inputs: []Value{
		{Name: "input_ids", Tensor: true, ElemType: ElemInt64, Shape: []Dim{{Param: "batch_size"}, {Param: "sequence_length"}}},
		{Name: "attention_mask", Tensor: true, ElemType: ElemInt64, Shape: []Dim{{Param: "batch_size"}, {Param: "sequence_length"}}},
	},
	Outputs: []Value{
		{Name: "last_hidden_state", Tensor: true, ElemType: ElemFloat, Shape: []Dim{{Param: "batch_size"}, {Param: "sequence_length"}, {Value: 384}}},
	},
}

func TestParse(t *testing.T) {
	b := model(1000)
	got, err := Parse(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wantModel) {
		t.Fatalf("got %+v\nwant %+v", got, wantModel)
	}
}

// countingReader counts the bytes actually read, as opposed to sought past.
type countingReader struct {
	io.ReadSeeker
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadSeeker.Read(p)
	c.n += int64(n)
	return n, err
}

func TestParseSeeksPastInitializers(t *testing.T) {
	b := model(32 << 20)
	r := &countingReader{ReadSeeker: bytes.NewReader(b)}
	got, err := Parse(r, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wantModel) {
		t.Fatalf("got %+v", got)
	}
	if r.n > 1<<20 {
		t.Fatalf("read %d of the %d bytes: the initializer was read, not sought past", r.n, len(b))
	}
}

func TestReadErrorsNameFileAndReason(t *testing.T) {
	dir := t.TempDir()
	good := model(100)
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"empty":     {nil, "no graph"},
		"truncated": {good[:len(good)-40], "claims"},
		"no-output": {field(nil, modelGraph, field(nil, graphInput, valueInfo("x", ElemFloat, 1))), "no outputs"},
		"text":      {[]byte("this is not a model\n"), ""},
		"huge-decl": {field(nil, modelGraph, field(nil, graphOutput, make([]byte, MaxValueInfo+1))), "more than"},
	} {
		p := filepath.Join(dir, name+".onnx")
		if err := os.WriteFile(p, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Read(p)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q should name %s and say %q", name, err, p, tc.want)
		}
	}
	if _, err := Read(filepath.Join(dir, "absent.onnx")); err == nil || !strings.Contains(err.Error(), "absent.onnx") {
		t.Errorf("absent file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(model(0))
	f.Add(model(100))
	f.Add(field(nil, modelGraph, field(nil, graphOutput, valueInfo("y", ElemFloat))))
	f.Add([]byte{})
	f.Add([]byte{0x3a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := Parse(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		if len(info.Outputs) == 0 {
			t.Fatal("accepted a model without outputs")
		}
		for _, v := range append(info.Inputs, info.Outputs...) {
			if v.Name == "" {
				t.Fatalf("accepted a nameless declaration %+v", v)
			}
		}
	})
}
