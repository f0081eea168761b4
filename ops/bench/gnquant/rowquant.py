"""Row-wise int8 quantisation of a fetched GN: exact integer products, scales per token.

    python ops/bench/gnquant/rowquant.py bge-small-en-v15

reads $REIGNPIPE_HOME/gn/<name>/model.onnx and writes <name>-int8r/model.onnx beside it, with
the tokenizer copied, so a pipeline runs it as `gn.name: <name>-int8r` (its own fingerprint and
cache space).

Every MatMul with a weight becomes an integer product (ONNX Runtime's MatMulIntegerToFloat,
com.microsoft domain) between
- the activation, quantised per row: each token's vector gets its own scale, max|x| / 127, and
  is rounded (half up) to uint8 around a fixed zero point of 128, and
- the weight, quantised per output column to 7 bits (|q| <= 63), symmetric,
then the int32 sums are scaled back to float by the column scale (in the GEMM's epilogue) and
the row scale. An activation feeding several MatMuls (query, key, value) is quantised once.

Why this form. A window's vector must not depend on the windows batched with it (the cache keys
a window by its ids and keeps the first vector stored). Row scales depend on that token's vector
only; the integer product is exact, whatever order the kernel sums in; the rest of the graph is
the fp32 graph. So batch invariance holds by construction, and no calibration data is involved,
which also makes the output a pure function of the input file (same sha256 on every machine).
7-bit weights because ONNX Runtime's u8 x s8 kernel on AVX2 without VNNI adds pairs of products
in 16 bits with saturation (255 x 127 x 2 overflows; 255 x 63 x 2 does not), and a saturated sum
would be a wrong one. Products stay below 2^24 (1536 x 127 x 63), so their float conversion is
exact too.

Needs only numpy and onnx (the test venv has both, so `make test` builds it and checks its batch
invariance); the product never runs Python. `--weight-bits 8` is closer to fp32 (cosine 0.9983
instead of 0.9964 on all-MiniLM-L6-v2) and exact only on CPUs with VNNI (AVX512-VNNI or
AVX-VNNI), whose u8 x s8 instruction adds in 32 bits.
"""
import argparse
import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gnvariant  # noqa: E402 (ops/bench/gnvariant.py)


def quantize(model, keep, weight_max):
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    users = {}
    for n in g.node:
        for x in n.input:
            users[x] = users.get(x, 0) + 1
    out_nodes, new_inits = [], []
    quantized_inputs = {}  # activation name -> (uint8 name, row scale name)
    dropped = set()
    done = 0
    const = lambda name, arr: new_inits.append(numpy_helper.from_array(arr, name)) or name
    c127 = const("rowq/127", np.array(127.0, np.float32))
    c1285 = const("rowq/128.5", np.array(128.5, np.float32))
    one = const("rowq/1", np.array(1.0, np.float32))
    tiny = const("rowq/tiny", np.array(1e-30, np.float32))
    zp = const("rowq/zp", np.array(128, np.uint8))
    for n in g.node:
        w = n.input[1] if n.op_type == "MatMul" and len(n.input) == 2 else None
        if w is None or w not in inits or n.input[0] in inits or keep.search(n.name):
            out_nodes.append(n)
            continue
        x = n.input[0]
        p = n.name.strip("/").replace("/", "_")
        if x not in quantized_inputs:
            # Row scale s = max|x| / 127 from two reductions (no full-size Abs pass); the
            # activation times 127/max|x|, plus 128.5, truncated by Cast: round half up around
            # the zero point 128, in [1, 255].
            q = "rowq/" + x
            out_nodes += [
                helper.make_node("ReduceMax", [x], [q + "/max"], axes=[-1], keepdims=1),
                helper.make_node("ReduceMin", [x], [q + "/min"], axes=[-1], keepdims=1),
                helper.make_node("Neg", [q + "/min"], [q + "/negmin"]),
                helper.make_node("Max", [q + "/max", q + "/negmin", tiny], [q + "/absmax"]),
                helper.make_node("Div", [q + "/absmax", c127], [q + "/scale"]),
                helper.make_node("Div", [c127, q + "/absmax"], [q + "/inv"]),
                helper.make_node("Mul", [x, q + "/inv"], [q + "/scaled"]),
                helper.make_node("Add", [q + "/scaled", c1285], [q + "/shift"]),
                helper.make_node("Cast", [q + "/shift"], [q + "/u8"], to=TensorProto.UINT8),
            ]
            quantized_inputs[x] = (q + "/u8", q + "/scale")
        xq, xs = quantized_inputs[x]
        wf = numpy_helper.to_array(inits[w]).astype(np.float32)
        colmax = np.abs(wf).max(axis=0)
        wscale = np.where(colmax > 0, colmax / weight_max, 1.0).astype(np.float32)
        wq = np.clip(np.rint(wf / wscale), -weight_max, weight_max).astype(np.int8)
        wq_name = const(w + "/rowq_int8", wq)
        ws_name = const(w + "/rowq_scale", wscale)
        if users[w] == 1:
            dropped.add(w)
        # MatMulIntegerToFloat (ONNX Runtime's com.microsoft domain) converts the exact int32
        # sums and applies the column scales in the GEMM's epilogue; the row scale follows.
        out_nodes += [
            helper.make_node("MatMulIntegerToFloat", [xq, wq_name, one, ws_name, zp], [p + "/colscaled"],
                             name=n.name + "/int8", domain="com.microsoft"),
            helper.make_node("Mul", [p + "/colscaled", xs], [n.output[0]]),
        ]
        done += 1
    del g.node[:]
    g.node.extend(out_nodes)
    kept = [i for i in g.initializer if i.name not in dropped]
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    return done


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", help="fetched GN, e.g. bge-small-en-v15")
    ap.add_argument("--keep", default="", help="regex of MatMul node names left in fp32")
    ap.add_argument("--weight-bits", type=int, default=7, choices=[7, 8])
    ap.add_argument("--suffix", default="-int8r")
    ap.add_argument("--expect", help="sha256 the output must have; refused (and removed) otherwise")
    a = ap.parse_args()
    src, dst = gnvariant.paths(a.name, a.suffix)
    model = onnx.load(os.path.join(src, "model.onnx"))
    keep = re.compile(a.keep) if a.keep else re.compile(r"(?!)")
    n = quantize(model, keep, 63 if a.weight_bits == 7 else 127)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, gnvariant.staging(dst))
    got = gnvariant.install(src, dst, "rowquant.py", a.expect)
    print(f"quantised {n} MatMuls row-wise ({a.weight_bits}-bit weights)")
    print(f"{got}  {os.path.join(dst, 'model.onnx')}")


if __name__ == "__main__":
    main()
