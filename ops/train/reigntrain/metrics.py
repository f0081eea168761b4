"""Retrieval and nDCG@k as reignpipe's Go evaluation computes them (pipelines/quality/retrieval), so the
trainer's model selection and `reignpipe eval` score the same thing:
similarity = dot product (float64) of L2-normalised float32 vectors, ties broken by ascending
corpus id, hits whose id equals the query id dropped (self-matches), gain 2^rel - 1, discount
1/log2(rank+1), ideal DCG from the query's full relevance row (ids absent from the corpus
included), negative grades gain 0.
"""
import math

import numpy as np


def ndcg(ranked, rels, k):
    if k <= 0:
        return 0.0
    grades = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    ideal = sum((2.0 ** r - 1) / math.log2(i + 2) for i, r in enumerate(grades))
    if ideal == 0:
        return 0.0
    dcg, seen = 0.0, set()
    for i, d in enumerate(ranked[:k]):
        if d in seen:
            continue
        seen.add(d)
        r = rels.get(d, 0)
        if r > 0:
            dcg += (2.0 ** r - 1) / math.log2(i + 2)
    return dcg / ideal


def top_k(query, corpus, ids, id_rank, k, exclude=None):
    """query [h] float32, corpus [n, h] float32, id_rank[i] the rank of ids[i] in sorted id
    order (the tie-break). Returns the k best corpus ids, best first."""
    scores = corpus.astype(np.float64) @ query.astype(np.float64)
    if exclude is not None:
        scores[[i for i, d in enumerate(ids) if d == exclude]] = -np.inf
    if np.isnan(scores).any():
        raise ValueError("NaN similarity: the model produced a non-finite vector")
    n = len(ids) - (0 if exclude is None else sum(1 for d in ids if d == exclude))
    kk = min(k, n)
    if kk <= 0:
        return []
    # Everything scoring at least the k-th best score, then an exact (score desc, id asc) sort
    # of just those, so ties at the cut are settled the way the Go side settles them.
    kth = np.partition(scores, len(scores) - kk)[len(scores) - kk]
    cand = np.nonzero(scores >= kth)[0]
    order = np.lexsort((id_rank[cand], -scores[cand]))
    return [ids[i] for i in cand[order][:kk]]


def evaluate_split(qvecs, qids, cvecs, cids, qrels, k, drop_self=True):
    """Per-query nDCG@k for the queries (in qids order) whose qrels row holds a relevant
    document (grade >= 1); the others are skipped, as the Go report skips them."""
    rank_of = np.empty(len(cids), np.int64)
    rank_of[np.argsort(np.array(cids, dtype=object), kind="stable")] = np.arange(len(cids))
    out = {}
    for qv, q in zip(qvecs, qids):
        rels = qrels.get(q) or {}
        if not any(r >= 1 for r in rels.values()):
            continue
        hits = top_k(qv, cvecs, cids, rank_of, k, q if drop_self else None)
        out[q] = ndcg(hits, rels, k)
    return out
