#!/usr/bin/env bash
# GN throughput on an NVIDIA GPU, in one prepared run: windows/s of the GN alone on pre-cut
# windows (ops/bench: raw ONNX Runtime, longest first, per batch size) against end to end
# (bin/reignpipe run --from-scratch, fresh cache), and the hours each would take for English
# Wikipedia (~9M windows at K = S = 512). It has never been run here: the development machines
# have no GPU, so the README's GPU figures stay "unmeasured" until someone runs this.
#
#   ops/bench/gpu.sh                      # device 0, bge-small-en-v15, the demo sample
#   REIGNPIPE_GPU=1 REIGNPIPE_GN=all-minilm-l6-v2 REIGNPIPE_DUMP=dump.xml.bz2 ops/bench/gpu.sh
#
# Needs: an NVIDIA GPU with its driver; the GPU build of ONNX Runtime (ops/fetch --gpu, done
# here when missing; Maven Central must be reachable then); CUDA 12 and cuDNN 9 libraries where
# the loader finds them -- REIGNPIPE_CUDA_LIBS (colon-separated folders) is put in front of
# LD_LIBRARY_PATH, e.g. the lib folders of pip's nvidia-cublas-cu12, nvidia-cuda-runtime-cu12,
# nvidia-cufft-cu12, nvidia-curand-cu12 and nvidia-cudnn-cu12. Exit codes: 0 measured, 3 no GPU,
# 4 GPU but CUDA libraries missing, 1 anything else.
set -euo pipefail
cd "$(dirname "$0")/../.."

device="${REIGNPIPE_GPU:-0}"
gn="${REIGNPIPE_GN:-bge-small-en-v15}"
docs="${REIGNPIPE_DOCS:-60}"
wiki_windows=9000000
home="${REIGNPIPE_HOME:-$HOME/.cache/reignpipe}"
dump="${REIGNPIPE_DUMP:-}"
if [ -z "$dump" ]; then
  for d in "${REIGNPIPE_SHARED_DATA:-../shared/data}/wikipedia" out/demo; do
    f="$d/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    if [ -f "$f" ]; then dump="$f"; break; fi
  done
fi

say() { echo "ops/bench/gpu.sh: $*" >&2; }

# 1. A GPU, or a clear stop: nothing below means anything on CPU.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  say "no NVIDIA GPU here (nvidia-smi not found): the GN on CUDA stays unmeasured; run this on a machine with an NVIDIA GPU and its driver"
  exit 3
fi
if ! gpus=$(nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1) || [ -z "$gpus" ]; then
  say "nvidia-smi lists no usable GPU ($gpus): the GN on CUDA stays unmeasured"
  exit 3
fi
if ! grep -q "^$device," <<<"$gpus"; then
  say "no GPU with index $device (REIGNPIPE_GPU); this machine has: $gpus"
  exit 3
fi
if [ -z "$dump" ] || [ ! -f "$dump" ]; then
  say "no Wikipedia dump: set REIGNPIPE_DUMP (or run make demo, which downloads the sample)"
  exit 1
fi

# 2. The GPU build and the CUDA libraries its provider links against.
if ! ls "$home"/ort-gpu/*/libonnxruntime_providers_cuda.so >/dev/null 2>&1; then
  say "fetching the GPU build of ONNX Runtime (ops/fetch --gpu)"
  ops/fetch --gpu >/dev/null
fi
if [ -n "${REIGNPIPE_CUDA_LIBS:-}" ]; then
  export LD_LIBRARY_PATH="$REIGNPIPE_CUDA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
provider_lib=$(ls "$home"/ort-gpu/*/libonnxruntime_providers_cuda.so | tail -n 1)
missing=$(ldd "$provider_lib" | awk '/not found/ {print $1}' | tr '\n' ' ')
if [ -n "$missing" ]; then
  say "GPU found, but the CUDA provider cannot load: missing $missing(CUDA 12 and cuDNN 9); point REIGNPIPE_CUDA_LIBS at the folders that hold them"
  exit 4
fi

[ -x bin/reignpipe ] || go build -o bin/reignpipe ./cmd/reignpipe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "GPU: $(grep "^$device," <<<"$gpus")"
echo "GN: $gn, K = S = 512, input: $dump (first $docs articles)"

# 3. The GN alone: raw ONNX Runtime on pre-cut windows, and ops/bench's own pipeline run.
go run ./ops/bench -provider "cuda:$device" -gn "$gn" -dump "$dump" -docs "$docs" \
  -batches 16,32,64,128 -out "$tmp/raw.json" >/dev/null

# 4. End to end: reignpipe run with the pipeline's defaults for cuda (stages/gn/gnbatch),
# mean-pool aggregation so no REIGN checkpoint is needed.
sed -e "s/^  provider: cpu.*/  provider: cuda:$device/" -e "s/^  name: bge-small-en-v15/  name: $gn/" \
  -e '/^aggregate:/,/^sinks:/{/^aggregate:/!{/^sinks:/!d}}' -e 's/^aggregate:/aggregate:\n  type: meanpool/' \
  pipelines/wikipedia.yaml >"$tmp/gpu.yaml"
REIGNPIPE_OUT="$tmp/out" REIGNPIPE_DUMP="$dump" bin/reignpipe run --from-scratch "$tmp/gpu.yaml" >"$tmp/run.log" 2>&1 ||
  { say "reignpipe run failed:"; tail -n 20 "$tmp/run.log" >&2; exit 1; }

python3 - "$tmp/raw.json" "$tmp/out/summary.json" "$wiki_windows" <<'EOF'
import json, sys
raw, run, wiki = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
e2e = run["gn_windows"] / run["wall_seconds"]
rows = [
    (f"GN alone (raw ORT, batch {raw['raw_ort_best_batch']}, {raw['windows']} windows)", raw["raw_ort_best_windows_per_s"]),
    (f"ops/bench pipeline ({raw['docs']} docs)", raw["pipeline_windows_per_s"]),
    (f"reignpipe run end to end ({run['docs_written']} docs, {run['gn_windows']} windows, {run['wall_seconds']:.1f} s)", e2e),
]
print(f"{'what':<75} {'windows/s':>10} {'enwiki hours':>13}")
for name, wps in rows:
    print(f"{name:<75} {wps:>10.1f} {wiki / wps / 3600:>13.2f}")
print(f"end to end / GN alone: {e2e / raw['raw_ort_best_windows_per_s']:.2f}; raw by batch: {raw['raw_ort_windows_per_s_by_batch']}")
print(f"English Wikipedia taken as {wiki:,} windows; the sample's windows are shorter on average than a full dump's, so hours are a lower bound")
EOF
