"""python -m reigntrain: train REIGN over cached chunk embeddings.

Labelled data (BEIR layout, REFERENCE section 8): anchors are the queries of qrels/train.tsv;
a query's documents scored >= --positive-min-score (default 2) are its positives, those scored
1..below it its partials. Each positive makes one training example.

--self-supervised (unlabelled corpora): two views of one document are a positive pair. A view
is a random contiguous crop of the document's chunk-embedding sequence, at least half of it
long, redrawn every epoch; the two views of a pair differ. REIGN has to map any large part of a
long document near the rest of it, which is what retrieving long documents by long documents
asks of it. Documents of one chunk give no second view and are not used as anchors (REIGN's
operating regime starts at two chunks anyway, paper section 4.1); they stay in the retrieval
pool. Without labelled validation data, a held-out tenth of the multi-chunk documents is
validated by retrieving each whole document from a fixed crop of it.

Objective (section 6): per batch of --batch-size anchors (18), each anchor's positive (s=1),
up to --partials distractors (s=0, sampled per epoch when there are more), and the other
anchors' positives as negatives (s=-1); three-way cosine loss with lambda 0.5, or --loss
infonce --tau 0.07 over the in-batch positives. AdamW (lr 1e-5, weight decay 1e-4 on every
parameter), cosine annealing per step to zero, fp32 throughout (the paper trained in 16-bit
mixed precision; fp32 keeps runs reproducible and the checkpoint exactly what is evaluated).

Outputs under --out: best/ and last/ (config.json, model.safetensors, reignpipe-manifest.json),
train-log.jsonl (one line per epoch), eval-trainer.json (per-query nDCG@k of the best
checkpoint on the validation and test splits, computed as `reignpipe eval` computes it).
"""
import argparse
import copy
import json
import math
import os
import sys
import time

import numpy as np

from . import data as D
from . import metrics as M

LOSSES = ("cosine3", "infonce")


def parse_args(argv):
    from .model import SIZES

    ap = argparse.ArgumentParser(prog="python -m reigntrain", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True, help="the cache's shards directory (<cache dir>/shards)")
    ap.add_argument("--sequences", required=True, help="sequences index Parquet (doc_id, side, keys)")
    ap.add_argument("--data", help="BEIR directory whose qrels/ hold the train, validation and test splits")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--size", default="small-l2", choices=sorted(SIZES))
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=18)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--loss", default="cosine3", choices=LOSSES)
    ap.add_argument("--lam", type=float, default=0.5, help="partial weight lambda of the cosine loss")
    ap.add_argument("--tau", type=float, default=0.07, help="InfoNCE temperature")
    ap.add_argument("--partials", type=int, default=2, help="distractors per anchor and epoch")
    ap.add_argument("--positive-min-score", type=int, default=2,
                    help="qrels score from which a document is a positive (1 for binary qrels)")
    ap.add_argument("--train-split", default="train")
    ap.add_argument("--val-split", default="val", help='validation split; "none" keeps the last epoch as best')
    ap.add_argument("--test-split", default="test", help='reported with the best checkpoint if present; "none" to skip')
    ap.add_argument("--val-every", type=int, default=1, help="validate every N epochs (and after the last)")
    ap.add_argument("--k", type=int, default=10, help="nDCG cutoff")
    ap.add_argument("--keep-self", action="store_true", help="do not drop hits whose id is the query id (LoCo)")
    ap.add_argument("--self-supervised", action="store_true", help="pairs from crops of corpus documents")
    ap.add_argument("--holdout", type=float, default=0.1,
                    help="self-supervised: share of multi-chunk documents held out for validation")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--gn-name", default="", help="recorded in reignpipe-manifest.json")
    ap.add_argument("--expect-fingerprint", default="", help="refuse shards of any other GN fingerprint")
    a = ap.parse_args(argv)
    checks = [
        (a.epochs >= 1, "--epochs must be >= 1"),
        (a.batch_size >= 1, "--batch-size must be >= 1"),
        (a.lr > 0, "--lr must be positive"),
        (a.weight_decay >= 0, "--weight-decay must be >= 0"),
        (0 <= a.lam <= 1, "--lam must be in [0, 1]"),
        (a.tau > 0, "--tau must be positive"),
        (a.partials >= 0, "--partials must be >= 0"),
        (a.positive_min_score >= 1, "--positive-min-score must be >= 1"),
        (a.val_every >= 1, "--val-every must be >= 1"),
        (a.k >= 1, "--k must be >= 1"),
        (0 < a.holdout < 1, "--holdout must be in (0, 1)"),
        (a.threads >= 0, "--threads must be >= 0"),
        (a.self_supervised or a.data, "--data is required unless --self-supervised"),
    ]
    for ok, msg in checks:
        if not ok:
            ap.error(msg)
    return a


