#!/usr/bin/env python3
"""Independent reader for reignpipe Parquet files (cache shards and vector parts).

Reads one file with pyarrow AND with DuckDB and prints one JSON object:

  {"pyarrow": {"num_rows", "schema": {col: type string}, "nullable": {col: bool},
               "metadata": {key: value}, "null_counts": {col: n}, "item_null_counts": {col: n},
               "columns": {col: [values]}},
   "duckdb":  {"num_rows", "types": {col: type string}, "metadata": {key: value},
               "null_counts": {col: n}, "item_null_counts": {col: n}, "columns": {col: [values]}}}

Float lists (embeddings, vectors) are printed as lists of the IEEE-754 binary32 bit patterns
(unsigned ints), so a Go test can demand bit-identical values; JSON floats could not promise
that. uint64 columns are printed as exact JSON integers.

Usage: read_parquet.py FILE.parquet
"""

import json
import struct
import sys

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def float_bits(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32).tolist()


def is_float_list(t):
    return (pa.types.is_fixed_size_list(t) or pa.types.is_list(t)) and pa.types.is_float32(t.value_type)


def read_pyarrow(path):
    pf = pq.ParquetFile(path)
    table = pf.read()
    kv = pf.metadata.metadata or {}
    out = {
        "num_rows": table.num_rows,
        "schema": {f.name: str(f.type) for f in table.schema},
        "nullable": {f.name: f.nullable for f in table.schema},
        "metadata": {k.decode(): v.decode() for k, v in kv.items() if k != b"ARROW:schema"},
        "null_counts": {},
        "item_null_counts": {},
        "columns": {},
    }
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        out["null_counts"][name] = col.null_count
        if is_float_list(col.type):
            flat = col.flatten()
            out["item_null_counts"][name] = flat.null_count
            rows = []
            for i in range(len(col)):
                item = col[i].values
                rows.append(float_bits(item.to_numpy(zero_copy_only=False)))
            out["columns"][name] = rows
        else:
            out["columns"][name] = col.to_pylist()
    return out


def f32_bits_of_double(x):
    # DuckDB hands FLOAT values to Python as doubles; float32 -> double is exact, so packing
    # back to binary32 recovers the stored bits.
    return struct.unpack("<I", struct.pack("<f", x))[0]


def read_duckdb(path):
    con = duckdb.connect()
    rel = con.execute("SELECT * FROM read_parquet(?)", [path])
    names = [d[0] for d in rel.description]
    rows = rel.fetchall()
    types = {r[0]: r[1] for r in con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [path]).fetchall()}
    kv = {}
    for key, value in con.execute("SELECT key, value FROM parquet_kv_metadata(?)", [path]).fetchall():
        key = key.decode() if isinstance(key, (bytes, bytearray)) else str(key)
        if key == "ARROW:schema":
            continue
        kv[key] = value.decode() if isinstance(value, (bytes, bytearray)) else str(value)
    out = {"num_rows": len(rows), "types": types, "metadata": kv, "null_counts": {},
           "item_null_counts": {}, "columns": {}}
    for i, name in enumerate(names):
        vals = [r[i] for r in rows]
        out["null_counts"][name] = sum(v is None for v in vals)
        if types[name].startswith("FLOAT[") or types[name] == "FLOAT[]":
            out["item_null_counts"][name] = sum(x is None for v in vals if v is not None for x in v)
            out["columns"][name] = [None if v is None else [f32_bits_of_double(x) for x in v] for v in vals]
        else:
            out["columns"][name] = vals
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    path = sys.argv[1]
    json.dump({"pyarrow": read_pyarrow(path), "duckdb": read_duckdb(path)}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
