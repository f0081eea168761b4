package reign

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// The graph is hand-encoded as an ONNX ModelProto: the module has no generated onnx package,
// and the handful of messages needed here are simpler to write with protowire than to vendor.
// Field numbers are those of onnx.proto.
const (
	opset     = 17 // first opset with LayerNormalization
	irVersion = 8  // the IR version that introduced opset 17

	attrFloat = 1
	attrInt   = 2
	attrInts  = 7

	dtFloat = 1
	dtInt64 = 7
)

// Graph I/O names.
const (
	InputChunks  = "chunks" // float32 [B, N, gn_dim]
	InputMask    = "mask"   // float32 [B, N]: 1 = real chunk, 0 = padding
	OutputVector = "vector" // float32 [B, hidden]
)

type attr struct {
	name string
	kind int
	f    float32
	i    int64
	ints []int64
}

type graphBuilder struct {
	nodes, inits []byte
	n            int // node / temp counter for unique names
}

func (g *graphBuilder) tmp(prefix string) string {
	g.n++
	return fmt.Sprintf("%s_%d", prefix, g.n)
}

// op appends a node and returns its single output's name.
func (g *graphBuilder) op(opType string, inputs []string, attrs ...attr) string {
	out := g.tmp(opType)
	var b []byte
	for _, in := range inputs {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, in)
	}
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, out)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendString(b, out)
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendString(b, opType)
	for _, a := range attrs {
		var ab []byte
		ab = protowire.AppendTag(ab, 1, protowire.BytesType)
		ab = protowire.AppendString(ab, a.name)
		switch a.kind {
		case attrFloat:
			ab = protowire.AppendTag(ab, 2, protowire.Fixed32Type)
			ab = protowire.AppendFixed32(ab, math.Float32bits(a.f))
		case attrInt:
			ab = protowire.AppendTag(ab, 3, protowire.VarintType)
			ab = protowire.AppendVarint(ab, uint64(a.i))
		case attrInts:
			for _, v := range a.ints {
				ab = protowire.AppendTag(ab, 8, protowire.VarintType)
				ab = protowire.AppendVarint(ab, uint64(v))
			}
		}
		ab = protowire.AppendTag(ab, 20, protowire.VarintType)
		ab = protowire.AppendVarint(ab, uint64(a.kind))
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, ab)
	}
	g.nodes = protowire.AppendTag(g.nodes, 1, protowire.BytesType)
	g.nodes = protowire.AppendBytes(g.nodes, b)
	return out
}

// init adds an initializer; raw holds the little-endian values.
func (g *graphBuilder) init(name string, dtype int, dims []int, raw []byte) string {
	var b []byte
	for _, d := range dims {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d))
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(dtype))
	b = protowire.AppendTag(b, 8, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, 9, protowire.BytesType)
	b = protowire.AppendBytes(b, raw)
	g.inits = protowire.AppendTag(g.inits, 5, protowire.BytesType)
	g.inits = protowire.AppendBytes(g.inits, b)
	return name
}

func (g *graphBuilder) floats(name string, dims []int, v []float32) string {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return g.init(name, dtFloat, dims, raw)
}

func (g *graphBuilder) scalar(v float32) string {
	return g.floats(g.tmp("const"), nil, []float32{v})
}

func (g *graphBuilder) int64s(v ...int64) string {
	raw := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
	}
	return g.init(g.tmp("const"), dtInt64, []int{len(v)}, raw)
}

// valueInfo encodes a float tensor's name and shape; a dim is a symbol (string) or a size (int).
func valueInfo(name string, dims ...any) []byte {
	var shape []byte
	for _, d := range dims {
		var db []byte
		switch d := d.(type) {
		case string:
			db = protowire.AppendTag(db, 2, protowire.BytesType)
			db = protowire.AppendString(db, d)
		case int:
			db = protowire.AppendTag(db, 1, protowire.VarintType)
			db = protowire.AppendVarint(db, uint64(d))
		}
		shape = protowire.AppendTag(shape, 1, protowire.BytesType)
		shape = protowire.AppendBytes(shape, db)
	}
	var tt []byte
	tt = protowire.AppendTag(tt, 1, protowire.VarintType)
	tt = protowire.AppendVarint(tt, dtFloat)
	tt = protowire.AppendTag(tt, 2, protowire.BytesType)
	tt = protowire.AppendBytes(tt, shape)
	var typ []byte
	typ = protowire.AppendTag(typ, 1, protowire.BytesType)
	typ = protowire.AppendBytes(typ, tt)
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, typ)
}

