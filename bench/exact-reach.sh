#!/usr/bin/env bash
# Issue 39's "exact mode: the largest step it solves to optimality in 60 s": `memplan search
# --exact --time-limit 60 --threads 2` on real steps of growing feature-map counts, each at a few
# budgets, one row each: the maps, whether the result is proven
# optimal and in how long, the tree's counts (nodes explored; subtrees cut by memory, by the time
# bound, by the lower bound of search/bound/, solved by their bounding plan) and the plan's gap to
# that lower bound. The largest map count with a proven row is the answer. A budget of f keeps
# at most f of the feature-map bytes on the device: the in-core peak less (1 - f) of them, as in
# bench/optimality-gap.sh.
# Steps: AlexNet b64, a one-layer LLaMA and GPT
# (hidden 256, 4 heads, sequence 256, batch 4, vocabulary 1024: no logits that dwarf the rest)
# and the two-layer GPT, on the zoo's V100 16 GB.
#   bench/exact-reach.sh [BUILD_DIR]   (default build/release)
#   EXACT_TIME_LIMIT=seconds (default 60), EXACT_THREADS (default 2), EXACT_BUDGETS="0.9 0.75
#   0.5", EXACT_CASES="alexnet llama1 gpt1 gpt2" pick a subset.
# Runtime: at most the limit a row (rows that are proven end sooner).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
memplan=$build/bin/memplan
limit=${EXACT_TIME_LIMIT:-60}
threads=${EXACT_THREADS:-2}
budgets=${EXACT_BUDGETS:-0.9 0.75 0.5}
cases=${EXACT_CASES:-alexnet llama1 gpt1 gpt2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

small_decoder=(--hidden 256 --heads 4 --seq 256 --batch 4 --vocab 1024 --device v100-16gb)
trace_of() {  # the case's trace file
  local out="$work/$1.json"
  case $1 in
    alexnet) "$memplan" zoo alexnet --batch 64 --device v100-16gb -o "$out" >/dev/null ;;
    llama1) "$memplan" zoo llama --layers 1 "${small_decoder[@]}" -o "$out" >/dev/null ;;
    gpt1) "$memplan" zoo gpt --layers 1 "${small_decoder[@]}" -o "$out" >/dev/null ;;
    gpt2) "$memplan" zoo gpt --layers 2 "${small_decoder[@]}" -o "$out" >/dev/null ;;
    *) echo "exact-reach: unknown case '$1'" >&2; exit 2 ;;
  esac
  echo "$out"
}

echo "| case | maps | budget | memory | proven | exact s | explored | cut by memory | by time | by bound | solved by bound | gap to bound |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for c in $cases; do
  trace=$(trace_of "$c")
  "$memplan" info "$trace" --json >"$work/info.json"
  maps=$(/usr/bin/python3 -c "import json; print(json.load(open('$work/info.json'))['feature_maps'])")
  for f in $budgets; do
    memory=$(/usr/bin/python3 -c "import json; j = json.load(open('$work/info.json'));
print(int(j['peak_bytes_incore'] - (1 - $f) * j['feature_map_bytes']))")
    status=0  # 1: no plan fits (a result), 2: refused
    "$memplan" search "$trace" --exact --memory "${memory}B" --time-limit "$limit" \
      --threads "$threads" --json --quiet >"$work/exact.json" 2>"$work/err.txt" || status=$?
    /usr/bin/python3 - "$c" "$maps" "$f" "$memory" "$status" "$work" <<'PY'
import json, sys
case, maps, f, memory, status, work = sys.argv[1:7]
head = f"| {case} | {maps} | {float(f):.0%} | {int(memory) / 2**20:,.2f} MiB |"
if status not in ("0", "1"):
    err = open(f"{work}/err.txt").read().strip().splitlines()
    print(f"{head} exit {status}: {err[-1] if err else ''} |||||||")
    sys.exit(0)
j = json.load(open(f"{work}/exact.json"))
if not j["feasible"]:
    print(f"{head} {'no plan fits' if j['optimal'] else 'none found'} | {j['search_s']:.1f} |||||||")
    sys.exit(0)
gap = "-" if j.get("gap") is None else f"{100 * j['gap']:.2f}%"
print(f"{head} {'yes' if j['optimal'] else 'no'} | {j['search_s']:.1f} | {j['explored']:,} | "
      f"{j['pruned_memory']:,} | {j['pruned_time']:,} | {j['pruned_lower_bound']:,} | "
      f"{j['solved_by_bound']:,} | {gap} |")
PY
  done
done
