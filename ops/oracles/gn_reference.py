#!/usr/bin/env python3
"""Reference GN chunk embeddings, for parity tests of stages/gn.

usage: gn_reference.py MODEL.onnx TOKENIZER.json K [S]   (S defaults to K)

Reads JSON lines {"text": ...} on stdin and writes one JSON line per text:
{"windows": [[ids...], ...], "embeddings": [[...], ...]}.

Follows REIGN (docs: shared/reference/REFERENCE-IMPLEMENTATION.md sections 1 and 2) the plain way,
so that it checks the Go code rather than repeats it: tokenize the whole text without special
tokens, truncation or padding; window i holds content tokens [i*(S-2), min(i*(S-2)+K-2, T)),
framed [CLS] ... [SEP]; windows stop at the first that reaches T; empty text gives [CLS][SEP].
Each window runs alone (batch 1, no padding) on the CPU provider; the embedding is the mean of
last_hidden_state over all its tokens, in float64, then L2-normalised.
"""
import json
import sys

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer


def windows(ids, cls, sep, k, s):
    t, step, width = len(ids), s - 2, k - 2
    out, start = [], 0
    while True:
        end = min(start + width, t)
        out.append([cls] + ids[start:end] + [sep])
        if end >= t:
            return out
        start += step


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    model, tok_path, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    s = int(sys.argv[4]) if len(sys.argv) == 5 else k
    if k < 3 or not 3 <= s <= k:
        sys.exit(f"gn_reference: need 3 <= S <= K, got K={k} S={s}")
    tok = Tokenizer.from_file(tok_path)
    # tokenizer.json files often carry truncation/padding for their training use (MiniLM: 128).
    tok.no_truncation()
    tok.no_padding()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    if cls is None or sep is None:
        sys.exit("gn_reference: tokenizer has no [CLS]/[SEP] tokens")

    opts = ort.SessionOptions()
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    in_names = {i.name for i in sess.get_inputs()}
    outs = [o.name for o in sess.get_outputs()]
    out_name = "last_hidden_state" if "last_hidden_state" in outs else \
        next(o.name for o in sess.get_outputs() if len(o.shape) == 3)

    for line in sys.stdin:
        if not line.strip():
            continue
        text = json.loads(line)["text"]
        ids = tok.encode(text, add_special_tokens=False).ids
        ws = windows(ids, cls, sep, k, s)
        embs = []
        for w in ws:
            a = np.asarray([w], dtype=np.int64)
            feed = {"input_ids": a, "attention_mask": np.ones_like(a)}
            if "token_type_ids" in in_names:
                feed["token_type_ids"] = np.zeros_like(a)
            h = sess.run([out_name], feed)[0][0].astype(np.float64)  # [L, D]
            v = h.mean(axis=0)
            v /= np.linalg.norm(v)
            embs.append(v.tolist())
        sys.stdout.write(json.dumps({"windows": ws, "embeddings": embs}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
