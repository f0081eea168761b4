#!/usr/bin/env python3
"""Reads document vectors from a reignpipe vector topic with kafka-python, decoding them from the
layout in schemas/WIRE.md alone (no reignpipe code), and prints one JSON line per record.

usage: kafka_vectors.py BROKERS TOPIC COUNT [TIMEOUT_S]
Stops after COUNT records (or TIMEOUT_S seconds, then exits 1).
"""
import json
import struct
import sys
import time

from kafka import KafkaConsumer


def decode_vector(b):
    if b[:4] != b"RPDV" or b[4] != 1:
        raise ValueError("not an RPDV v1 value")
    off = 5

    def s():
        nonlocal off
        (n,) = struct.unpack_from("<I", b, off)
        off += 4
        v = b[off:off + n].decode("utf-8")
        off += n
        return v

    doc_id, source, version, title, space, gn_space = (s() for _ in range(6))
    content_hash, n_chunks, n_tokens, dim = struct.unpack_from("<QIII", b, off)
    off += 20
    vector = struct.unpack_from(f"<{dim}f", b, off)
    off += 4 * dim
    (gn_dim,) = struct.unpack_from("<I", b, off)
    off += 4
    gn_vector = struct.unpack_from(f"<{gn_dim}f", b, off)
    off += 4 * gn_dim
    if off != len(b):
        raise ValueError(f"{len(b) - off} trailing bytes")
    return dict(doc_id=doc_id, source=source, version=version, title=title, space=space,
                content_hash=content_hash, n_chunks=n_chunks, n_tokens=n_tokens,
                vector=list(vector), gn_space=gn_space, gn_vector=list(gn_vector))


def main():
    brokers, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 60
    c = KafkaConsumer(topic, bootstrap_servers=brokers.split(","), auto_offset_reset="earliest",
                      enable_auto_commit=False, group_id=None, consumer_timeout_ms=1000)
    seen, deadline = 0, time.time() + timeout
    while seen < count and time.time() < deadline:
        for rec in c:
            out = decode_vector(rec.value)
            out["key"] = rec.key.decode("utf-8")
            out["headers"] = {k: (v or b"").decode("utf-8") for k, v in rec.headers}
            print(json.dumps(out), flush=True)
            seen += 1
            if seen >= count:
                break
    c.close()
    sys.exit(0 if seen >= count else 1)


if __name__ == "__main__":
    main()
