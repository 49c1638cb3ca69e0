#!/usr/bin/env bash
# How far a job's plans are from the best possible (search/bound/job_bound.hpp): for each real job
# of several ranks and each budget, `memplan search JOB --time-limit 20 --threads 2 --json` and
# `memplan compare JOB --json`, one row with the job in core back to back, the job's lower bound
# back to back (what a job's rows are ranked by; alone beside it), the search's answer and the
# best policy of compare, each with its gap (step / bound - 1), and what sets the bound.
# Jobs: the four MI300X ranks of ../shared/data/kineto-multirank's merged DDP file, DLRM's ranks
# 0 and 1 of its 8-rank V100 job (same folder), and the two gloo ranks of the FSDP2 step in
# traces/fsdp-cpu; a budget is a share of each rank's in-core peak (`--memory 70%`).
#   bench/job-optimality-gap.sh [BUILD_DIR]   (default build/release)
#   SEARCH_TIME_LIMIT=seconds (default 20), SEARCH_THREADS (default 2),
#   JOB_BUDGETS="90% 70% 50%", JOB_CASES="mi300x dlrm fsdp-cpu" pick a subset.
# Runtime: about 25 s a row (the search's limit, each rank's bound, compare).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
memplan=$build/bin/memplan
limit=${SEARCH_TIME_LIMIT:-20}
threads=${SEARCH_THREADS:-2}
budgets=${JOB_BUDGETS:-90% 70% 50%}
cases=${JOB_CASES:-mi300x dlrm fsdp-cpu}
shared=../shared/data/kineto-multirank
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

job_of() {  # the case's job file
  case $1 in
    mi300x) "$memplan" import kineto "$shared/mi300x_resnet_ddp_4ranks_merged.json.gz" \
      -o "$work/$1.json" --quiet >/dev/null ;;
    dlrm) "$memplan" import kineto "$shared/dlrm_v100_ddp_rank0.pt.trace.json.gz" \
      "$shared/dlrm_v100_ddp_rank1.pt.trace.json.gz" -o "$work/$1.json" --quiet >/dev/null ;;
    fsdp-cpu) "$memplan" import kineto traces/fsdp-cpu/rank0.json.gz traces/fsdp-cpu/rank1.json.gz \
      -o "$work/$1.json" --quiet >/dev/null ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
  esac
  echo "$work/$1.json"
}

echo "| job | ranks | budget | in core | bound | bound alone | set by | search | gap | best policy | gap | search s |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for c in $cases; do
  if [[ $c != fsdp-cpu && ! -d $shared ]]; then
    echo "| $c | $shared is not present: skipped |"
    continue
  fi
  job=$(job_of "$c")
  for b in $budgets; do
    status=0
    "$memplan" search "$job" --memory "$b" --time-limit "$limit" --threads "$threads" --json \
      --quiet >"$work/search.json" 2>"$work/search.err" || status=$?
    "$memplan" compare "$job" --memory "$b" --json >"$work/compare.json" 2>/dev/null || true
    python3 - "$c" "$b" "$status" "$work" <<'EOF'
import json, sys
case, budget, status, work = sys.argv[1:]
ms = lambda s: "-" if s is None else f"{s * 1e3:.3f} ms"
pct = lambda g: "-" if g is None else f"{g * 100:.1f}%"
if status not in ("0", "1"):
    print(f"| {case} | | {budget} | {open(work + '/search.err').read().strip()} |")
    sys.exit()
s = json.load(open(f"{work}/search.json"))
c = json.load(open(f"{work}/compare.json"))
rows = [r for r in c["rows"] if r["feasible"]]
best = min(rows, key=lambda r: r["step_s"]) if rows else None
setter = "-" if s["lower_bound_s"] is None else \
    "in core" if s["lower_bound_rank"] is None else f"rank {s['lower_bound_rank']}"
print(f"| {case} | {len(s['ranks'])} | {budget} | {ms(s['ideal_s'])} | {ms(s['period_lower_bound_s'])} "
      f"| {ms(s['lower_bound_s'])} | {setter} | {ms(s['step_s'] if s['feasible'] else None)} "
      f"| {pct(s['gap'])} | {best['policy'] + ' ' + ms(best['step_s']) if best else 'none fits'} "
      f"| {pct(best['gap'] if best else None)} | {s['search_s']:.1f} |")
EOF
  done
done
