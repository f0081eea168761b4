"""Offline BERT graph fusion of a fetched GN, reproducibly.

    $REIGNPIPE_HOME/venv-peers/bin/python ops/bench/ortopt/optimize.py bge-small-en-v15

reads $REIGNPIPE_HOME/gn/<name>/model.onnx, runs onnxruntime.transformers.optimizer (model_type
bert: Attention, SkipLayerNormalization, BiasGelu, EmbedLayerNormalization fusions; opt_level 0,
so only these Python fusions are written and ONNX Runtime's own online optimiser still runs at
session creation, as for the original), and writes <name>-opt/model.onnx beside it with the
tokenizer copied, so the Go side loads it as GN <name>-opt with its own fingerprint. It prints
the fused-operator counts and the output's sha256; with --expect SHA it fails, and installs
nothing, if the output differs, which is how ops/bench/results records that the file is
reproducible. Tooling only: the product never runs Python.
"""
import argparse
import os
import sys

from onnxruntime.transformers import optimizer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gnvariant  # noqa: E402 (ops/bench/gnvariant.py)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", help="fetched GN, e.g. bge-small-en-v15")
    ap.add_argument("--heads", type=int, default=12, help="attention heads (both GNs have 12)")
    ap.add_argument("--hidden", type=int, default=384, help="hidden size (both GNs have 384)")
    ap.add_argument("--expect", help="sha256 the output must have")
    a = ap.parse_args()
    src, dst = gnvariant.paths(a.name, "-opt")
    m = optimizer.optimize_model(
        os.path.join(src, "model.onnx"), model_type="bert", num_heads=a.heads,
        hidden_size=a.hidden, opt_level=0, use_gpu=False)
    stats = m.get_fused_operator_statistics()
    m.save_model_to_file(gnvariant.staging(dst))
    print("fused:", {k: v for k, v in sorted(stats.items()) if v})
    got = gnvariant.install(src, dst, "optimize.py", a.expect)
    print(f"{got}  {os.path.join(dst, 'model.onnx')}")


if __name__ == "__main__":
    main()
