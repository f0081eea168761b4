"""Inputs of the trainer: reignpipe's chunk-embedding shards, the sequences index exported by
`reignpipe train`, and BEIR qrels.

Shards (stages/shardcache): <cache>/shards/shard-NNNNNNNN.parquet, columns key uint64 and
embedding fixed_size_list<float>[dim], key-value metadata reignpipe.{gn_fingerprint,k,s,dim}.
Sequences index: columns doc_id utf8, side utf8 ("c" corpus, "q" queries), keys list<uint64>
(the document's window keys in order), same metadata.
"""
import gzip
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SHARD_NAME = re.compile(r"^shard-\d{8,}\.parquet$")
META_KEYS = ("gn_fingerprint", "k", "s", "dim")


class DataError(ValueError):
    """Input that the trainer refuses, with a message meant for the user."""


def _space(path, metadata):
    md = metadata or {}
    out = {}
    for k in META_KEYS:
        v = md.get(("reignpipe." + k).encode())
        if v is None:
            raise DataError(f"{path}: metadata reignpipe.{k} is missing (not written by reignpipe?)")
        out[k] = v.decode()
    for k in ("k", "s", "dim"):
        try:
            out[k] = int(out[k])
        except ValueError:
            raise DataError(f"{path}: metadata reignpipe.{k}={out[k]!r} is not an integer") from None
        if out[k] <= 0:
            raise DataError(f"{path}: metadata reignpipe.{k}={out[k]} must be positive")
    return out


def read_sequences(path):
    """Returns (space, docs): docs is a list of (side, doc_id, keys uint64 array) in file order."""
    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"sequences index {path}: {e}") from None
    space = _space(path, pf.schema_arrow.metadata)
    names = set(pf.schema_arrow.names)
    for col in ("doc_id", "side", "keys"):
        if col not in names:
            raise DataError(f"sequences index {path}: column {col!r} is missing")
    t = pf.read(columns=["doc_id", "side", "keys"])
    ids = t.column("doc_id").to_pylist()
    sides = t.column("side").to_pylist()
    keys = t.column("keys").combine_chunks()
    if not pa.types.is_list(keys.type) or not pa.types.is_uint64(keys.type.value_type):
        raise DataError(f"sequences index {path}: keys is {keys.type}, want list<uint64>")
    if keys.null_count:
        raise DataError(f"sequences index {path}: {keys.null_count} rows have null keys")
    lengths = keys.value_lengths().to_numpy(zero_copy_only=False)
    flat = keys.flatten().to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    docs, seen = [], set()
    for i, (doc_id, side) in enumerate(zip(ids, sides)):
        if not doc_id:
            raise DataError(f"sequences index {path}: row {i} has an empty doc_id")
        if side not in ("c", "q"):
            raise DataError(f"sequences index {path}: row {i} ({doc_id!r}) has side {side!r}, want 'c' or 'q'")
        if (side, doc_id) in seen:
            raise DataError(f"sequences index {path}: document {side}:{doc_id} appears twice")
        seen.add((side, doc_id))
        if lengths[i] == 0:
            raise DataError(f"sequences index {path}: document {side}:{doc_id} has no window keys")
        docs.append((side, doc_id, flat[offsets[i]:offsets[i + 1]]))
    return space, docs


def read_shards(shards_dir, needed):
    """Reads the embeddings of the `needed` keys (sorted unique uint64 array) from every shard.

    Returns (space, keys, table): keys sorted uint64 [R], table float32 [R, dim]. A key present
    in several shards is taken once: the cache keys a window by its content, so every copy holds
    the same embedding. Every shard must belong to one space (GN fingerprint, K, S, dim)."""
    try:
        names = sorted(n for n in os.listdir(shards_dir) if SHARD_NAME.match(n))
    except OSError as e:
        raise DataError(f"shards: {e}") from None
    if not names:
        raise DataError(f"shards: no shard-*.parquet under {shards_dir}")
    space, got_keys, got_rows = None, [], []
    for name in names:
        path = os.path.join(shards_dir, name)
        try:
            pf = pq.ParquetFile(path)
        except (OSError, pa.ArrowException) as e:
            raise DataError(f"shard {path}: {e}") from None
        sp = _space(path, pf.schema_arrow.metadata)
        if space is None:
            space = sp
        elif sp != space:
            raise DataError(f"shard {path} is in space {sp}, earlier shards in {space}: one cache, one GN space")
        keys = pf.read(columns=["key"]).column("key").to_numpy().astype(np.uint64, copy=False)
        want = np.isin(keys, needed)
        if not want.any():
            continue
        emb = pf.read(columns=["embedding"]).column("embedding").combine_chunks()
        if not pa.types.is_fixed_size_list(emb.type) or emb.type.list_size != space["dim"]:
            raise DataError(f"shard {path}: embedding is {emb.type}, want fixed_size_list<float>[{space['dim']}]")
        if emb.null_count:
            raise DataError(f"shard {path}: {emb.null_count} null embeddings")
        mat = emb.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(-1, space["dim"])
        got_keys.append(keys[want])
        got_rows.append(mat[want])
    if not got_keys:
        raise DataError(f"shards under {shards_dir} hold none of the {len(needed)} window keys the index names")
    keys = np.concatenate(got_keys)
    rows = np.concatenate(got_rows)
    keys, first = np.unique(keys, return_index=True)
    return space, keys, np.ascontiguousarray(rows[first])


