#!/usr/bin/env bash
# Issue 35: FSDP's reshard and backward prefetch chosen per unit by the search, together with the
# activations' plan and host placement, against FSDP's standard settings and every policy, over
# memory budgets. The zoo's GPT at GPT-2 XL's shape (48 layers, 1600 wide, 25 heads, 1.56 B
# parameters), bf16 autocast (fused attention), Adam, batch B x 1024 per GPU, FSDP over 8 H100 80
# GB on NVLink 4 (a FULL_SHARD job, prefetch 1). One row per budget:
#   full-shard, shard-grad-op  the step of FSDP's standard settings (in-core activations), or -
#                              when it does not fit
#   best policy                the fastest `compare` row that fits (every policy under the job's
#                              setting, and the two settings)
#   search                     `memplan search`'s step, its regathered units and their issue
#                              points (how many are issued ahead of their use), and its gap to the lower bound
#   bench/fsdp-search.sh [BUILD_DIR]   BATCH (default 8), SEARCH_TIME_LIMIT seconds (default 20),
#   BUDGETS (GiB, default "80 64 48 40 32")
set -euo pipefail
cd "$(dirname "$0")/.."
memplan=$(realpath "${1:-build/release}")/bin/memplan
batch=${BATCH:-8}
limit=${SEARCH_TIME_LIMIT:-20}
budgets=${BUDGETS:-80 64 48 40 32}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$memplan" zoo gpt --layers 48 --hidden 1600 --heads 25 --seq 1024 --batch "$batch" \
  --device h100-80gb --optimizer adam --precision bf16 --fsdp 8 -o "$work/job.json" --json \
  >"$work/zoo.json"
/usr/bin/python3 -c "import json,sys; z=json.load(open(sys.argv[1])); print(f\"GPT-2 XL shape, bf16, Adam, batch $batch x 1024, {z['data_parallel']}: in-core peak {z['peak_bytes_incore']/2**30:.2f} GiB per rank\")" "$work/zoo.json"
echo
echo "| budget | full-shard | shard-grad-op | best policy | search | regathered units | issued ahead of use | gap to bound |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for gib in $budgets; do
  "$memplan" compare "$work/job.json" --memory "${gib}GiB" --json >"$work/compare.json" || true
  "$memplan" search "$work/job.json" --memory "${gib}GiB" --time-limit "$limit" --threads 2 \
    --json --quiet -o "$work/plan.json" >"$work/search.json" || true
  /usr/bin/python3 - "$gib" "$work" <<'PY'
import json, os, sys
gib, work = sys.argv[1], sys.argv[2]
rows = json.load(open(f"{work}/compare.json"))["rows"]
by = {r["policy"]: r for r in rows}
def ms(r):
    return f"{r['step_s'] * 1e3:.1f} ms" if r and r["feasible"] else "-"
fits = sorted((r for r in rows if r["feasible"]), key=lambda r: r["step_s"])
best = f"{fits[0]['policy']} {fits[0]['step_s'] * 1e3:.1f} ms" if fits else "none fits"
s = json.load(open(f"{work}/search.json"))
search, units, moved, gap = "no plan fits", "-", "-", "-"
if s.get("feasible"):
    search = f"{s['step_s'] * 1e3:.1f} ms"
    if s.get("gap") is not None:
        gap = f"{s['gap'] * 100:.1f}%"
    if os.path.exists(f"{work}/plan.json"):
        plan = json.load(open(f"{work}/plan.json"))
        plans = plan["ranks"] if "ranks" in plan else [plan]
        maps = plans[0]["plan"]["maps"] if "plan" in plans[0] else plans[0]["maps"]
        job = json.load(open(f"{work}/job.json"))
        tensors = job["ranks"][0]["tensors"] if "ranks" in job else job["tensors"]
        names = {t["id"]: t["name"] for t in tensors}
        total = sum(n.endswith("flat_param (gathered)") for n in names.values())
        gathered = [m for m in maps
                    if str(names.get(m["tensor"], m["tensor"])).endswith("flat_param (gathered)")]
        units = f"{sum(m['action'] == 'recompute' for m in gathered)} of {total}"
        moved = str(sum("prefetch_before" in m for m in gathered if m["action"] == "recompute"))
print(f"| {gib} GiB | {ms(by.get('fsdp-full-shard'))} | {ms(by.get('fsdp-shard-grad-op'))} | "
      f"{best} | {search} | {units} | {moved} | {gap} |", flush=True)
PY
done
