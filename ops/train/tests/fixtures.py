"""Small cache-shaped inputs written the way reignpipe writes them."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def meta(fingerprint="fp-test", k=32, s=32, dim=8):
    return {b"reignpipe.gn_fingerprint": fingerprint.encode(), b"reignpipe.k": str(k).encode(),
            b"reignpipe.s": str(s).encode(), b"reignpipe.dim": str(dim).encode()}


def write_shard(path, keys, emb, md):
    dim = emb.shape[1]
    t = pa.table({
        "key": pa.array(keys, pa.uint64()),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1), pa.float32()), dim),
    }).replace_schema_metadata(md)
    pq.write_table(t, path)


def write_sequences(path, docs, md):
    """docs: [(side, doc_id, [keys])]"""
    t = pa.table({
        "doc_id": pa.array([d[1] for d in docs], pa.string()),
        "side": pa.array([d[0] for d in docs], pa.string()),
        "keys": pa.array([list(d[2]) for d in docs], pa.list_(pa.uint64())),
    }).replace_schema_metadata(md)
    pq.write_table(t, path)


def make_dataset(root, n_docs=12, dim=8, seed=0, fingerprint="fp-test"):
    """A cache (two shards) and BEIR qrels: query qI's positive is cI, its partial c(I+1);
    each document is 1-4 chunks near a per-document direction. Returns (shards, sequences, data)."""
    rng = np.random.default_rng(seed)
    md = meta(fingerprint, dim=dim)
    shards = os.path.join(root, "cache", "shards")
    os.makedirs(shards)
    keys, embs, docs, next_key = [], [], [], 1000
    for i in range(n_docs):
        centre = rng.normal(size=dim)
        for side in ("c", "q"):
            n = 1 + (i + (side == "q")) % 4
            ks = []
            for _ in range(n):
                e = centre + 0.5 * rng.normal(size=dim)
                keys.append(next_key)
                embs.append(e / np.linalg.norm(e))
                ks.append(next_key)
                next_key += 7
            docs.append((side, f"{side}{i}", ks))
    embs = np.array(embs, np.float32)
    half = len(keys) // 2
    write_shard(os.path.join(shards, "shard-00000001.parquet"), keys[:half], embs[:half], md)
    write_shard(os.path.join(shards, "shard-00000002.parquet"), keys[half:], embs[half:], md)
    seq = os.path.join(root, "sequences.parquet")
    write_sequences(seq, docs, md)
    data = os.path.join(root, "beir")
    os.makedirs(os.path.join(data, "qrels"))
    splits = {"train": range(0, n_docs // 2), "val": range(n_docs // 2, 3 * n_docs // 4),
              "test": range(3 * n_docs // 4, n_docs)}
    for name, idx in splits.items():
        with open(os.path.join(data, "qrels", name + ".tsv"), "w") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            for i in idx:
                f.write(f"q{i}\tc{i}\t2\nq{i}\tc{(i + 1) % n_docs}\t1\n")
    return shards, seq, data
