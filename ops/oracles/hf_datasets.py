#!/usr/bin/env python3
"""Writes one small benchmark, with Hugging Face `datasets`, in each layout the public
benchmarks ship, so the Go readers are checked against files made by the tool that makes the
real ones (not against files Go wrote itself).

usage: hf_datasets.py SPEC.json OUT_DIR

SPEC.json: {"beir": {"corpus": [{_id,title,text}], "queries": [{_id,text}],
                      "qrels": {split: [{query-id,corpus-id,score}]}},
            "loco": {"documents": [{pid,passage,dataset}], "queries": [{qid,query,answer_pids,dataset}]},
            "dapfam": {"corpus": [...], "queries": [...], "qrels_all": [...]}}

OUT_DIR receives:
  beir-disk/     save_to_disk of the three configs: corpus/, queries/, default/ (DatasetDicts;
                 the layout the REIGN authors' conversions write)
  beir-parquet/  corpus/corpus-00000-of-00001.parquet, queries/queries-00000-of-00001.parquet,
                 qrels/<split>.jsonl (the MTEB Hub layout), scores as float64
  beir-hub/      corpus/corpus-00000-of-00001.parquet, queries/..., data/<split>-00000-of-00001.parquet
                 (where push_to_hub puts a dataset's "default" config, here the qrels)
  beir-export/   corpus/corpus/0000.parquet ... default/<split>/0000.parquet (the Hub's parquet export)
  loco/          LoCoV1-Documents/documents/<subtask>_test.jsonl and LoCoV1-Queries/documents/...
  dapfam/        corpus.parquet, queries.parquet, qrels_all.parquet
"""
import json
import os
import sys

import datasets
from datasets import Dataset, DatasetDict


def main():
    datasets.disable_progress_bars()
    spec = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    b = spec["beir"]
    corpus, queries = Dataset.from_list(b["corpus"]), Dataset.from_list(b["queries"])
    qrels = {s: Dataset.from_list(rows) for s, rows in b["qrels"].items()}

    d = os.path.join(out, "beir-disk")
    DatasetDict({"corpus": corpus}).save_to_disk(os.path.join(d, "corpus"))
    DatasetDict({"queries": queries}).save_to_disk(os.path.join(d, "queries"))
    DatasetDict(qrels).save_to_disk(os.path.join(d, "default"))

    d = os.path.join(out, "beir-parquet")
    for name, ds in (("corpus", corpus), ("queries", queries)):
        os.makedirs(os.path.join(d, name), exist_ok=True)
        ds.to_parquet(os.path.join(d, name, f"{name}-00000-of-00001.parquet"))
    os.makedirs(os.path.join(d, "qrels"), exist_ok=True)
    for s, ds in qrels.items():
        ds.to_json(os.path.join(d, "qrels", f"{s}.jsonl"), lines=True)

    # push_to_hub's file layout: non-default configs in <config>/, the default config in data/.
    d = os.path.join(out, "beir-hub")
    for name, ds in (("corpus", corpus), ("queries", queries)):
        os.makedirs(os.path.join(d, name), exist_ok=True)
        ds.to_parquet(os.path.join(d, name, f"{name}-00000-of-00001.parquet"))
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    for s, ds in qrels.items():
        ds.to_parquet(os.path.join(d, "data", f"{s}-00000-of-00001.parquet"))

    d = os.path.join(out, "beir-export")
    for cfg, split, ds in [("corpus", "corpus", corpus), ("queries", "queries", queries)] + [
        ("default", s, q) for s, q in qrels.items()
    ]:
        os.makedirs(os.path.join(d, cfg, split), exist_ok=True)
        ds.to_parquet(os.path.join(d, cfg, split, "0000.parquet"))

    lo = spec["loco"]
    for repo, rows in (("LoCoV1-Documents", lo["documents"]), ("LoCoV1-Queries", lo["queries"])):
        tasks = sorted({r["dataset"] for r in rows})
        os.makedirs(os.path.join(out, "loco", repo, "documents"), exist_ok=True)
        for t in tasks:
            Dataset.from_list([r for r in rows if r["dataset"] == t]).to_json(
                os.path.join(out, "loco", repo, "documents", f"{t}_test.jsonl"), lines=True
            )

    dp = spec["dapfam"]
    os.makedirs(os.path.join(out, "dapfam"), exist_ok=True)
    for name in ("corpus", "queries", "qrels_all"):
        Dataset.from_list(dp[name]).to_parquet(os.path.join(out, "dapfam", f"{name}.parquet"))


if __name__ == "__main__":
    main()
