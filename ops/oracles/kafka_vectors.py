#!/usr/bin/env python3
"""Reads document vectors from a reignpipe vector topic with kafka-python, decoding them from the
description in schemas/WIRE.md alone (no reignpipe code), and prints one JSON line per record.

usage: kafka_vectors.py BROKERS TOPIC COUNT [TIMEOUT_S [FORMAT]]
FORMAT is the sink's format: rpdv (default), json or connect-json. Stops after COUNT records (or
TIMEOUT_S seconds, then exits 1). A JSON record that is not what WIRE.md promises (for
connect-json: the envelope JsonConverter accepts, field by field) ends it with exit 2.
"""
import json
import struct
import sys
import time

from kafka import KafkaConsumer

# The connect-json schema, field by field: name, Connect type, optional.
CONNECT_FIELDS = [
    ("doc_id", "string", False), ("title", "string", False), ("source", "string", False),
    ("version", "string", False), ("content_hash", "string", False), ("n_chunks", "int64", False),
    ("n_tokens", "int64", False), ("space", "string", False), ("vector", "array", False),
    ("gn_space", "string", True), ("gn_vector", "array", True),
]


def f32(x):
    """x as the float32 a reader that parses JSON numbers to float64 gets."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"vector component {x!r} is not a number")
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def check_connect_schema(schema):
    if not isinstance(schema, dict) or schema.get("type") != "struct" or schema.get("optional") is not False \
            or schema.get("name") != "reignpipe.DocVector":
        raise ValueError(f"schema is not the required struct reignpipe.DocVector: {schema!r}")
    fields = schema.get("fields")
    got = [(f.get("field"), f.get("type"), f.get("optional")) for f in fields]
    if got != CONNECT_FIELDS:
        raise ValueError(f"schema fields {got}, want {CONNECT_FIELDS}")
    for f in fields:
        if f["type"] == "array" and f.get("items") != {"type": "float", "optional": False}:
            raise ValueError(f"{f['field']}: items {f.get('items')!r}, want required float (float32)")


def check_connect_payload(p):
    if set(p) != {name for name, _, _ in CONNECT_FIELDS}:
        raise ValueError(f"payload fields {sorted(p)}")
    for name, typ, optional in CONNECT_FIELDS:
        v = p[name]
        if v is None:
            if not optional:
                raise ValueError(f"required field {name} is null")
            continue
        ok = {"string": lambda: isinstance(v, str),
              "int64": lambda: isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63,
              "array": lambda: isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)}[typ]()
        if not ok:
            raise ValueError(f"field {name}: {v!r} is not a Connect {typ}")
    if (p["gn_space"] is None) != (p["gn_vector"] is None):
        raise ValueError("gn_space and gn_vector must be both null or both set")


def decode_json(b, connect):
    d = json.loads(b.decode("utf-8"))
    if connect:
        if not isinstance(d, dict) or set(d) != {"schema", "payload"}:
            raise ValueError("JsonConverter (schemas.enable=true) wants exactly schema and payload")
        check_connect_schema(d["schema"])
        check_connect_payload(d["payload"])
        d = d["payload"]
    elif ("gn_space" in d) != ("gn_vector" in d):
        raise ValueError("gn_space and gn_vector must come together")
    h = d["content_hash"]
    if len(h) != 16 or h != h.lower() or any(c not in "0123456789abcdef" for c in h):
        raise ValueError(f"content_hash {h!r} is not 16 lowercase hex digits")
    return dict(doc_id=d["doc_id"], source=d["source"], version=d["version"], title=d["title"],
                space=d["space"], content_hash=int(h, 16), n_chunks=d["n_chunks"], n_tokens=d["n_tokens"],
                vector=[f32(x) for x in d["vector"]], gn_space=d.get("gn_space") or "",
                gn_vector=[f32(x) for x in d.get("gn_vector") or []])


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
    fmt = sys.argv[5] if len(sys.argv) > 5 else "rpdv"
    decode = {"rpdv": decode_vector, "json": lambda b: decode_json(b, False),
              "connect-json": lambda b: decode_json(b, True)}[fmt]
    c = KafkaConsumer(topic, bootstrap_servers=brokers.split(","), auto_offset_reset="earliest",
                      enable_auto_commit=False, group_id=None, consumer_timeout_ms=1000)
    seen, deadline = 0, time.time() + timeout
    while seen < count and time.time() < deadline:
        for rec in c:
            try:
                out = decode(rec.value)
            except (ValueError, KeyError, TypeError) as e:
                print(f"record {rec.partition}@{rec.offset}: {e}", file=sys.stderr)
                sys.exit(2)
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
