#!/usr/bin/env python3
"""Reads a reignpipe vector topic with kafka-python as compaction leaves it: the last record of
every key, a key whose last record has a null value (a deletion's tombstone, schemas/WIRE.md
"Deletions") dropped. Decodes from the description in schemas/WIRE.md alone (kafka_vectors.py's
decoders) and prints one JSON line per live key, sorted by key:
{"key", "doc_id", "version", "content_hash", "space"}.

usage: kafka_live_set.py BROKERS TOPIC [FORMAT [TIMEOUT_S]]
FORMAT is the sink's format: rpdv (default), json or connect-json. Reads every partition up to
the end offsets it finds at the start (or TIMEOUT_S seconds, then exits 1). A record whose value
is empty rather than null (not a tombstone: compaction would keep it), or that does not decode,
or whose key is not its doc_id, ends it with exit 2.
"""
import json
import sys
import time

from kafka import KafkaConsumer, TopicPartition

from kafka_vectors import decode_json, decode_vector


def main():
    brokers, topic = sys.argv[1], sys.argv[2]
    fmt = sys.argv[3] if len(sys.argv) > 3 else "rpdv"
    timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 60
    decode = {"rpdv": decode_vector, "json": lambda b: decode_json(b, False),
              "connect-json": lambda b: decode_json(b, True)}[fmt]
    c = KafkaConsumer(bootstrap_servers=brokers.split(","), enable_auto_commit=False, group_id=None)
    parts = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
    if not parts:
        print(f"topic {topic} has no partitions", file=sys.stderr)
        sys.exit(1)
    c.assign(parts)
    c.seek_to_beginning(*parts)
    end = c.end_offsets(parts)
    live, records, tombstones = {}, 0, 0
    deadline = time.time() + timeout
    while any(c.position(tp) < end[tp] for tp in parts):
        if time.time() > deadline:
            print(f"timed out at {[(tp.partition, c.position(tp), end[tp]) for tp in parts]}", file=sys.stderr)
            sys.exit(1)
        for tp, recs in c.poll(timeout_ms=500).items():
            for rec in recs:
                if rec.offset >= end[tp]:
                    continue
                records += 1
                key = rec.key.decode("utf-8")
                if rec.value is None:
                    tombstones += 1
                    live.pop(key, None)
                    continue
                try:
                    if rec.value == b"":
                        raise ValueError("an empty value is not a tombstone")
                    v = decode(rec.value)
                    if v["doc_id"] != key:
                        raise ValueError(f"doc_id {v['doc_id']!r} is not the key")
                except (ValueError, KeyError, TypeError) as e:
                    print(f"record {rec.partition}@{rec.offset} ({key}): {e}", file=sys.stderr)
                    sys.exit(2)
                live[key] = dict(key=key, doc_id=v["doc_id"], version=v["version"],
                                 content_hash=v["content_hash"], space=v["space"])
    c.close()
    for key in sorted(live):
        print(json.dumps(live[key]))
    print(f"{records} records, {tombstones} tombstones, {len(live)} live keys", file=sys.stderr)


if __name__ == "__main__":
    main()
