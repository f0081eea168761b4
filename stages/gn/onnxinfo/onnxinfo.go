// Package onnxinfo reads the declared inputs and outputs of an ONNX model file (their names,
// element types and shapes) without ONNX Runtime. It streams the file's protobuf through a
// small buffer and seeks past everything else -- the initializers that make up nearly all of a
// model's bytes are never read into memory -- so learning a model's output dimension costs a
// few kilobytes of reading, not a session.
package onnxinfo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the ONNX protobuf (onnx.proto3) that this reader follows.
const (
	modelGraph = 7 // ModelProto.graph

	graphInput  = 11 // GraphProto.input
	graphOutput = 12 // GraphProto.output

	valueName = 1 // ValueInfoProto.name
	valueType = 2 // ValueInfoProto.type

	typeTensor = 1 // TypeProto.tensor_type

	tensorElemType = 1 // TypeProto.Tensor.elem_type
	tensorShape    = 2 // TypeProto.Tensor.shape

	shapeDim = 1 // TensorShapeProto.dim

	dimValue = 1 // TensorShapeProto.Dimension.dim_value
	dimParam = 2 // TensorShapeProto.Dimension.dim_param
)

// ElemFloat is TensorProto.DataType FLOAT (float32); ElemInt64 is INT64.
const (
	ElemFloat int32 = 1
	ElemInt64 int32 = 7
)

// MaxValueInfo bounds one declared input or output entry: a name and a shape are a few dozen
// bytes, so anything larger is a damaged file, not a model to read into memory.
const MaxValueInfo = 1 << 20

// Dim is one dimension of a declared shape: a fixed size (Value > 0), a symbolic one (Param,
// e.g. "batch_size"), or unknown (both zero).
type Dim struct {
	Value int64
	Param string
}

// Value is one declared graph input or output.
type Value struct {
	Name string
	// Tensor says the type is a tensor; ElemType and Shape are meaningful only then.
	Tensor   bool
	ElemType int32 // TensorProto.DataType: ElemFloat, ElemInt64, ...
	// Shape is nil when the model declares no shape (rank unknown).
	Shape []Dim
}

// Info is what a model declares about its graph's interface.
type Info struct {
	Inputs, Outputs []Value
}

// Read returns the declared inputs and outputs of the ONNX model at path. Its errors name the
// file and what is wrong with it.
func Read(path string) (*Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("onnxinfo: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("onnxinfo: %w", err)
	}
	info, err := Parse(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("onnxinfo: %s: %w", path, err)
	}
	return info, nil
}

// Parse reads a serialised ModelProto of size bytes from r, which it seeks past every field
// but the graph's inputs and outputs.
func Parse(r io.ReadSeeker, size int64) (*Info, error) {
	s := &stream{r: r, br: bufio.NewReaderSize(r, 64<<10), size: size}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	info := &Info{}
	graphs := 0
	for s.off < size {
		num, typ, err := s.tag(size)
		if err != nil {
			return nil, err
		}
		if num == modelGraph && typ == protowire.BytesType {
			n, err := s.length(size)
			if err != nil {
				return nil, fmt.Errorf("graph: %w", err)
			}
			if err := s.graph(info, s.off+n); err != nil {
				return nil, err
			}
			graphs++
			continue
		}
		if err := s.skip(typ, size); err != nil {
			return nil, err
		}
	}
	if graphs == 0 {
		return nil, errors.New("no graph: not an ONNX model (ModelProto field 7 is absent)")
	}
	if len(info.Outputs) == 0 {
		return nil, errors.New("the graph declares no outputs")
	}
	return info, nil
}

// stream is a bounded-buffer reader over the file that knows its offset, so that a skip larger
// than what is buffered becomes a seek.
type stream struct {
	r    io.ReadSeeker
	br   *bufio.Reader
	off  int64
	size int64
}

// graph reads a GraphProto ending at end, keeping its inputs and outputs.
func (s *stream) graph(info *Info, end int64) error {
	for s.off < end {
		num, typ, err := s.tag(end)
		if err != nil {
			return fmt.Errorf("graph: %w", err)
		}
		if (num != graphInput && num != graphOutput) || typ != protowire.BytesType {
			if err := s.skip(typ, end); err != nil {
				return fmt.Errorf("graph: %w", err)
			}
			continue
		}
		kind := "input"
		if num == graphOutput {
			kind = "output"
		}
		at := s.off
		n, err := s.length(end)
		if err != nil {
			return fmt.Errorf("graph %s: %w", kind, err)
		}
		if n > MaxValueInfo {
			return fmt.Errorf("graph %s at byte %d is %d bytes long, more than the %d an input or output declaration can need", kind, at, n, MaxValueInfo)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(s.br, b); err != nil {
			return fmt.Errorf("graph %s at byte %d: %w", kind, at, truncated(err))
		}
		s.off += n
		v, err := parseValue(b)
		if err != nil {
			return fmt.Errorf("graph %s at byte %d: %w", kind, at, err)
		}
		if num == graphInput {
			info.Inputs = append(info.Inputs, v)
		} else {
			info.Outputs = append(info.Outputs, v)
		}
	}
	if s.off != end {
		return fmt.Errorf("graph: its last field runs past its end (byte %d) to byte %d", end, s.off)
	}
	return nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("file is truncated")
	}
	return err
}

