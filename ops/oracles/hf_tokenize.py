#!/usr/bin/env python3
"""Hugging Face `tokenizers` oracle for stages/wordpiece.

Usage: hf_tokenize.py TOKENIZER_JSON [ids|words] < texts.jsonl > out.jsonl

Each input line is {"text": ...}; each output line, in the same order, is
  ids   (default): {"ids": [...]}   content ids, encode(text, add_special_tokens=False)
  words:           {"words": [...]} the pre-tokens after normaliser and pre-tokenizer
                                     (used to check the Unicode handling code point by code point)
Truncation and padding are switched off: some tokenizer.json files (e.g. all-MiniLM-L6-v2's)
enable them, and the Go side returns every content token.
"""

import json
import sys

from tokenizers import Tokenizer

BATCH = 512


def main() -> int:
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] not in ("ids", "words")):
        print(__doc__, file=sys.stderr)
        return 2
    mode = sys.argv[2] if len(sys.argv) == 3 else "ids"
    tok = Tokenizer.from_file(sys.argv[1])
    tok.no_truncation()
    tok.no_padding()
    out = sys.stdout

    def flush(batch):
        if mode == "ids":
            for enc in tok.encode_batch(batch, add_special_tokens=False):
                out.write(json.dumps({"ids": enc.ids}))
                out.write("\n")
        else:
            for text in batch:
                normalized = tok.normalizer.normalize_str(text)
                words = [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(normalized)]
                out.write(json.dumps({"words": words}))
                out.write("\n")

    batch = []
    for line in sys.stdin:
        batch.append(json.loads(line)["text"])
        if len(batch) >= BATCH:
            flush(batch)
            batch = []
    if batch:
        flush(batch)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
