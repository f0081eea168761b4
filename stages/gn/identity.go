package gn

import (
	"fmt"

	"github.com/reignpipe/reignpipe/stages/gn/onnxinfo"
)

// Identity is what names a GN's embedding space -- its fingerprint and dimension -- and the
// interface Load binds, all learnt from the files alone: no ONNX Runtime, no session.
type Identity struct {
	Name        string   // Config.Name
	Fingerprint string   // as Model.Fingerprint
	Dim         int      // embedding dimension D
	Inputs      []string // inputs to feed: input_ids, attention_mask[, token_type_ids]
	Output      string   // the [batch, sequence, D] hidden-state output pooled
}

// Identify hashes cfg's model and tokenizer files for the fingerprint and reads the model's
// declared inputs and outputs for the dimension, refusing a model whose interface this pooling
// cannot serve. Load identifies a model the same way, so the two cannot disagree.
func Identify(cfg Config) (Identity, error) {
	if err := cfg.Validate(); err != nil {
		return Identity{}, err
	}
	modelSum, err := sha256File(cfg.Model)
	if err != nil {
		return Identity{}, fmt.Errorf("gn: model: %w", err)
	}
	tokSum, err := sha256File(cfg.Tokenizer)
	if err != nil {
		return Identity{}, fmt.Errorf("gn: tokenizer: %w", err)
	}
	info, err := onnxinfo.Read(cfg.Model)
	if err != nil {
		return Identity{}, fmt.Errorf("gn: %w", err)
	}
	id := Identity{Name: cfg.Name, Fingerprint: fingerprint(modelSum, tokSum)}
	if err := id.bind(info); err != nil {
		return Identity{}, fmt.Errorf("gn: %s: %w", cfg.Model, err)
	}
	return id, nil
}

// bind picks the inputs to feed and the hidden-state output, refusing models whose interface
// this pooling cannot serve rather than failing on the first Embed.
func (id *Identity) bind(info *onnxinfo.Info) error {
	seen := map[string]bool{}
	for _, in := range info.Inputs {
		switch in.Name {
		case "input_ids", "attention_mask", "token_type_ids":
		default:
			return fmt.Errorf("unsupported model input %q (want input_ids, attention_mask and optionally token_type_ids)", in.Name)
		}
		if !in.Tensor || in.ElemType != onnxinfo.ElemInt64 || len(in.Shape) != 2 {
			return fmt.Errorf("input %s is %s, want int64 [batch, sequence]", in.Name, describe(in))
		}
		seen[in.Name] = true
	}
	for _, need := range []string{"input_ids", "attention_mask"} {
		if !seen[need] {
			return fmt.Errorf("model has no %s input (inputs: %s)", need, describeAll(info.Inputs))
		}
	}
	id.Inputs = []string{"input_ids", "attention_mask"}
	if seen["token_type_ids"] {
		id.Inputs = append(id.Inputs, "token_type_ids")
	}
	pick := -1
	for i, o := range info.Outputs {
		if o.Name == "last_hidden_state" {
			pick = i
			break
		}
	}
	if pick < 0 {
		for i, o := range info.Outputs {
			if o.Tensor && len(o.Shape) == 3 {
				pick = i
				break
			}
		}
	}
	if pick < 0 {
		return fmt.Errorf("no last_hidden_state or other 3-D [batch, sequence, dim] output (outputs: %s)", describeAll(info.Outputs))
	}
	o := info.Outputs[pick]
	if !o.Tensor || o.ElemType != onnxinfo.ElemFloat || len(o.Shape) != 3 || o.Shape[2].Value <= 0 {
		return fmt.Errorf("output %s is %s, want float32 [batch, sequence, D] with a fixed D", o.Name, describe(o))
	}
	id.Output, id.Dim = o.Name, int(o.Shape[2].Value)
	return nil
}

// describe writes a declaration as "float32 [batch_size, sequence_length, 384]".
func describe(v onnxinfo.Value) string {
	if !v.Tensor {
		return "not a tensor"
	}
	elem := fmt.Sprintf("element type %d", v.ElemType)
	switch v.ElemType {
	case onnxinfo.ElemFloat:
		elem = "float32"
	case onnxinfo.ElemInt64:
		elem = "int64"
	}
	if v.Shape == nil {
		return elem + " of unknown shape"
	}
	s := elem + " ["
	for i, d := range v.Shape {
		if i > 0 {
			s += ", "
		}
		switch {
		case d.Value > 0:
			s += fmt.Sprint(d.Value)
		case d.Param != "":
			s += d.Param
		default:
			s += "?"
		}
	}
	return s + "]"
}

func describeAll(vs []onnxinfo.Value) string {
	s := ""
	for i, v := range vs {
		if i > 0 {
			s += ", "
		}
		s += v.Name + " " + describe(v)
	}
	return s
}
