#!/usr/bin/env bash
# The retrieval check of `reignpipe search`: for a patent whose claims are the query, is its own
# description among the top k of the pgvector table? It builds the patent-claims benchmark
# (queries = claims, corpus = descriptions, one relevant document per query), scores it with
# `reignpipe eval` (GN mean-pool among the systems: an exact ranking in memory), indexes the
# same corpus through a pipeline with a pgvector sink, asks `reignpipe search --text -` for
# every judged query, HNSW and --exact, and sets recall@k and nDCG@k of both next to eval's
# figures for gn-meanpool, query by query as well.
#
#   ops/bench/searchcheck.sh [WORK_DIR]      (default ${TMPDIR:-/tmp}/reignpipe-searchcheck)
#
# REIGNPIPE_PG_DSN  postgres:// URL of the server (ops/postgres start prints it); the check
#                   works in a database of its own there, DB, created anew and kept afterwards
#                   so its table can be inspected
# DB                that database (default reignpipe_bench_searchcheck)
# REIGNPIPE_BIN     the binary (default bin/reignpipe; make build)
# CORPUS            USPTO directory (default ../shared/data/patents/uspto: the shared real data)
# SPLIT, K          qrels split scored and cutoff (default test, 10), as `reignpipe eval` takes
# MIN_CHARS         benchdata --min-chars (default 0: every patent)
# GN                gn.name (default bge-small-en-v15)
#
# The chunk cache lives in WORK_DIR and is shared by eval, the indexing run and the searches:
# eval embeds every window once, the rest read them from the cache (the output says how many
# windows the GN embedded at each step). Needs python3 and psql.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
work=$(realpath -m "${1:-${TMPDIR:-/tmp}/reignpipe-searchcheck}")
bin=$(realpath -m "${REIGNPIPE_BIN:-bin/reignpipe}")
corpus=$(realpath -m "${CORPUS:-../shared/data/patents/uspto}")
split=${SPLIT:-test}
k=${K:-10}
db=${DB:-reignpipe_bench_searchcheck}
gn=${GN:-bge-small-en-v15}

say() { echo "searchcheck: $*" >&2; }
[ -d "$corpus" ] || { say "the corpus $corpus is absent: this check reads the shared real data (../shared/data, see its README.md) or CORPUS=DIR of USPTO XML"; exit 2; }
[ -n "${REIGNPIPE_PG_DSN:-}" ] || { say "REIGNPIPE_PG_DSN is not set (ops/postgres start prints the DSN; ops/with-postgres sets it)"; exit 2; }
[ -x "$bin" ] || { say "$bin is not built (make build)"; exit 2; }
psql=$(command -v psql || true)
[ -n "$psql" ] || psql="${REIGNPIPE_HOME:-$HOME/.cache/reignpipe}/postgres/15/root/usr/lib/postgresql/15/bin/psql"
[ -x "$psql" ] || { say "no psql (PATH or ops/postgres fetch)"; exit 2; }
command -v python3 >/dev/null || { say "python3 is required"; exit 2; }

# The check's database: the admin URL with the path replaced.
dsn=$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$REIGNPIPE_PG_DSN" "$db")
mkdir -p "$work"
bench="$work/bench"

# Hold the test suite's shared lock on the server (internal/pgtest's file): a test that restarts
# or kills the server takes it exclusively, so it waits for the check instead of breaking it.
lockname=$(python3 -c 'import re, sys, urllib.parse as u; print(re.sub(r"[^A-Za-z0-9._-]", "_", u.urlsplit(sys.argv[1]).netloc.split("@")[-1]))' "$REIGNPIPE_PG_DSN")
exec 9<>"${TMPDIR:-/tmp}/reignpipe-pg-tests-$(id -u)-$lockname.lock"
flock -s 9

echo "## machine"
echo "nproc: $(nproc); $(lscpu | grep 'Model name' | sed 's/  */ /g'); $(free -g | awk '/^Mem:/{print "free -g: total " $2 ", used " $3 ", available " $7}')"
echo "uptime (start): $(uptime)"
echo "binary: $bin"

timed() { local t0; t0=$(date +%s.%N); "$@"; echo "($(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s: $*)" >&2; }

echo "## benchdata"
timed "$bin" benchdata --kind patent-claims --source uspto --input "$corpus" --out "$bench" --min-chars "${MIN_CHARS:-0}" >&2
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print("docs", d.get("docs"), "skipped", d.get("skipped"))' "$bench/benchdata.json"

# One pipeline for eval, indexing and search: the corpus file as a jsonl source named corpus,
# so a corpus document's id in the table is "corpus:" + its BEIR id.
cat >"$work/pipeline.yaml" <<EOF
version: 1
name: searchcheck
source:
  type: jsonl
  path: $bench/corpus.jsonl
  name: corpus
gn:
  name: $gn
  provider: cpu
chunking:
  k: 512
  s: 512
cache:
  dir: $work/cache
sinks:
  - type: pgvector
    dsn: $dsn
    table: searchcheck
    index: hnsw
dead_letter:
  path: $work/deadletter.jsonl
run:
  state_dir: $work/state
  summary: $work/run-summary.json
EOF

