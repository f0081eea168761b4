#!/usr/bin/env python3
"""Reference REIGN encoder in NumPy (float64), for parity tests of stages/reign.

usage: reign_reference.py make SIZE SEED OUTDIR [--gn-dim D] [--positions P] [--dtype F32|F16|BF16]
       reign_reference.py run CKPTDIR   (JSON lines {"chunks": [[...], ...]} on stdin,
                                         one {"vector": [...]} line out per document)

`make` writes a random checkpoint in the REIGN layout (config.json + model.safetensors, written
by hand: 8-byte little-endian header length, JSON header, raw little-endian data): weights
N(0, 0.02), LayerNorm weights 1 + N(0, 0.02), for size tiny-l1, small-l2, base-l3 or large-l4.
--positions P adds an absolute position table of P rows.

`run` follows REFERENCE-IMPLEMENTATION.md section 3 the plain way, one document at a time with
no padding: LayerNorm, gn_projection, (absolute positions), post-LN BERT layers with exact erf
GELU, mean over chunks, tanh pooler, L2 normalisation. It stands in for the PyTorch oracle
because a CPU PyTorch wheel is not reachable for CI here (the PyPI torch wheel pulls several GB
of CUDA packages); float64 keeps its own rounding far below the Go test's tolerance.
"""
import json
import math
import struct
import sys

import numpy as np

SIZES = {  # layers, hidden, heads, ffn, default gn dim
    "tiny-l1": (1, 192, 3, 768, 384),
    "small-l2": (2, 384, 6, 1536, 384),
    "base-l3": (3, 768, 12, 3072, 768),
    "large-l4": (4, 1024, 16, 4096, 1024),
}


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        if dtype == "F32":
            raw = arr.astype("<f4").tobytes()
        elif dtype == "F16":
            raw = arr.astype("<f2").tobytes()
        else:  # BF16: the top half of the float32 bits, rounded to nearest even
            bits = arr.astype("<f4").view("<u4").astype(np.uint64)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            raw = bits.astype("<u2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def make(size, seed, outdir, gn_dim=None, positions=0, dtype="F32"):
    import os

    layers, hidden, heads, ffn, gdef = SIZES[size]
    gn = gn_dim or gdef
    rng = np.random.default_rng(seed)
    t = {}

    def lin(name, out, inp):
        t[name + ".weight"] = rng.normal(0, 0.02, (out, inp))
        t[name + ".bias"] = rng.normal(0, 0.02, (out,))

    def ln(name, n):
        t[name + ".weight"] = 1 + rng.normal(0, 0.02, (n,))
        t[name + ".bias"] = rng.normal(0, 0.02, (n,))

    ln("embeddings.LayerNorm", gn)
    lin("embeddings.gn_projection", hidden, gn)
    if positions:
        t["embeddings.position_embeddings.weight"] = rng.normal(0, 0.02, (positions, hidden))
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for n in ("query", "key", "value"):
            lin(p + "attention.self." + n, hidden, hidden)
        lin(p + "attention.output.dense", hidden, hidden)
        ln(p + "attention.output.LayerNorm", hidden)
        lin(p + "intermediate.dense", ffn, hidden)
        lin(p + "output.dense", hidden, ffn)
        ln(p + "output.LayerNorm", hidden)
    lin("pooler.dense", hidden, hidden)
    cfg = {
        "model_type": "reign", "num_hidden_layers": layers, "hidden_size": hidden,
        "num_attention_heads": heads, "intermediate_size": ffn, "layer_norm_eps": 1e-12,
        "gn_projection_dim": gn, "hidden_act": "gelu",
        "position_embedding_type": "absolute" if positions else "none",
        "max_position_embeddings": positions, "gn_chunk_size": 512, "gn_stride": 256,
        "use_special_tokens": False,
    }
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(outdir, "model.safetensors"), t, dtype)


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        raw = body[e["data_offsets"][0]:e["data_offsets"][1]]
        if e["dtype"] == "F32":
            a = np.frombuffer(raw, "<f4")
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, "<f2")
        elif e["dtype"] == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view("<f4")
        else:
            raise ValueError(f"{name}: dtype {e['dtype']}")
        out[name] = a.astype(np.float64).reshape(e["shape"])
    return out


_erf = np.vectorize(math.erf)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def encode(t, cfg, chunks):
    eps = cfg.get("layer_norm_eps") or 1e-12
    heads = cfg["num_attention_heads"]
    hd = cfg["hidden_size"] // heads

    def lin(x, name):
        return x @ t[name + ".weight"].T + t[name + ".bias"]

    def ln(x, name):
        return layer_norm(x, t[name + ".weight"], t[name + ".bias"], eps)

    n = chunks.shape[0]
    x = lin(ln(chunks, "embeddings.LayerNorm"), "embeddings.gn_projection")
    pos = "embeddings.position_embeddings.weight"
    if pos in t and cfg.get("position_embedding_type") == "absolute":
        x = x + t[pos][:n]
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        split = lambda y: y.reshape(n, heads, hd).transpose(1, 0, 2)  # noqa: E731
        q, k, v = (split(lin(x, p + "attention.self." + s)) for s in ("query", "key", "value"))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v
        a = a.transpose(1, 0, 2).reshape(n, heads * hd)
        x = ln(x + lin(a, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = lin(x, p + "intermediate.dense")
        h = 0.5 * h * (1 + _erf(h / math.sqrt(2)))
        x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
    v = np.tanh(lin(x.mean(0), "pooler.dense"))
    return v / np.linalg.norm(v)


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "make":
        import argparse

        ap = argparse.ArgumentParser()
        ap.add_argument("size", choices=sorted(SIZES))
        ap.add_argument("seed", type=int)
        ap.add_argument("outdir")
        ap.add_argument("--gn-dim", type=int, default=None)
        ap.add_argument("--positions", type=int, default=0)
        ap.add_argument("--dtype", choices=["F32", "F16", "BF16"], default="F32")
        a = ap.parse_args(sys.argv[2:])
        make(a.size, a.seed, a.outdir, a.gn_dim, a.positions, a.dtype)
    elif len(sys.argv) == 3 and sys.argv[1] == "run":
        cfg = json.load(open(sys.argv[2] + "/config.json"))
        t = read_safetensors(sys.argv[2] + "/model.safetensors")
        for line in sys.stdin:
            if not line.strip():
                continue
            # Go sends float32 values in shortest form: round to float32 first to get them exactly.
            c = np.array(json.loads(line)["chunks"], dtype=np.float32).astype(np.float64)
            print(json.dumps({"vector": encode(t, cfg, c).tolist()}), flush=True)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
