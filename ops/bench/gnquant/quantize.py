"""Static int8 quantisation of a fetched GN whose chunk vectors do not depend on the batch.

    $REIGNPIPE_HOME/venv-peers/bin/python ops/bench/gnquant/quantize.py bge-small-en-v15 \
        --calibration out/demo/enwiki-...-shortened.bz2

reads $REIGNPIPE_HOME/gn/<name>/model.onnx and writes <name>-int8s/model.onnx beside it, with
the tokenizer copied, so a pipeline runs it as `gn.name: <name>-int8s`: its file differs, so its
fingerprint and its cache space differ from the original's.

Why static, and why only these MatMuls. The int8 variant shipped in the -q jars quantises
activations dynamically: each forward pass picks its scales from the whole batch, so a window's
vector depends on the windows beside it (cosine 0.997 between two runs), which breaks the
cache's rule that one window key means one vector. Here every scale is fixed at quantisation
time (QDQ, MinMax over calibration windows, weights per output channel), so a window's
integer arithmetic is the same alone or in any batch. Only the MatMuls with a weight are
quantised, and of those not the feed-forward output projection (`layer.N/output/dense`): the
attention products (Q.K^T and P.V, two activations) and the attention mask around them stay
fp32 -- quantising the mask's Add clipped its large negative values, which let padding into
real tokens' attention (vectors changed with the batch's padding, cosine 0.84 to fp32) -- and
the feed-forward output's input, the GELU activations, has outliers that a per-tensor uint8 scale
cannot hold (cosine 0.95 with it quantised, 0.997 without).

Calibration: the first --windows full windows (510 word pieces + [CLS] + [SEP]) of the text of
the given Wikipedia dump (plain or .bz2), markup stripped roughly; `make gn-int8` uses the demo's
sample. The script prints the output's sha256; calibration runs ONNX Runtime, so a different CPU
may produce a different file (and so a different space), never a wrong one. Tooling only: the
product never runs Python.
"""
import argparse
import bz2
import os
import re
import sys
import tempfile

import numpy as np
import onnx
from onnx import version_converter
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                      QuantType, quantize_static)
from tokenizers import Tokenizer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gnvariant  # noqa: E402 (ops/bench/gnvariant.py)

# Not quantised: activation-by-activation attention products and the feed-forward output.
KEEP_FP32 = re.compile(r"attention/self/MatMul|layer\.[0-9]+/output/dense")


def calibration_windows(dump, tok, n, k=512):
    opener = bz2.open if dump.endswith(".bz2") else open
    with opener(dump, "rt", encoding="utf-8", errors="replace") as f:
        raw = f.read(8 << 20)
    text = re.sub(r"<[^>]+>|\{\{[^}]*\}\}|\[\[|\]\]|'''|''|&[a-z]+;", " ", raw)
    ids = tok.encode(text, add_special_tokens=False).ids
    body = k - 2
    wins = [[tok.token_to_id("[CLS]")] + ids[i:i + body] + [tok.token_to_id("[SEP]")]
            for i in range(0, len(ids) - body, body)][:n]
    if len(wins) < n:
        sys.exit(f"quantize.py: {dump} has text for {len(wins)} windows, need {n}")
    return wins


class Windows(CalibrationDataReader):
    def __init__(self, wins, inputs):
        self.feeds = iter([{k: v for k, v in {
            "input_ids": np.array([w], np.int64),
            "attention_mask": np.ones((1, len(w)), np.int64),
            "token_type_ids": np.zeros((1, len(w)), np.int64)}.items() if k in inputs} for w in wins])

    def get_next(self):
        return next(self.feeds, None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", help="fetched GN, e.g. bge-small-en-v15")
    ap.add_argument("--calibration", required=True, help="Wikipedia dump (.xml or .xml.bz2)")
    ap.add_argument("--windows", type=int, default=64, help="calibration windows")
    a = ap.parse_args()
    src, dst = gnvariant.paths(a.name, "-int8s")
    tok = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    wins = calibration_windows(a.calibration, tok, a.windows)
    model = onnx.load(os.path.join(src, "model.onnx"))
    # Per-channel weight scales need DequantizeLinear's axis, opset 13 on.
    if max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 13:
        model = version_converter.convert_version(model, 14)
    inputs = {i.name for i in model.graph.input}
    keep = [n.name for n in model.graph.node if n.op_type == "MatMul" and KEEP_FP32.search(n.name)]
    with tempfile.TemporaryDirectory() as tmp:
        staged = os.path.join(tmp, "model.onnx")
        onnx.save(model, staged)
        quantize_static(staged, gnvariant.staging(dst), Windows(wins, inputs),
                        quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                        op_types_to_quantize=["MatMul"], nodes_to_exclude=keep,
                        extra_options={"ActivationSymmetric": False})
    got = gnvariant.install(src, dst, "quantize.py")
    print(f"kept fp32: {len(keep)} MatMuls; calibration: {len(wins)} windows of {a.calibration}")
    print(f"{got}  {os.path.join(dst, 'model.onnx')}")


if __name__ == "__main__":
    main()