echo "## eval"
rm -rf "$work/eval"
# eval prints its encoding runs' summaries before the table: only the table is kept here.
timed "$bin" eval --data "$bench" --split "$split" --k "$k" --out "$work/eval" "$work/pipeline.yaml" | sed -n '/^system /,$p'
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print("eval: corpus", d["corpus"], "queries", d["queries"], "GN windows", d["gn_windows"])' "$work/eval/eval-summary.json"

echo "## index"
"$psql" "$REIGNPIPE_PG_DSN" -X -q -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
"$psql" "$dsn" -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION vector"
rm -rf "$work/state" "$work/run-summary.json" "$work/deadletter.jsonl"
timed "$bin" run "$work/pipeline.yaml" >/dev/null 2>"$work/run.log"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print({k: d.get(k) for k in ("docs_written", "docs_failed", "windows", "gn_windows", "cache_hits")})' "$work/run-summary.json"

echo "## search, every judged query of split $split"
python3 - "$bin" "$work" "$bench" "$split" "$k" <<'EOF'
import json, math, subprocess, sys, time
bin_, work, bench, split, k = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
rel = {}
with open(f"{bench}/qrels/{split}.tsv") as f:
    next(f)
    for line in f:
        q, d, s = line.rstrip("\n").split("\t")
        if int(s) > 0:
            rel.setdefault(q, set()).add(d)
texts = {}
with open(f"{bench}/queries.jsonl") as f:
    for line in f:
        o = json.loads(line)
        texts[o["_id"]] = o["text"]
prefix = "corpus:"  # source.name of the pipeline: the table's ids are corpus:<BEIR id>

def score(hits, relevant):
    # One relevant document of grade 2 per query (benchdata): recall@k is 1 when it is in the
    # top k; nDCG@k = 1/log2(rank+1) for it (the ideal ranking puts it first).
    ids = [h["doc_id"][len(prefix):] if h["doc_id"].startswith(prefix) else "?" + h["doc_id"] for h in hits[:k]]
    r = sum(1 for d in relevant if d in ids) / len(relevant)
    dcg = sum((2**2 - 1) / math.log2(i + 2) for i, d in enumerate(ids) if d in relevant)
    idcg = sum((2**2 - 1) / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return r, dcg / idcg, ids

rows, walls, gnw = {}, {"hnsw": [], "exact": []}, {"hnsw": 0, "exact": 0}
for q in sorted(rel):
    rows[q] = {}
    for mode in ("hnsw", "exact"):
        args = [bin_, "search", "--text", "-", "--format", "json", "--k", str(k), f"{work}/pipeline.yaml"]
        if mode == "exact":
            args.insert(2, "--exact")
        t0 = time.monotonic()
        p = subprocess.run(args, input=texts[q].encode(), capture_output=True)
        walls[mode].append(time.monotonic() - t0)
        if p.returncode != 0:
            sys.exit(f"search failed for {q}: {p.stderr.decode()}")
        res = json.loads(p.stdout)
        if res["exact"] != (mode == "exact"):
            sys.exit(f"{q}: asked for {mode}, the answer says exact={res['exact']}")
        gnw[mode] += res["query"]["gn_windows"]
        rows[q][mode] = score(res["hits"], rel[q])

ev = json.load(open(f"{work}/eval/eval-summary.json"))
mp = next(s for s in ev["systems"] if s["system"] == "gn-meanpool")
per = {}
with open(f"{work}/eval/per-query-gn-meanpool.tsv") as f:
    next(f)
    for line in f:
        c = line.rstrip("\n").split("\t")
        per[c[0]] = (float(c[3]), float(c[1]))  # R@k, nDCG@k
n = len(rows)
def mean(mode, i): return sum(r[mode][i] for r in rows.values()) / n
def med(xs): xs = sorted(xs); return xs[len(xs) // 2]
print(f"\n{n} judged queries of split {split}, k = {k}, corpus {ev['corpus']} descriptions\n")
print(f"| system | recall@{k} | nDCG@{k} | queries whose recall@{k} differs from eval's gn-meanpool | GN windows for the queries | wall s per query, median |")
print("|---|---:|---:|---:|---:|---:|")
print(f"| `reignpipe eval` gn-meanpool (R, nDCG@{k}) | {mp['recall']:.4f} | {mp['ndcg']:.4f} | — | {ev['gn_windows']} (whole eval, corpus and queries) | — |")
for mode, name in (("hnsw", "`reignpipe search --text -` (HNSW)"), ("exact", "`reignpipe search --text - --exact`")):
    diff = sum(1 for q in rows if abs(rows[q][mode][0] - per[q][0]) > 1e-9)
    print(f"| {name} | {mean(mode, 0):.4f} | {mean(mode, 1):.4f} | {diff} | {gnw[mode]} | {med(walls[mode]):.2f} |")
nd = {m: sum(1 for q in rows if abs(rows[q][m][1] - per[q][1]) > 1e-6) for m in ("hnsw", "exact")}
same = sum(1 for q in rows if rows[q]["hnsw"][2] == rows[q]["exact"][2])
print(f"\nQueries whose nDCG@{k} differs from eval's: HNSW {nd['hnsw']}, exact {nd['exact']}. Queries whose HNSW top {k} equals the exact top {k} (same ids, same order): {same} of {n}.")
json.dump({q: {m: {"recall": r[m][0], "ndcg": r[m][1], "ids": r[m][2]} for m in r} for q, r in rows.items()}, open(f"{work}/searchcheck.json", "w"), indent=1)
EOF
echo "uptime (end): $(uptime)"