func (s *stream) varint() (uint64, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		c, err := s.br.ReadByte()
		if err != nil {
			return 0, truncated(err)
		}
		s.off++
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("varint at byte %d is longer than 10 bytes", s.off-10)
}

// tag reads a field's tag, which must begin before end.
func (s *stream) tag(end int64) (protowire.Number, protowire.Type, error) {
	at := s.off
	v, err := s.varint()
	if err != nil {
		return 0, 0, err
	}
	num, typ := protowire.DecodeTag(v)
	if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
		return 0, 0, fmt.Errorf("invalid field number %d at byte %d", num, at)
	}
	if s.off > end {
		return 0, 0, fmt.Errorf("field tag at byte %d runs past its message's end (byte %d)", at, end)
	}
	return num, typ, nil
}

// length reads a length prefix whose payload must fit before end.
func (s *stream) length(end int64) (int64, error) {
	at := s.off
	v, err := s.varint()
	if err != nil {
		return 0, err
	}
	if s.off > end || v > uint64(end-s.off) {
		return 0, fmt.Errorf("field at byte %d claims %d bytes but only %d remain in its message", at, v, end-s.off)
	}
	return int64(v), nil
}

// skip passes over one field's payload of wire type typ, seeking when it is longer than the
// buffer holds.
func (s *stream) skip(typ protowire.Type, end int64) error {
	var n int64
	switch typ {
	case protowire.VarintType:
		_, err := s.varint()
		if err == nil && s.off > end {
			err = fmt.Errorf("varint runs past its message's end (byte %d)", end)
		}
		return err
	case protowire.Fixed32Type:
		n = 4
	case protowire.Fixed64Type:
		n = 8
	case protowire.BytesType:
		var err error
		if n, err = s.length(end); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unsupported wire type %d at byte %d (groups are not used by ONNX)", typ, s.off)
	}
	if n > end-s.off {
		return fmt.Errorf("field at byte %d runs past its message's end (byte %d)", s.off, end)
	}
	if n <= int64(s.br.Buffered()) {
		s.br.Discard(int(n))
		s.off += n
		return nil
	}
	s.off += n
	if _, err := s.r.Seek(s.off, io.SeekStart); err != nil {
		return err
	}
	s.br.Reset(s.r)
	return nil
}

// parseValue decodes a ValueInfoProto held in memory.
func parseValue(b []byte) (Value, error) {
	var v Value
	err := fields(b, func(num protowire.Number, typ protowire.Type, payload []byte, _ uint64) error {
		switch {
		case num == valueName && typ == protowire.BytesType:
			v.Name = string(payload)
		case num == valueType && typ == protowire.BytesType:
			return fields(payload, func(num protowire.Number, typ protowire.Type, payload []byte, _ uint64) error {
				if num != typeTensor || typ != protowire.BytesType {
					return nil // sequence, map, optional, sparse: not a tensor
				}
				v.Tensor = true
				return parseTensorType(payload, &v)
			})
		}
		return nil
	})
	if err != nil {
		return Value{}, err
	}
	if v.Name == "" {
		return Value{}, errors.New("declaration has no name")
	}
	return v, nil
}

func parseTensorType(b []byte, v *Value) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, payload []byte, x uint64) error {
		switch {
		case num == tensorElemType && typ == protowire.VarintType:
			v.ElemType = int32(x)
		case num == tensorShape && typ == protowire.BytesType:
			v.Shape = []Dim{}
			return fields(payload, func(num protowire.Number, typ protowire.Type, payload []byte, _ uint64) error {
				if num != shapeDim || typ != protowire.BytesType {
					return nil
				}
				var d Dim
				err := fields(payload, func(num protowire.Number, typ protowire.Type, payload []byte, x uint64) error {
					switch {
					case num == dimValue && typ == protowire.VarintType:
						d.Value = int64(x)
					case num == dimParam && typ == protowire.BytesType:
						d.Param = string(payload)
					}
					return nil
				})
				v.Shape = append(v.Shape, d)
				return err
			})
		}
		return nil
	})
}

// fields calls fn for each field of the message b: payload for length-delimited fields, x for
// varints.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, payload []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("bad field tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var payload []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			payload, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, typ, payload, x); err != nil {
			return err
		}
	}
	return nil
}
