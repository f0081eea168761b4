#!/usr/bin/env bash
# The evidence behind `reignpipe tune` (ops/BENCHMARKS.md, "REIGN on real domains"): three
# domains built from Debian's packages, each tuned on its own chunk cache entries and checked on
# the text-level halves benchmark of the same held-out documents, then a general REIGN trained on
# the other domains and scored on each (leave one domain out).
#
#   ops/bench/domains/run.sh [WORK_DIR]    (default ${TMPDIR:-/tmp}/reignpipe-domains)
#
# REIGNPIPE_BIN   the binary (default bin/reignpipe; make build)
# DOMAINS         the domains to run (default "linuxdoc pydoc kjv"; the others' corpora are set
#                 aside before embedding, and one domain alone has no leave-one-out step)
# MAX_DOCS        documents per domain (default 800), of MIN_CHARS..MAX_CHARS characters
#                 (default 2500..16000: two to about eight windows of 512 tokens)
# SEEDS           the general checkpoint's training seeds (default 1,2,3), for small-l2 and base-l3
# LODO_EPOCHS     small-l2's epochs there (default 20), BASE_EPOCHS base-l3's (default 5); the
#                 per-domain tune keeps its default, 50. The best epoch on validation is kept.
#
# Every step is skipped when its output is there, so a run can be resumed. The chunk cache is
# one for all domains (document ids carry the domain: linuxdoc:, pydoc:, kjv:); the GN embeds
# each window once, and tune, the leave-one-out training and the re-scoring read it only.
set -euo pipefail

root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
work=$(realpath -m "${1:-${TMPDIR:-/tmp}/reignpipe-domains}")
bin=$(realpath -m "${REIGNPIPE_BIN:-bin/reignpipe}")
pipeline=ops/bench/domains/domains.yaml
read -ra domains <<<"${DOMAINS:-linuxdoc pydoc kjv}"
mkdir -p "$work/debs"
export REIGNPIPE_INPUT=$work/corpora REIGNPIPE_OUT=$work

step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

step "fetch the Debian packages"
if [ ! -s "$work/debs/kjv.txt" ]; then
	(cd "$work/debs" && apt-get download linux-doc-6.1 python3.11-doc bible-kjv-text bible-kjv)
	for deb in "$work"/debs/*.deb; do
		name=$(basename "$deb"); name=${name%%_*}
		mkdir -p "$work/debs/x/$name" && dpkg-deb -x "$deb" "$work/debs/x/$name"
	done
	"$work/debs/x/bible-kjv/usr/bin/bible" -l 100000 -p "$work/debs/x/bible-kjv-text/usr/lib" "gen1:1-rev22:21" >"$work/debs/kjv.txt"
fi
ls "$work"/debs/*.deb | xargs -n1 basename

step "build the corpora"
go build -o "$work/domains" ./ops/bench/domains
if [ ! -s "$work/corpora/corpora.json" ]; then
	"$work/domains" corpora -out "$work/corpora" -max-docs "${MAX_DOCS:-800}" \
		-min-chars "${MIN_CHARS:-2500}" -max-chars "${MAX_CHARS:-16000}" \
		-linuxdoc "$work/debs/x/linux-doc-6.1/usr/share/doc/linux-doc-6.1/Documentation" \
		-pydoc "$work/debs/x/python3.11-doc/usr/share/doc/python3.11/html/_sources" \
		-bible "$work/debs/kjv.txt"
	mkdir -p "$work/corpora-unused"
	for f in "$work"/corpora/*.jsonl; do
		d=$(basename "$f" .jsonl)
		[[ " ${domains[*]} " == *" $d "* ]] || mv "$f" "$work/corpora-unused/"
	done
fi

step "embed every domain once (the GN's only pass over the documents)"
[ -s "$work/summary.json" ] || "$bin" run "$pipeline"

for d in "${domains[@]}"; do
	step "tune on $d alone"
	[ -s "$work/tune-$d/tune-summary.json" ] ||
		"$bin" tune "$pipeline" --only "$d:" --out "$work/tune-$d" --val-pct 10 --test-pct 20 --seed 42

	step "$d: the text-level halves benchmark of the same held-out documents"
	if [ ! -s "$work/bench-$d/qrels/heldout.tsv" ]; then
		"$work/domains" heldout -summary "$work/tune-$d/tune-summary.json" -corpus "$work/corpora/$d.jsonl" -out "$work/heldout/$d"
		"$bin" benchdata --kind halves --source jsonl --input "$work/heldout/$d/$d.jsonl" --out "$work/bench-$d"
		# benchdata splits its documents; here every one of them is a held-out test query.
		{ printf 'query-id\tcorpus-id\tscore\n'; tail -q -n +2 "$work"/bench-$d/qrels/{train,val,test}.tsv; } >"$work/bench-$d/qrels/heldout.tsv.tmp"
		mv "$work/bench-$d/qrels/heldout.tsv.tmp" "$work/bench-$d/qrels/heldout.tsv"
	fi
	[ -s "$work/eval-$d-tuned/eval-summary.json" ] ||
		"$bin" eval --data "$work/bench-$d" --split heldout --checkpoint "$work/tune-$d/train/best" --out "$work/eval-$d-tuned" "$pipeline"
done

if [ "${#domains[@]}" -lt 2 ]; then
	step "table (one domain: no leave-one-out)"
	"$work/domains" table -work "$work" | tee "$work/table.md"
	exit 0
fi

step "the general checkpoint: leave one domain out"
# small-l2 first, every fold; base-l3 costs ~25x more per epoch on this CPU, so it gets fewer
# epochs (its validation peaked by epoch 2-3 in a trial).
list=$(IFS=,; echo "${domains[*]}")
"$work/domains" lodo -pipeline "$pipeline" -out "$work/lodo" -domains "$list" -sizes small-l2 -seeds "${SEEDS:-1,2,3}" -epochs "${LODO_EPOCHS:-20}"
"$work/domains" lodo -pipeline "$pipeline" -out "$work/lodo" -domains "$list" -sizes base-l3 -seeds "${SEEDS:-1,2,3}" -epochs "${BASE_EPOCHS:-5}"
for d in "${domains[@]}"; do
	for ck in "$work"/lodo/$d/*/train/best; do
		run=$(basename "$(dirname "$(dirname "$ck")")")
		[ -s "$work/eval-$d-general-$run/eval-summary.json" ] ||
			"$bin" eval --data "$work/bench-$d" --split heldout --checkpoint "$ck" --out "$work/eval-$d-general-$run" "$pipeline"
	done
done

step "table"
"$work/domains" table -work "$work" | tee "$work/table.md"
