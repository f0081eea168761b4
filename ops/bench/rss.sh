#!/usr/bin/env bash
# Peak RSS of one embedded run (`reignpipe run pipelines/jsonl.yaml`) on a synthetic JSONL
# corpus, as /usr/bin/time -v reports it ("Maximum resident set size").
#
#   ops/bench/rss.sh DOCS WORDS_PER_DOC [K] [TOKEN_BUDGET]
#
# K (default: the pipeline's 512) sets chunking.k = chunking.s; TOKEN_BUDGET (default: the
# provider default) sets batching.token_budget. Documents are deterministic word salad over a
# fixed vocabulary of common words (about one WordPiece token per word). REIGNPIPE_BIN picks
# another binary. Prints one line:
# docs, windows, wall s, max RSS MiB, and the Go runtime's share at the end (the rest is C
# memory: ONNX Runtime, Pebble). RSS_LOG=FILE keeps the run's log, whose progress lines carry
# rss_mib / go_mib / go_heap_mib every 10 s. Needs bin/reignpipe (make build) and the fetched GN.
set -euo pipefail
docs=${1:?docs}
words=${2:?words per doc}
k=${3:-}
budget=${4:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/rss-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

python3 - "$docs" "$words" > "$work/corpus.jsonl" <<'EOF'
import json, random, sys
docs, words = int(sys.argv[1]), int(sys.argv[2])
vocab = ("time year people way day man thing woman life child world school state family student "
         "group country problem hand part place case week company system program question work "
         "government number night point home water room mother area money story fact month lot "
         "right study book eye job word business issue side kind head house service friend father "
         "power hour game line end member law car city community name president team minute idea "
         "kid body information back parent face others level office door health person art war "
         "history party result change morning reason research girl guy moment air teacher force "
         "education river mountain music theory patent claim method device signal energy").split()
rng = random.Random(42)
for i in range(docs):
    text = " ".join(rng.choice(vocab) for _ in range(words))
    print(json.dumps({"id": str(i), "title": "doc %d" % i, "text": text}))
EOF

cfg="$work/pipeline.yaml"
cp "$root/pipelines/jsonl.yaml" "$cfg"
if [[ -n "$k" ]]; then
  sed -i "s/^  k: 512$/  k: $k/; s/^  s: 512$/  s: $k/" "$cfg"
fi
if [[ -n "$budget" ]]; then
  printf 'batching:\n  token_budget: %s\n' "$budget" >> "$cfg"
fi

start=$(date +%s.%N)
REIGNPIPE_INPUT="$work/corpus.jsonl" REIGNPIPE_OUT="$work/out" \
  /usr/bin/time -v -o "$work/time.txt" "${REIGNPIPE_BIN:-$root/bin/reignpipe}" run --from-scratch "$cfg" > "$work/run.log" 2>&1 || {
  tail -20 "$work/run.log" >&2
  exit 1
}
end=$(date +%s.%N)
rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
read -r windows go_mib < <(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s.get("windows", "?"), s.get("go_memory_mib", "?"))' "$work/out/summary.json")
if [[ -n "${RSS_LOG:-}" ]]; then cp "$work/run.log" "$RSS_LOG"; fi
printf 'docs=%s words=%s k=%s budget=%s windows=%s wall_s=%.1f max_rss_mib=%.0f go_mib_at_end=%s\n' \
  "$docs" "$words" "${k:-512}" "${budget:-default}" "$windows" "$(echo "$end - $start" | bc)" "$(echo "$rss_kb / 1024" | bc -l)" "$go_mib"