// linear adds x·Wᵀ + b for a Linear stored [out, in] (transposed here once, so the graph
// needs a plain MatMul that broadcasts over the batch and chunk axes).
func (g *graphBuilder) linear(ck *Checkpoint, x, prefix string) string {
	w, _ := ck.Tensor(prefix + ".weight")
	bias, _ := ck.Tensor(prefix + ".bias")
	out, in := w.Shape[0], w.Shape[1]
	wt := make([]float32, len(w.Data))
	for o := 0; o < out; o++ {
		for i := 0; i < in; i++ {
			wt[i*out+o] = w.Data[o*in+i]
		}
	}
	wn := g.floats(prefix+".weight_t", []int{in, out}, wt)
	bn := g.floats(prefix+".bias", []int{out}, bias.Data)
	return g.op("Add", []string{g.op("MatMul", []string{x, wn}), bn})
}

func (g *graphBuilder) layerNorm(ck *Checkpoint, x, prefix string) string {
	w, _ := ck.Tensor(prefix + ".weight")
	b, _ := ck.Tensor(prefix + ".bias")
	wn := g.floats(prefix+".weight", w.Shape, w.Data)
	bn := g.floats(prefix+".bias", b.Shape, b.Data)
	return g.op("LayerNormalization", []string{x, wn, bn},
		attr{name: "axis", kind: attrInt, i: -1},
		attr{name: "epsilon", kind: attrFloat, f: float32(ck.Config.LayerNormEps)})
}

