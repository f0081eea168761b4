// Package reign runs a REIGN aggregator: a small BERT-style encoder over a document's GN chunk
// embeddings, pooled by a masked mean, a tanh pooler and L2 normalisation (REFERENCE section 3).
// Checkpoints use the Hugging Face layout (config.json + model.safetensors, section 4); the
// encoder runs on ONNX Runtime through a graph built here from the checkpoint's weights, so no
// exported ONNX file is needed alongside the checkpoint.
package reign

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// DefaultLayerNormEps is BERT's LayerNorm epsilon, used when config.json leaves it out.
const DefaultLayerNormEps = 1e-12

// Config is the part of config.json that shapes the encoder. GNDim is not a config field of
// the reference: it comes from gn_projection_dim when present, else from the projection weight.
type Config struct {
	ModelType             string  `json:"model_type"`
	NumHiddenLayers       int     `json:"num_hidden_layers"`
	HiddenSize            int     `json:"hidden_size"`
	NumAttentionHeads     int     `json:"num_attention_heads"`
	IntermediateSize      int     `json:"intermediate_size"`
	LayerNormEps          float64 `json:"layer_norm_eps"`
	GNProjectionDim       int     `json:"gn_projection_dim"`
	PositionEmbeddingType string  `json:"position_embedding_type"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	GNChunkSize           int     `json:"gn_chunk_size"` // metadata only
	GNStride              int     `json:"gn_stride"`     // metadata only
	UseSpecialTokens      bool    `json:"use_special_tokens"`
}

// ParseConfig decodes and checks config.json. Unknown fields are ignored: Hugging Face configs
// carry many (architectures, torch_dtype, ...) that do not change the maths.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return Config{}, fmt.Errorf("reign: config.json: %w", err)
	}
	if c.LayerNormEps == 0 {
		c.LayerNormEps = DefaultLayerNormEps
	}
	return c, c.validate()
}

func (c Config) validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if c.ModelType != "" && c.ModelType != "reign" {
		bad("model_type %q, want \"reign\"", c.ModelType)
	}
	// The caps only keep a hostile config from asking for absurd allocations.
	for _, f := range []struct {
		name string
		v    int
		max  int
	}{
		{"num_hidden_layers", c.NumHiddenLayers, 64},
		{"hidden_size", c.HiddenSize, 16384},
		{"num_attention_heads", c.NumAttentionHeads, 256},
		{"intermediate_size", c.IntermediateSize, 65536},
	} {
		if f.v <= 0 || f.v > f.max {
			bad("%s %d, want 1..%d", f.name, f.v, f.max)
		}
	}
	if c.GNProjectionDim < 0 || c.GNProjectionDim > 65536 {
		bad("gn_projection_dim %d, want 1..65536 (or absent)", c.GNProjectionDim)
	}
	if c.MaxPositionEmbeddings < 0 {
		bad("max_position_embeddings %d < 0", c.MaxPositionEmbeddings)
	}
	if c.HiddenSize > 0 && c.NumAttentionHeads > 0 && c.HiddenSize%c.NumAttentionHeads != 0 {
		bad("hidden_size %d is not a multiple of num_attention_heads %d", c.HiddenSize, c.NumAttentionHeads)
	}
	if !(c.LayerNormEps > 0 && c.LayerNormEps < 1) {
		bad("layer_norm_eps %v, want 0 < eps < 1", c.LayerNormEps)
	}
	switch c.PositionEmbeddingType {
	case "", "none", "absolute":
	case "sinusoidal":
		// The reference names it but does not pin the formula (base, interleaving), and a
		// guess would give silently different vectors.
		bad("position_embedding_type \"sinusoidal\" is not supported (its formula is not specified by the reference)")
	default:
		bad("position_embedding_type %q, want \"absolute\", \"none\" or absent", c.PositionEmbeddingType)
	}
	// The reference gives only the shape of special_token_embeddings, not where the three
	// vectors go (prepended? appended? pooled?); running such a checkpoint without them
	// would be wrong, so it is refused rather than guessed.
	if c.UseSpecialTokens {
		bad("use_special_tokens is true, but how the special token embeddings enter the encoder is not specified by the reference, so this stage refuses rather than guess")
	}
	if len(errs) > 0 {
		return fmt.Errorf("reign: config.json: %s", strings.Join(errs, "; "))
	}
	return nil
}

// HeadDim is the per-head width (64 for every released size).
func (c Config) HeadDim() int { return c.HiddenSize / c.NumAttentionHeads }

// Checkpoint is a validated REIGN checkpoint held in memory as float32.
type Checkpoint struct {
	Config Config
	GNDim  int
	// AbsolutePositions is set when the config asks for absolute positions and the
	// checkpoint has their table; MaxPositions is then the longest document it accepts.
	AbsolutePositions bool
	MaxPositions      int

	tensors map[string]Tensor
	id      string
}

// ID is the hex xxhash64 of the safetensors bytes and config.json: it names the vector space.
func (c *Checkpoint) ID() string { return c.id }

// Tensor returns a weight by its state-dict name.
func (c *Checkpoint) Tensor(name string) (Tensor, bool) {
	t, ok := c.tensors[name]
	return t, ok
}

// Load reads dir/config.json and dir/model.safetensors and checks every tensor's presence and
// shape against the config.
func Load(dir string) (*Checkpoint, error) {
	cfgBytes, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("reign: %w", err)
	}
	stBytes, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("reign: %w", err)
	}
	ck, err := FromBytes(cfgBytes, stBytes)
	if err != nil {
		return nil, fmt.Errorf("%w (checkpoint %s)", err, dir)
	}
	return ck, nil
}

// FromBytes is Load on in-memory files.
func FromBytes(configJSON, safetensors []byte) (*Checkpoint, error) {
	cfg, err := ParseConfig(configJSON)
	if err != nil {
		return nil, err
	}
	tensors, err := ParseSafetensors(safetensors)
	if err != nil {
		return nil, err
	}
	ck := &Checkpoint{Config: cfg, tensors: tensors}
	if err := ck.check(); err != nil {
		return nil, err
	}
	h := xxhash.New()
	var n [8]byte
	// Length-prefixed so that no two (config, weights) pairs hash the same stream.
	binary.LittleEndian.PutUint64(n[:], uint64(len(safetensors)))
	h.Write(n[:])
	h.Write(safetensors)
	h.Write(configJSON)
	ck.id = hex.EncodeToString(h.Sum(nil))
	return ck, nil
}

// check resolves GNDim and the optional tensors, then compares the tensor set with the layout.
func (c *Checkpoint) check() error {
	cfg := &c.Config
	proj, ok := c.tensors["embeddings.gn_projection.weight"]
	if ok && len(proj.Shape) == 2 {
		c.GNDim = proj.Shape[1]
	}
	if cfg.GNProjectionDim > 0 {
		if c.GNDim != 0 && c.GNDim != cfg.GNProjectionDim {
			return fmt.Errorf("reign: embeddings.gn_projection.weight has input dim %d but config gn_projection_dim is %d", c.GNDim, cfg.GNProjectionDim)
		}
		c.GNDim = cfg.GNProjectionDim
	}
	if c.GNDim <= 0 {
		return errors.New("reign: cannot tell the GN dimension: embeddings.gn_projection.weight is missing or not 2-D and config has no gn_projection_dim")
	}
	H, I, G := cfg.HiddenSize, cfg.IntermediateSize, c.GNDim
	want := map[string][]int{
		"embeddings.LayerNorm.weight":     {G},
		"embeddings.LayerNorm.bias":       {G},
		"embeddings.gn_projection.weight": {H, G},
		"embeddings.gn_projection.bias":   {H},
		"pooler.dense.weight":             {H, H},
		"pooler.dense.bias":               {H},
	}
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		p := fmt.Sprintf("encoder.layer.%d.", i)
		for _, l := range []string{"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"} {
			want[p+l+".weight"], want[p+l+".bias"] = []int{H, H}, []int{H}
		}
		for _, l := range []string{"attention.output.LayerNorm", "output.LayerNorm"} {
			want[p+l+".weight"], want[p+l+".bias"] = []int{H}, []int{H}
		}
		want[p+"intermediate.dense.weight"], want[p+"intermediate.dense.bias"] = []int{I, H}, []int{I}
		want[p+"output.dense.weight"], want[p+"output.dense.bias"] = []int{H, I}, []int{H}
	}
	const posName, specName = "embeddings.position_embeddings.weight", "embeddings.special_token_embeddings.weight"
	if pos, ok := c.tensors[posName]; ok {
		rows := cfg.MaxPositionEmbeddings
		if rows == 0 && len(pos.Shape) == 2 {
			rows = pos.Shape[0]
		}
		want[posName] = []int{rows, H}
		c.AbsolutePositions = cfg.PositionEmbeddingType == "absolute"
		if c.AbsolutePositions {
			c.MaxPositions = rows
		}
	}
	// Validated so a damaged table is reported, though unused (see Config.validate).
	if _, ok := c.tensors[specName]; ok {
		want[specName] = []int{3, G}
	}

	var missing, unknown, shapes []string
	for name, shape := range want {
		t, ok := c.tensors[name]
		switch {
		case !ok:
			missing = append(missing, name)
		case !equalInts(t.Shape, shape):
			shapes = append(shapes, fmt.Sprintf("%s has shape %v, want %v", name, t.Shape, shape))
		}
	}
	for name := range c.tensors {
		if _, ok := want[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	var errs []string
	for _, e := range []struct {
		what  string
		names []string
	}{{"missing tensors", missing}, {"unknown tensors", unknown}, {"wrong shapes", shapes}} {
		if len(e.names) > 0 {
			sort.Strings(e.names)
			errs = append(errs, fmt.Sprintf("%s: %s", e.what, strings.Join(e.names, ", ")))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("reign: checkpoint does not match config (%d layers, hidden %d, FFN %d, GN dim %d): %s",
			cfg.NumHiddenLayers, H, I, G, strings.Join(errs, "; "))
	}
	return nil
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Tensor is one safetensors entry upcast to float32 (row-major).
type Tensor struct {
	DType string // dtype as stored: F32, F16 or BF16
	Shape []int
	Data  []float32
}

// maxHeader bounds the JSON header, as the safetensors format itself does (100 MB).
const maxHeader = 100 << 20

type stEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets []uint64 `json:"data_offsets"`
}

// ParseSafetensors decodes a safetensors file: an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}} (plus optional __metadata__), then the raw data
// with offsets relative to its start. F32, F16 and BF16 are read; other dtypes are refused.
func ParseSafetensors(data []byte) (map[string]Tensor, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("reign: safetensors: file is %d bytes, shorter than its 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > maxHeader || n > uint64(len(data)-8) {
		return nil, fmt.Errorf("reign: safetensors: header length %d exceeds the file (%d bytes) or the 100 MB limit (truncated or not a safetensors file)", n, len(data))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &raw); err != nil {
		return nil, fmt.Errorf("reign: safetensors: bad header JSON: %w", err)
	}
	body := data[8+n:]
	out := make(map[string]Tensor, len(raw))
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		var e stEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("reign: safetensors: tensor %s: bad header entry: %w", name, err)
		}
		t, err := decodeTensor(e, body)
		if err != nil {
			return nil, fmt.Errorf("reign: safetensors: tensor %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

func decodeTensor(e stEntry, body []byte) (Tensor, error) {
	var size uint64
	switch e.DType {
	case "F32":
		size = 4
	case "F16", "BF16":
		size = 2
	default:
		return Tensor{}, fmt.Errorf("dtype %q not supported (want F32, F16 or BF16)", e.DType)
	}
	if len(e.DataOffsets) != 2 {
		return Tensor{}, fmt.Errorf("data_offsets has %d values, want [begin, end]", len(e.DataOffsets))
	}
	count := uint64(1)
	shape := make([]int, len(e.Shape))
	for i, d := range e.Shape {
		if d < 0 || d > math.MaxInt32 {
			return Tensor{}, fmt.Errorf("shape %v has a bad dimension", e.Shape)
		}
		shape[i] = int(d)
		if d != 0 && count > math.MaxInt64/uint64(d) {
			return Tensor{}, fmt.Errorf("shape %v overflows", e.Shape)
		}
		count *= uint64(d)
	}
	begin, end := e.DataOffsets[0], e.DataOffsets[1]
	if begin > end || end > uint64(len(body)) {
		return Tensor{}, fmt.Errorf("data_offsets [%d, %d] outside the %d data bytes (truncated file?)", begin, end, len(body))
	}
	if count > uint64(len(body)) || end-begin != count*size {
		return Tensor{}, fmt.Errorf("data_offsets [%d, %d] hold %d bytes, shape %v of %s needs %d", begin, end, end-begin, e.Shape, e.DType, count*size)
	}
	b := body[begin:end]
	vals := make([]float32, count)
	for i := range vals {
		switch e.DType {
		case "F32":
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		case "F16":
			vals[i] = halfToFloat(binary.LittleEndian.Uint16(b[2*i:]))
		case "BF16":
			vals[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	}
	return Tensor{DType: e.DType, Shape: shape, Data: vals}, nil
}

// halfToFloat widens an IEEE 754 binary16 value exactly.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: value is mant * 2^-24
		v := float32(mant) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}
