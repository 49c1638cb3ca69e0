#!/usr/bin/env bash
# Issue 37's side by side: the search's plan against the best of today's policies (full-ac,
# selective-ac, selective-ac-layer, megatron-selective, budget-partitioner, offload-activations,
# zero-offload, fsdp-offload: docs/policy-papers.md) at the same byte budget, on the same step and
# simulated device. A budget of f keeps at most f of the in-core feature-map bytes on the device:
# the in-core peak less (1 - f) of them (memplan info --json). One row per workload and budget:
# the best of today's policies that fits (its step), the search's step, and their ratio (goal:
# <= 0.97 wherever one of today's fits; fitting where none does).
#   bench/today-vs-search.sh [BUILD_DIR]   (default build/release)
#   SEARCH_TIME_LIMIT=seconds (default 20), SEARCH_THREADS (default 2),
#   TODAY_BUDGETS="0.9 0.7 0.5 0.3",
#   TODAY_CASES="gpt2 llama vit-b resnet50 imported-resnet50 imported-gpt2".
# Runtime: about 30 s a row (the search's limit, compare, reading the trace).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
memplan=$build/bin/memplan
limit=${SEARCH_TIME_LIMIT:-20}
threads=${SEARCH_THREADS:-2}
budgets=${TODAY_BUDGETS:-0.9 0.7 0.5 0.3}
cases=${TODAY_CASES:-gpt2 llama vit-b resnet50 imported-resnet50 imported-gpt2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

trace_of() {  # the case's trace file
  case $1 in
    gpt2) "$memplan" zoo gpt --layers 12 --hidden 768 --heads 12 --seq 1024 --batch 4 \
      --device a100-40gb --optimizer adam -o "$work/$1.json" >/dev/null ;;
    llama) "$memplan" zoo llama --layers 8 --hidden 1024 --heads 16 --seq 1024 --batch 4 \
      --device a100-40gb --optimizer adam -o "$work/$1.json" >/dev/null ;;
    vit-b) "$memplan" zoo vit_b16 --batch 64 --device a100-40gb --optimizer adam \
      -o "$work/$1.json" >/dev/null ;;
    resnet50) "$memplan" zoo resnet50 --batch 128 --device v100-16gb -o "$work/$1.json" >/dev/null ;;
    imported-resnet50) cp traces/resnet50_b32_v100.json "$work/$1.json" ;;
    imported-gpt2) "$memplan" import kineto traces/kineto-h100/gpt2.pt.trace.json.gz \
      -o "$work/$1.json" >/dev/null ;;
    *) echo "today-vs-search: unknown case '$1'" >&2; exit 2 ;;
  esac
  echo "$work/$1.json"
}

echo "| case | budget | memory | best of today's (step) | search | search / best |"
echo "| --- | --- | --- | --- | --- | --- |"
for c in $cases; do
  trace=$(trace_of "$c")
  "$memplan" info "$trace" --json >"$work/info.json"
  for f in $budgets; do
    memory=$(/usr/bin/python3 -c "import json; j = json.load(open('$work/info.json'));
print(int(j['peak_bytes_incore'] - (1 - $f) * j['feature_map_bytes']))")
    "$memplan" compare "$trace" --memory "${memory}B" --json >"$work/compare.json" || true
    "$memplan" search "$trace" --memory "${memory}B" --time-limit "$limit" --threads "$threads" \
      --json --quiet >"$work/search.json" || true
    /usr/bin/python3 - "$c" "$f" "$memory" "$work" <<'PY'
import json, sys
case, f, memory, work = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
today = {"full-ac", "selective-ac", "selective-ac-layer", "megatron-selective",
         "budget-partitioner", "offload-activations", "zero-offload", "fsdp-offload"}
rows = [r for r in json.load(open(f"{work}/compare.json"))["rows"] if r["policy"] in today]
fits = sorted((r for r in rows if r["feasible"]), key=lambda r: r["step_s"])
s = json.load(open(f"{work}/search.json"))
best = f"{fits[0]['policy']} {fits[0]['step_s'] * 1e3:.1f} ms" if fits else "none fits"
search = f"{s['step_s'] * 1e3:.1f} ms" if s["feasible"] else "no plan fits"
ratio = (f"{s['step_s'] / fits[0]['step_s']:.3f}" if fits and s["feasible"]
         else "fits where none does" if s["feasible"] else "-")
print(f"| {case} | {f:.0%} | {memory / 2**30:.2f} GiB | {best} | {search} | {ratio} |")
PY
  done
done