def read_qrels(data_dir, split):
    """BEIR qrels/<split>.tsv (or .tsv.gz), parsed as reignpipe's Go loader does: optional
    "query-id" header, three tab-separated fields, integer (or integral float) scores, blank
    lines skipped, duplicates refused. Returns {query_id: {corpus_id: score}} or None when the
    split has no file."""
    path = os.path.join(data_dir, "qrels", split + ".tsv")
    opener = open
    if not os.path.exists(path):
        if not os.path.exists(path + ".gz"):
            return None
        path, opener = path + ".gz", gzip.open
    qrels = {}
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        first = True
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            header, first = first and line.startswith("query-id"), False
            if header:
                continue
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) != 3:
                raise DataError(f"{path}:{n}: want 3 tab-separated fields, got {len(fields)}")
            q, d = fields[0].strip(), fields[1].strip()
            if not q or not d:
                raise DataError(f"{path}:{n}: empty query or corpus id")
            score = _score(fields[2].strip(), path, n)
            row = qrels.setdefault(q, {})
            if d in row:
                raise DataError(f"{path}:{n}: duplicate qrel ({q!r}, {d!r})")
            row[d] = score
    return qrels


def _score(s, path, n):
    try:
        return int(s)
    except ValueError:
        pass
    try:
        x = float(s)
    except ValueError:
        x = float("nan")
    if not (abs(x) <= 1e9 and x == int(x)):
        raise DataError(f"{path}:{n}: score {s!r} is not an integer")
    return int(x)


class ChunkStore:
    """Every document's chunk embeddings as rows of one table, row 0 being the zero padding row,
    so a batch is one gather: table[index] with index [B, N_max]."""

    def __init__(self, sequences_path, shards_dir):
        self.space, docs = read_sequences(sequences_path)
        needed = np.unique(np.concatenate([k for _, _, k in docs]))
        shard_space, keys, table = read_shards(shards_dir, needed)
        if shard_space != self.space:
            raise DataError(f"the sequences index is in space {self.space}, the shards in {shard_space}")
        missing = needed[~np.isin(needed, keys)]
        self.rows = {}
        self.ids = {"c": [], "q": []}
        if len(missing):
            bad = set(missing.tolist())
            for side, doc_id, k in docs:
                hit = next((i for i, x in enumerate(k.tolist()) if x in bad), None)
                if hit is not None:
                    raise DataError(f"document {side}:{doc_id} window {hit} (key {k[hit]}) is in no shard under "
                                    f"{shards_dir} ({len(missing)} keys missing in all)")
        for side, doc_id, k in docs:
            self.rows[(side, doc_id)] = np.searchsorted(keys, k).astype(np.int64) + 1
            self.ids[side].append(doc_id)
        self.table = np.concatenate([np.zeros((1, table.shape[1]), np.float32), table])
        self.dim = table.shape[1]

    def n_chunks(self, side, doc_id):
        return len(self.rows[(side, doc_id)])


def pad_rows(seqs):
    """[row-index arrays] -> (index [B, N_max] int64 with 0 = padding, mask [B, N_max] float32)."""
    n = max(len(s) for s in seqs)
    index = np.zeros((len(seqs), n), np.int64)
    mask = np.zeros((len(seqs), n), np.float32)
    for i, s in enumerate(seqs):
        index[i, :len(s)] = s
        mask[i, :len(s)] = 1
    return index, mask
