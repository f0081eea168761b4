#!/usr/bin/env bash
# Cache-build cost per document for GoodWiki-length documents (the REIGN paper's Table 11 in
# this project's terms): reignpipe run on a fresh chunk cache, ms/doc = wall / docs, for each GN,
# rounds alternating the GN order (the machine is shared: ratios from the same run count).
#
#   ops/bench/docms.sh [DOCS=8] [ROUNDS=2]     # writes out/bench/docms/result.md
set -euo pipefail
cd "$(dirname "$0")/../.."
docs="${1:-8}" rounds="${2:-2}"
dump="${REIGNPIPE_DUMP:-${REIGNPIPE_SHARED_DATA:-../shared/data}/wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2}"
work=out/bench/docms
mkdir -p "$work"
[ -x bin/reignpipe ] || go build -o bin/reignpipe ./cmd/reignpipe
go run ./ops/bench/docms -dump "$dump" -out "$work/corpus.jsonl" -docs "$docs" -tokens 5800 | tee "$work/corpus.txt"
gns=(bge-small-en-v15 all-minilm-l6-v2)
{
  echo "| round | GN | reignpipe run wall (s) | run's own wall (s) | ms/doc (process wall / docs) | CPU s | CPU ms/doc | windows | peak RSS | load avg before |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
} >"$work/result.md"
for r in $(seq 1 "$rounds"); do
  order=("${gns[@]}")
  if [ $((r % 2)) = 0 ]; then order=("${gns[1]}" "${gns[0]}"); fi
  for g in "${order[@]}"; do
    out="$work/run-$g"
    rm -rf "$out"
    sed "s/^  name: bge-small-en-v15/  name: $g/" pipelines/jsonl.yaml >"$work/$g.yaml"
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    REIGNPIPE_INPUT="$work/corpus.jsonl" REIGNPIPE_OUT="$out" \
      /usr/bin/time -f '%e %M %U %S' -o "$work/time" bin/reignpipe run --from-scratch "$work/$g.yaml" >"$work/$g.log" 2>&1
    read -r wall rss usr sys <"$work/time"
    python3 - "$out/summary.json" "$wall" "$rss" "$r" "$g" "$load" "$usr" "$sys" >>"$work/result.md" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); wall, rss = float(sys.argv[2]), int(sys.argv[3])
cpu = float(sys.argv[7]) + float(sys.argv[8]); n = s['docs_written']
print(f"| {sys.argv[4]} | {sys.argv[5]} | {wall:.1f} | {s['wall_seconds']:.1f} | {1000 * wall / n:.0f} | {cpu:.1f} | {1000 * cpu / n:.0f} | {s['gn_windows']} | {rss / 1024 / 1024:.2f} GiB | {sys.argv[6]} |")
PY
  done
done
cat "$work/result.md"
