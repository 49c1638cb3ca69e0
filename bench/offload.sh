#!/usr/bin/env bash
# The figures of issue 18 (plans over every tensor: Note [Host placement] in core/plan.hpp), one
# command each, printed as they run. Timings, not a test: they depend on this machine and its load
# (docs/simulator.md "Host placement: figures" reports one run).
#   bench/offload.sh [WORK_DIR]        default: a temporary directory, removed at the end
# 1. resnet18 recorded on the host, batch 32, 64x64: every policy at 50% of its in-core peak
#    (`compare`), and the fsdp-offload plan validated on the host backend at that memory (peak
#    bytes against the prediction, gradients and updated weights against in-core).
# 2. AlexNet at batch 6144 on the 16 GB V100 (modeled): compare, then the search.
# 3. A GPT of 1.5 B parameters (GPT-2 XL's shape: 48 layers, hidden 1600, 25 heads, sequence 1024)
#    trained with Adam at batch 1 on the 16 GB V100, whose parameters, gradients and two Adam
#    moments (24.9 GB) exceed the device: every policy, then the search's plan, against in-core
#    on a device large enough to hold the step (64 GiB; its in-core peak is 33.30 GiB).
# Environment: SEARCH_S=90 (seconds for each search).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build/release"
[[ -f "$build/build.ninja" ]] || cmake --preset release -S "$root" >/dev/null
cmake --build "$build" --target memplan >/dev/null
memplan="$build/bin/memplan"
if [[ -n "${1:-}" ]]; then
  work=$1
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
search_s=${SEARCH_S:-90}
peak() { "$memplan" simulate "$1" --policy in-core "${@:2}" --json | /usr/bin/python3 -c \
  'import json,sys; print(json.load(sys.stdin)["peak_bytes"])'; }
run() { echo "\$ memplan ${*}"; "$memplan" "$@"; echo; }

echo "== 1. resnet18 recorded on the host, batch 32, 64x64, at 50% of its in-core peak"
run record --backend host resnet18 --batch 32 --input 64x64 --quiet -o "$work/resnet18.json"
half=$(( $(peak "$work/resnet18.json") / 2 ))
run compare "$work/resnet18.json" --memory "${half}B" --link recorded --quiet
run validate "$work/resnet18.json" --policy fsdp-offload --backend host --memory "${half}B" \
  --link recorded --quiet

echo "== 2. AlexNet, batch 6144, on the 16 GB V100"
run zoo alexnet --batch 6144 --device v100-16gb -o "$work/alexnet.json"
run compare "$work/alexnet.json" --quiet
run search "$work/alexnet.json" --time-limit "$search_s" --quiet -o "$work/alexnet-plan.json" || true

echo "== 3. GPT, 1.5 B parameters, Adam, batch 1, on the 16 GB V100 (in-core on 64 GiB)"
run zoo gpt --layers 48 --hidden 1600 --heads 25 --seq 1024 --vocab 50257 --batch 1 \
  --device v100-16gb --optimizer adam -o "$work/gpt.json"
run info "$work/gpt.json"
run simulate "$work/gpt.json" --policy in-core --memory 64GiB
run compare "$work/gpt.json" --quiet || true
run search "$work/gpt.json" --time-limit "$search_s" --quiet -o "$work/gpt-plan.json"