def setup_torch(a):
    # cuBLAS is deterministic only with a fixed workspace; this must be set before CUDA starts.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise D.DataError("--device cuda: torch sees no CUDA device")
    use_cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        dev = torch.device("cuda")
        print(f"reigntrain: device cuda ({torch.cuda.get_device_name(0)})", flush=True)
    else:
        dev = torch.device("cpu")
        print(f"reigntrain: device cpu ({torch.get_num_threads()} threads)", flush=True)
    return torch, dev


class Example:
    """One anchor with its positive; `related` are the document keys that must not be its
    negatives (its positive and everything the qrels call relevant to it)."""
    __slots__ = ("anchor", "positive", "partials", "pos_key", "related")

    def __init__(self, anchor, positive, partials, pos_key, related):
        self.anchor, self.positive, self.partials = anchor, positive, partials
        self.pos_key, self.related = pos_key, related


def labelled_examples(store, qrels, min_pos):
    corpus = set(store.ids["c"])
    out, no_query, no_doc = [], 0, 0
    for q, rels in qrels.items():
        if ("q", q) not in store.rows:
            no_query += 1
            continue
        related = frozenset(d for d, r in rels.items() if r >= 1)
        partials = [d for d, r in sorted(rels.items()) if 1 <= r < min_pos and d in corpus]
        for d, r in sorted(rels.items()):
            if r < min_pos:
                continue
            if d not in corpus:
                no_doc += 1
                continue
            out.append(Example(store.rows[("q", q)], store.rows[("c", d)],
                               [store.rows[("c", p)] for p in partials], d, related))
    return out, no_query, no_doc


