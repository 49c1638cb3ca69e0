#!/usr/bin/env bash
# How far the simulator's iteration time is from the host backend's, over zoo networks recorded on
# this host and several plans: for each network, `memplan record --backend host`, then for each
# plan `memplan validate --backend host --json` (the trace's recorded costs), and the median
# |predicted - measured| / predicted over every run. Timings, not a test: the figure depends on the
# machine and its load (docs/runtime.md reports one run).
#   bench/validation-error.sh [OUT.tsv]        default build/release/validation-error.tsv
# Environment: CALIBRATE=1 predicts with costs re-measured by `validate --calibrate` (per-op
# medians of five in-core runs and the measured link) instead of the recorded trace's;
# NETWORKS="resnet18 --batch 4 --input 32x32;..." replaces the default list; ITERATIONS=K records
# op times as medians over K iterations (5).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build/release"
out=${1:-$build/validation-error.tsv}
[[ -f "$build/build.ninja" ]] || cmake --preset release -S "$root" >/dev/null
cmake --build "$build" --target memplan >/dev/null
memplan="$build/bin/memplan"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

networks=(
  "resnet18 --batch 4 --input 32x32"
  "resnet18 --batch 16 --input 32x32"
  "mobilenet_v2 --batch 16 --input 64x64"
  "densenet121 --batch 4 --input 64x64"
  "gpt --batch 4 --layers 2 --hidden 64 --heads 4 --seq 32 --vocab 256"
)
if [[ -n "${NETWORKS:-}" ]]; then IFS=';' read -r -a networks <<<"$NETWORKS"; fi
calibrate=()
[[ "${CALIBRATE:-0}" == 1 ]] && calibrate=(--calibrate)
printf 'network\tplan\tmemory_bytes\tpredicted_s\tmeasured_s\terror_percent\tgradients_match\n' >"$out"
for net in "${networks[@]}"; do
  name=$(echo "$net" | tr -s ' -' '_')
  trace="$work/$name.json"
  # shellcheck disable=SC2086
  "$memplan" record --backend host $net --iterations "${ITERATIONS:-5}" -o "$trace"
  peak=$("$memplan" info "$trace" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["peak_bytes_incore"])')
  # Basic policies get room (twice the in-core peak: swap-all can fragment past the peak); searched
  # plans get the memory they were searched for.
  roomy=$((2 * peak))
  runs=("in-core:--policy in-core:$roomy" "swap-all:--policy swap-all:$roomy"
        "recompute-all:--policy recompute-all:$roomy")
  for frac in 0.7 0.85; do
    memory=$(python3 -c "print(int($peak * $frac))")
    plan="$work/$name.$frac.plan.json"
    if "$memplan" search "$trace" --memory "${memory}B" --time-limit 2 -o "$plan" --json |
      python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["feasible"] else 1)'; then
      runs+=("search@$frac:--plan $plan:$memory")
    fi
  done
  for run in "${runs[@]}"; do
    IFS=: read -r label flags memory <<<"$run"
    # shellcheck disable=SC2086
    if ! "$memplan" validate "$trace" $flags --memory "${memory}B" --backend host --json "${calibrate[@]}" \
      >"$work/v.json"; then
      echo "validation-error: $net $label: validate failed (see above)" >&2
      continue
    fi
    python3 -c 'import json,sys
j = json.load(open(sys.argv[4]))
print("\t".join(map(str, [sys.argv[1], sys.argv[2], sys.argv[3], j["iteration_s_predicted"],
      j["iteration_s_measured"], round(j["iteration_error_percent"], 2), j["gradients_match"]])))' \
        "$net" "$label" "$memory" "$work/v.json" >>"$out"
  done
done
column -t -s $'\t' "$out"
python3 - "$out" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
errors = [abs(float(r["error_percent"])) for r in rows]
print(f"median |error| {statistics.median(errors):.1f}% over {len(errors)} runs "
      f"(max {max(errors):.1f}%); gradients match in "
      f"{sum(r['gradients_match'] == 'True' for r in rows)} of {len(rows)}")
PY
