#!/usr/bin/env bash
# The imported ResNet-50 step (traces/resnet50_b32_v100.json, batch 32 on a V100, 2.90 GiB in-core)
# under a 2 GiB budget on PCIe 3 and NVLink 2: every policy of `memplan compare`, plus vdnn-conv's
# classification with each swapped map fetched at the lowering's default point (one op before its
# first backward use, where PoocH's and Capuchin's plans fetch) instead of vDNN's prefetch walk:
# the row "vdnn-conv-default-prefetch". Table: docs/reproductions.md, docs/kineto-import.md.
# kineto-stalls.csv: the stalls by cause of pooch, vdnn-conv, capuchin and checkpoint-sqrt.
#   scripts/reproduce-kineto.sh [OUT.csv]   (default out/reproductions/kineto.csv; seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/reproductions/kineto.csv}
source scripts/reproduce-common.sh
repro_begin "$out"
trace=traces/resnet50_b32_v100.json
for link in pcie3 nvlink2; do
  repro_run "$out" "$trace" resnet50-kineto 32 v100 "$link" 2GiB all 0
  "$MEMPLAN" simulate "$trace" --memory 2GiB --link "$link" --policy vdnn-conv \
    --plan-out "$REPRO_TMP/vdnn-conv.plan" >/dev/null
  /usr/bin/python3 - "$REPRO_TMP/vdnn-conv.plan" "$REPRO_TMP/default-prefetch.plan" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
for d in plan["maps"]:
    d.pop("prefetch_before", None)
plan["policy"] = "vdnn-conv-default-prefetch"
json.dump(plan, open(sys.argv[2], "w"))
PY
  cp "$REPRO_TMP/default-prefetch.plan" "$REPRO_TMP/plan-vdnn-conv-default-prefetch.json"
  repro_run "$out" "$trace" resnet50-kineto 32 v100 "$link" 2GiB \
    "plan:$REPRO_TMP/plan-vdnn-conv-default-prefetch.json" 0
done
# Capuchin's swaps on PCIe 3: their bytes against the forward pass that must hide the copy-outs.
"$MEMPLAN" simulate "$trace" --memory 2GiB --link pcie3 --policy capuchin \
  --plan-out "$REPRO_TMP/capuchin.plan" >/dev/null
"$MEMPLAN" info "$trace" --json >"$REPRO_TMP/info.json"
/usr/bin/python3 - "$trace" "$REPRO_TMP/capuchin.plan" "$REPRO_TMP/info.json" \
  >"$(dirname "$out")/kineto-capuchin.csv" <<'PY'
import json, sys
trace, plan, info = (json.load(open(a)) for a in sys.argv[1:4])
size = {t["name"]: t["bytes"] for t in trace["tensors"]}
swapped = [d["tensor"] for d in plan["maps"] if d["action"] == "swap"]
print("swapped_maps,swapped_bytes,forward_s,backward_s")
print(f"{len(swapped)},{sum(size[m] for m in swapped)},{info['compute_s']['forward']},"
      f"{info['compute_s']['backward']}")
PY
# Where the time of the compared policies goes: stalls by cause (kineto-stalls.csv).
stalls=$(dirname "$out")/kineto-stalls.csv
# host_busy_s: the host's dispatch of the step; step_s: the step back to back.
echo "link,policy,swap_out_stall_s,swap_in_stall_s,recompute_s,swap,recompute,host_busy_s,step_s,gpu_idle_share,instructions" >"$stalls"
for link in pcie3 nvlink2; do
  for policy in pooch vdnn-conv capuchin checkpoint-sqrt; do
    "$MEMPLAN" simulate "$trace" --memory 2GiB --link "$link" --policy "$policy" --json |
      /usr/bin/python3 -c "
import json, sys
j = json.load(sys.stdin)
s, a = j['stall_s_by_cause'], j['actions']
print(f\"$link,$policy,{s['swap-out']},{s['swap-in']},{s['recompute']},{a['swap']},{a['recompute']},\"
      f\"{j['host_busy_s']},{j['step_s']},{j['gpu_idle_share']},{j['instructions']}\")" \
      >>"$stalls"
  done
done
echo "wrote $out"