def crop(rng, rows, avoid=None):
    """A random contiguous crop of at least half the sequence, other than `avoid` (start, len)."""
    n = len(rows)
    for _ in range(16):
        length = int(rng.integers((n + 1) // 2, n + 1))
        start = int(rng.integers(0, n - length + 1))
        if (start, length) != avoid:
            return start, length
    # n >= 2 always has another span: the first half-or-more window differs from the whole.
    return (0, n - 1) if avoid != (0, n - 1) else (1, n - 1)


def selfsup_examples(store, doc_ids, rng):
    out = []
    for d in doc_ids:
        rows = store.rows[("c", d)]
        a = crop(rng, rows)
        p = crop(rng, rows, avoid=a)
        out.append(Example(rows[a[0]:a[0] + a[1]], rows[p[0]:p[0] + p[1]], [], d, frozenset((d,))))
    return out


def encode(torch, model, store, seqs, dev, batch=256):
    """Vectors (float32 numpy, input order) of row-index sequences, model in eval mode, sorted
    by length so padding stays small."""
    model.eval()
    table = store.table_t
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    out = np.zeros((len(seqs), model.hidden), np.float32)
    with torch.no_grad():
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            index, mask = D.pad_rows([seqs[i] for i in idx])
            v = model(table[torch.from_numpy(index).to(dev)], torch.from_numpy(mask).to(dev))
            out[idx] = v.float().cpu().numpy()
    return out


class Validator:
    """Scores a model on one split the way `reignpipe eval` does: every corpus document is the
    retrieval pool, queries are the split's queries present in the index."""

    def __init__(self, name, store, queries, qrels, k, drop_self):
        self.name, self.store, self.qrels, self.k, self.drop_self = name, store, qrels, k, drop_self
        self.qids = [q for q, _ in queries]
        self.qseqs = [s for _, s in queries]
        self.cids = list(store.ids["c"])
        self.cseqs = [store.rows[("c", d)] for d in self.cids]
        self.n = sum(1 for q in self.qids if any(r >= 1 for r in (qrels.get(q) or {}).values()))

    def run(self, torch, model, dev):
        cv = encode(torch, model, self.store, self.cseqs, dev)
        qv = encode(torch, model, self.store, self.qseqs, dev)
        per_query = M.evaluate_split(qv, self.qids, cv, self.cids, self.qrels, self.k, self.drop_self)
        mean = sum(per_query.values()) / len(per_query) if per_query else 0.0
        return mean, per_query


def split_validator(name, store, data_dir, split, k, drop_self):
    qrels = D.read_qrels(data_dir, split) if data_dir and split != "none" else None
    if qrels is None:
        return None
    queries = [(q, store.rows[("q", q)]) for q in store.ids["q"]]
    v = Validator(name, store, queries, qrels, k, drop_self)
    if v.n == 0:
        raise D.DataError(f"split {split}: none of its queries with a relevant document is in the sequences index")
    return v


def selfsup_validator(store, held, seed, k):
    rng = np.random.default_rng([seed, 1])
    queries, qrels = [], {}
    for d in held:
        rows = store.rows[("c", d)]
        length = (len(rows) + 1) // 2
        start = int(rng.integers(0, len(rows) - length + 1))
        queries.append(("crop:" + d, rows[start:start + length]))
        qrels["crop:" + d] = {d: 1}
    return Validator("selfsup-val", store, queries, qrels, k, drop_self=False)


def run(a):
    torch, dev = setup_torch(a)
    from .model import REIGN, count_parameters, save_checkpoint
    from .objectives import cosine3_batch, infonce_batch

    t0 = time.time()
    store = D.ChunkStore(a.sequences, a.shards)
    sp = store.space
    if a.expect_fingerprint and sp["gn_fingerprint"] != a.expect_fingerprint:
        raise D.DataError(f"the shards hold GN fingerprint {sp['gn_fingerprint']}, expected {a.expect_fingerprint}")
    store.table_t = torch.from_numpy(store.table).to(dev)
    print(f"reigntrain: {len(store.ids['c'])} corpus and {len(store.ids['q'])} query sequences, "
          f"{len(store.table) - 1} chunk embeddings of dim {store.dim} read in {time.time() - t0:.1f}s", flush=True)

    rng = np.random.default_rng(a.seed)
    drop_self = not a.keep_self
    val = split_validator("val", store, a.data, a.val_split, a.k, drop_self)
    if val is None and a.val_split == "val" and a.data:
        val = split_validator("dev", store, a.data, "dev", a.k, drop_self)
    test = split_validator("test", store, a.data, a.test_split, a.k, drop_self) if a.test_split != "none" else None

    if a.self_supervised:
        multi = [d for d in store.ids["c"] if store.n_chunks("c", d) >= 2]
        if len(multi) < 2:
            raise D.DataError(f"--self-supervised needs at least 2 corpus documents of 2+ chunks, found {len(multi)}")
        train_docs = list(multi)
        if val is None and a.val_split != "none":
            perm = np.random.default_rng([a.seed, 2]).permutation(len(multi))
            n_held = max(1, round(a.holdout * len(multi)))
            held = sorted(multi[i] for i in perm[:n_held])
            train_docs = [d for d in multi if d not in set(held)]
            val = selfsup_validator(store, held, a.seed, a.k)
        print(f"reigntrain: self-supervised on {len(train_docs)} multi-chunk documents "
              f"({len(store.ids['c']) - len(multi)} single-chunk ones not used as anchors)", flush=True)

        def epoch_examples():
            return selfsup_examples(store, train_docs, rng)
        n_examples = len(train_docs)
    else:
        qrels = D.read_qrels(a.data, a.train_split)
        if qrels is None:
            raise D.DataError(f"{a.data}/qrels/{a.train_split}.tsv not found (use --self-supervised for unlabelled corpora)")
        examples, no_query, no_doc = labelled_examples(store, qrels, a.positive_min_score)
        if no_query or no_doc:
            print(f"reigntrain: warning: {no_query} train queries and {no_doc} positives are not in the sequences index",
                  file=sys.stderr, flush=True)
        if not examples:
            raise D.DataError(f"no training pair: no {a.train_split} query has a document scored >= "
                              f"{a.positive_min_score} (binary qrels need --positive-min-score 1)")
        print(f"reigntrain: {len(examples)} training pairs from {a.train_split} "
              f"({sum(len(e.partials) for e in examples)} partials)", flush=True)

        def epoch_examples():
            return examples
        n_examples = len(examples)
    if val is None and a.val_split != "none":
        raise D.DataError(f"no validation split: {a.data}/qrels/{a.val_split}.tsv (or dev.tsv) not found; "
                          "pass --val-split NAME, or --val-split none to keep the last epoch")

    model = REIGN(a.size, store.dim).to(dev)
    print(f"reigntrain: REIGN {a.size}, {count_parameters(model) / 1e6:.2f}M parameters, gn_dim {store.dim}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    steps_per_epoch = math.ceil(n_examples / a.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.epochs * steps_per_epoch)
    manifest = {"gn_name": a.gn_name, "gn_fingerprint": sp["gn_fingerprint"], "gn_dim": store.dim, "k": sp["k"], "s": sp["s"]}
    if not manifest["gn_name"]:
        del manifest["gn_name"]
    os.makedirs(a.out, exist_ok=True)
    log_path = os.path.join(a.out, "train-log.jsonl")
    log = open(log_path, "w")
    best_score, best_epoch, best_state = -1.0, 0, None
    table = store.table_t

    for epoch in range(1, a.epochs + 1):
        model.train()
        t_epoch = time.time()
        exs = epoch_examples()
        perm = rng.permutation(len(exs))
        total, n_pairs, n_anchor = 0.0, 0, 0
        for s in range(0, len(perm), a.batch_size):
            batch = [exs[i] for i in perm[s:s + a.batch_size]]
            b = len(batch)
            parts, owner = [], []
            for i, e in enumerate(batch):
                chosen = e.partials
                if len(chosen) > a.partials:
                    chosen = [chosen[j] for j in sorted(rng.choice(len(chosen), a.partials, replace=False))]
                parts.extend(chosen)
                owner.extend([i] * len(chosen))
            if a.loss == "infonce":
                parts, owner = [], []
            seqs = [e.anchor for e in batch] + [e.positive for e in batch] + parts
            index, mask = D.pad_rows(seqs)
            vecs = model(table[torch.from_numpy(index).to(dev)], torch.from_numpy(mask).to(dev))
            anchors, positives, partials = vecs[:b], vecs[b:2 * b], vecs[2 * b:]
            neg = np.zeros((b, b), bool)
            for i, ei in enumerate(batch):
                for j, ej in enumerate(batch):
                    neg[i, j] = i != j and ej.pos_key != ei.pos_key and ej.pos_key not in ei.related
            neg_t = torch.from_numpy(neg).to(dev)
            if a.loss == "cosine3":
                owner_t = torch.tensor(owner, dtype=torch.long, device=dev)
                loss, pairs = cosine3_batch(anchors, positives, partials, owner_t, neg_t, a.lam)
            else:
                loss, pairs = infonce_batch(anchors, positives, neg_t, a.tau)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"epoch {epoch}: loss is {loss.item()}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * b
            n_anchor += b
            n_pairs += pairs
        train_s = time.time() - t_epoch
        rec = {"epoch": epoch, "loss": total / max(n_anchor, 1), "lr": sched.get_last_lr()[0],
               "examples": n_anchor, "pairs": n_pairs, "train_seconds": round(train_s, 4),
               "examples_per_s": round(n_anchor / train_s, 2) if train_s > 0 else None}
        validate = val is not None and (epoch % a.val_every == 0 or epoch == a.epochs)
        if validate:
            score, _ = val.run(torch, model, dev)
            rec[f"val_ndcg@{a.k}"] = score
            if score > best_score:
                best_score, best_epoch = score, epoch
                best_state = copy.deepcopy(model.state_dict())
                save_checkpoint(model, os.path.join(a.out, "best"), sp["k"], sp["s"], manifest)
        else:
            rec[f"val_ndcg@{a.k}"] = None
        rec["wall_seconds"] = round(time.time() - t_epoch, 4)
        log.write(json.dumps(rec) + "\n")
        log.flush()
        v = rec[f"val_ndcg@{a.k}"]
        print(f"reigntrain: epoch {epoch}/{a.epochs} loss {rec['loss']:.5f} "
              f"val nDCG@{a.k} {'-' if v is None else f'{v:.4f}'} {rec['wall_seconds']:.2f}s "
              f"{rec['examples_per_s']} ex/s", flush=True)
    log.close()
    save_checkpoint(model, os.path.join(a.out, "last"), sp["k"], sp["s"], manifest)
    if best_state is None:  # --val-split none: the last epoch is the best one known
        best_epoch = a.epochs
        save_checkpoint(model, os.path.join(a.out, "best"), sp["k"], sp["s"], manifest)
    else:
        model.load_state_dict(best_state)

    report = {"k": a.k, "self_match_removed": drop_self, "checkpoint": "best", "best_epoch": best_epoch,
              "size": a.size, "loss": a.loss, "seed": a.seed, "splits": {}}
    for v in (val, test):
        if v is None:
            continue
        mean, per_query = v.run(torch, model, dev)
        report["splits"][v.name] = {f"ndcg@{a.k}": mean, "queries": len(per_query), "per_query": per_query}
        print(f"reigntrain: best checkpoint (epoch {best_epoch}) {v.name} nDCG@{a.k} {mean:.4f} over {len(per_query)} queries",
              flush=True)
    tmp = os.path.join(a.out, ".eval-trainer.json.tmp")
    with open(tmp, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    os.replace(tmp, os.path.join(a.out, "eval-trainer.json"))
    return 0


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(a)
    except (D.DataError, FloatingPointError) as e:
        print(f"reigntrain: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("reigntrain: interrupted", file=sys.stderr)
        return 130
