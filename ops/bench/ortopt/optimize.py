"""Offline BERT graph fusion of a fetched GN, reproducibly.

    $REIGNPIPE_HOME/venv-peers/bin/python ops/bench/ortopt/optimize.py bge-small-en-v15

reads $REIGNPIPE_HOME/gn/<name>/model.onnx, runs onnxruntime.transformers.optimizer (model_type
bert: Attention, SkipLayerNormalization, BiasGelu, EmbedLayerNormalization fusions; opt_level 0,
so only these Python fusions are written and ONNX Runtime's own online optimiser still runs at
session creation, as for the original), and writes <name>-opt/model.onnx beside it with the
tokenizer copied, so the Go side loads it as GN <name>-opt with its own fingerprint. It prints
the fused-operator counts and the output's sha256; with --expect SHA it fails if the output
differs, which is how ops/bench/results records that the file is reproducible. Tooling only: the
product never runs Python.
"""
import argparse
import hashlib
import os
import shutil
import sys

from onnxruntime.transformers import optimizer


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", help="fetched GN, e.g. bge-small-en-v15")
    ap.add_argument("--heads", type=int, default=12, help="attention heads (both GNs have 12)")
    ap.add_argument("--hidden", type=int, default=384, help="hidden size (both GNs have 384)")
    ap.add_argument("--expect", help="sha256 the output must have")
    a = ap.parse_args()
    home = os.environ.get("REIGNPIPE_HOME", os.path.expanduser("~/.cache/reignpipe"))
    src = os.path.join(home, "gn", a.name)
    dst = os.path.join(home, "gn", a.name + "-opt")
    os.makedirs(dst, exist_ok=True)
    m = optimizer.optimize_model(
        os.path.join(src, "model.onnx"), model_type="bert", num_heads=a.heads,
        hidden_size=a.hidden, opt_level=0, use_gpu=False)
    stats = m.get_fused_operator_statistics()
    tmp = os.path.join(dst, "model.onnx.tmp")
    m.save_model_to_file(tmp)
    os.replace(tmp, os.path.join(dst, "model.onnx"))
    shutil.copyfile(os.path.join(src, "tokenizer.json"), os.path.join(dst, "tokenizer.json"))
    got = sha256(os.path.join(dst, "model.onnx"))
    print("fused:", {k: v for k, v in sorted(stats.items()) if v})
    print(f"{got}  {os.path.join(dst, 'model.onnx')}")
    if a.expect and a.expect != got:
        print(f"optimize.py: output sha256 {got}, expected {a.expect}: not reproduced", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