// BuildONNX encodes the encoder as an ONNX model with inputs chunks [B, N, gn_dim] and
// mask [B, N] and output vector [B, hidden]. ck must come from Load or FromBytes (validated).
func BuildONNX(ck *Checkpoint) []byte {
	cfg := ck.Config
	H, heads, hd := cfg.HiddenSize, cfg.NumAttentionHeads, cfg.HeadDim()
	g := &graphBuilder{}

	x := g.layerNorm(ck, InputChunks, "embeddings.LayerNorm")
	x = g.linear(ck, x, "embeddings.gn_projection")
	if ck.AbsolutePositions {
		p, _ := ck.Tensor("embeddings.position_embeddings.weight")
		pn := g.floats("embeddings.position_embeddings.weight", p.Shape, p.Data)
		n := g.op("Shape", []string{InputChunks}, attr{name: "start", kind: attrInt, i: 1}, attr{name: "end", kind: attrInt, i: 2})
		rows := g.op("Slice", []string{pn, g.int64s(0), n, g.int64s(0)})
		x = g.op("Add", []string{x, rows})
	}

	// HF's extended attention mask: (1 - mask) * dtype-min added to every query's scores.
	inv := g.op("Sub", []string{g.scalar(1), InputMask})
	addMask := g.op("Mul", []string{inv, g.scalar(-math.MaxFloat32)})
	addMask = g.op("Unsqueeze", []string{addMask, g.int64s(1, 2)}) // [B, 1, 1, N]
	split := g.int64s(0, 0, int64(heads), int64(hd))
	merge := g.int64s(0, 0, int64(H))
	scale := g.scalar(float32(1 / math.Sqrt(float64(hd))))
	half, one, sqrt2 := g.scalar(0.5), g.scalar(1), g.scalar(float32(math.Sqrt2))

	for l := 0; l < cfg.NumHiddenLayers; l++ {
		p := fmt.Sprintf("encoder.layer.%d.", l)
		project := func(name string, perm ...int64) string {
			y := g.linear(ck, x, p+"attention.self."+name)
			y = g.op("Reshape", []string{y, split})
			return g.op("Transpose", []string{y}, attr{name: "perm", kind: attrInts, ints: perm})
		}
		q := project("query", 0, 2, 1, 3) // [B, h, N, d]
		k := project("key", 0, 2, 3, 1)   // [B, h, d, N]
		v := project("value", 0, 2, 1, 3) // [B, h, N, d]
		s := g.op("Mul", []string{g.op("MatMul", []string{q, k}), scale})
		s = g.op("Softmax", []string{g.op("Add", []string{s, addMask})}, attr{name: "axis", kind: attrInt, i: -1})
		ctx := g.op("MatMul", []string{s, v})
		ctx = g.op("Transpose", []string{ctx}, attr{name: "perm", kind: attrInts, ints: []int64{0, 2, 1, 3}})
		ctx = g.op("Reshape", []string{ctx, merge})
		attn := g.linear(ck, ctx, p+"attention.output.dense")
		x = g.layerNorm(ck, g.op("Add", []string{attn, x}), p+"attention.output.LayerNorm")

		// Exact GELU, as HF's "gelu": 0.5·y·(1 + erf(y/√2)).
		y := g.linear(ck, x, p+"intermediate.dense")
		erf := g.op("Erf", []string{g.op("Div", []string{y, sqrt2})})
		y = g.op("Mul", []string{g.op("Mul", []string{y, half}), g.op("Add", []string{erf, one})})
		y = g.linear(ck, y, p+"output.dense")
		x = g.layerNorm(ck, g.op("Add", []string{y, x}), p+"output.LayerNorm")
	}

	m3 := g.op("Unsqueeze", []string{InputMask, g.int64s(2)}) // [B, N, 1]
	axis1 := g.int64s(1)
	sum := g.op("ReduceSum", []string{g.op("Mul", []string{x, m3}), axis1}, attr{name: "keepdims", kind: attrInt, i: 0})
	count := g.op("ReduceSum", []string{InputMask, axis1}, attr{name: "keepdims", kind: attrInt, i: 1})
	pooled := g.op("Div", []string{sum, count})
	pooled = g.op("Tanh", []string{g.linear(ck, pooled, "pooler.dense")})
	sq := g.op("ReduceSum", []string{g.op("Mul", []string{pooled, pooled}), axis1}, attr{name: "keepdims", kind: attrInt, i: 1})
	norm := g.op("Max", []string{g.op("Sqrt", []string{sq}), g.scalar(1e-12)})
	final := g.op("Div", []string{pooled, norm})
	// Identity gives the output its public name without renaming the last node.
	idn := []byte{}
	for _, f := range []struct {
		num int
		s   string
	}{{1, final}, {2, OutputVector}, {3, "output"}, {4, "Identity"}} {
		idn = protowire.AppendTag(idn, protowire.Number(f.num), protowire.BytesType)
		idn = protowire.AppendString(idn, f.s)
	}
	g.nodes = protowire.AppendTag(g.nodes, 1, protowire.BytesType)
	g.nodes = protowire.AppendBytes(g.nodes, idn)

	graph := g.nodes
	graph = protowire.AppendTag(graph, 2, protowire.BytesType)
	graph = protowire.AppendString(graph, "reign")
	graph = append(graph, g.inits...)
	for _, vi := range [][]byte{valueInfo(InputChunks, "B", "N", ck.GNDim), valueInfo(InputMask, "B", "N")} {
		graph = protowire.AppendTag(graph, 11, protowire.BytesType)
		graph = protowire.AppendBytes(graph, vi)
	}
	graph = protowire.AppendTag(graph, 12, protowire.BytesType)
	graph = protowire.AppendBytes(graph, valueInfo(OutputVector, "B", H))

	var opsetID []byte
	opsetID = protowire.AppendTag(opsetID, 2, protowire.VarintType)
	opsetID = protowire.AppendVarint(opsetID, opset)
	var model []byte
	model = protowire.AppendTag(model, 1, protowire.VarintType)
	model = protowire.AppendVarint(model, irVersion)
	model = protowire.AppendTag(model, 2, protowire.BytesType)
	model = protowire.AppendString(model, "reignpipe")
	model = protowire.AppendTag(model, 7, protowire.BytesType)
	model = protowire.AppendBytes(model, graph)
	model = protowire.AppendTag(model, 8, protowire.BytesType)
	return protowire.AppendBytes(model, opsetID)
}
