#!/usr/bin/env bash
# vDNN (Rhu et al. 2016): VGG-16 batch 256 on a 12 GB Titan X (Maxwell), PCIe 3, with vdnn-all,
# vdnn-conv and vdnn-dyn, in two frameworks: PyTorch autograd (the zoo's default: ReLU backward
# allocates its gradient) and Caffe (vDNN's framework: ReLU backward in place and int32 max-pool masks, the zoo's
# --caffe), and `memplan search` (SEARCH_TIME_LIMIT seconds each, default 20). Nothing fits, so
# each row's why_not column carries the out-of-memory report the doc's table quotes.
# Table: docs/reproductions.md.
# Then vDNN's "average memory" figures (AlexNet, OverFeat, GoogLeNet at batch 128, Caffe's
# conventions): vdnn-all's live device bytes averaged over the step (`average_live_bytes` of
# `memplan simulate --json`) against the network-wide no-reuse baseline (`no_reuse_bytes` of
# `memplan info --json`: every buffer held for the whole step, as Caffe allocates), with the
# fastest algorithms (vDNN's "p") and with every op on its least-workspace one ("m"), written
# to OUT's folder as vdnn-memory.csv.
#   scripts/reproduce-vdnn.sh [OUT.csv]   (default out/reproductions/vdnn.csv; ~1 min)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/reproductions/vdnn.csv}
source scripts/reproduce-common.sh
repro_begin "$out"
repro_zoo "$REPRO_TMP/vgg16.json" vgg16 256 titanx-maxwell
repro_run "$out" "$REPRO_TMP/vgg16.json" vgg16-pytorch 256 titanx-maxwell pcie3 - \
  in-core,vdnn-all,vdnn-conv,vdnn-dyn 1
repro_zoo "$REPRO_TMP/vgg16-caffe.json" vgg16 256 titanx-maxwell --caffe
repro_run "$out" "$REPRO_TMP/vgg16-caffe.json" vgg16-caffe 256 titanx-maxwell pcie3 - \
  in-core,vdnn-all,vdnn-conv,vdnn-dyn 1
# vdnn-all's live peak with memory to spare: what any allocator, even a compacting one, must hold.
repro_run "$out" "$REPRO_TMP/vgg16-caffe.json" vgg16-caffe-unbounded 256 titanx-maxwell pcie3 \
  1024TiB vdnn-all 0
# The same plan with conv1_1's map (features.1) fetched on demand, before conv1_2's backward, instead
# of during pool1's backward where the prefetch walk puts it: the live peak drops under 12 GiB, and
# the row at 12 GiB shows what the arena's placement then costs.
# (vdnn-all's plan does not depend on the memory; simulate writes no plan for one that does not
# fit, so it is taken with memory to spare.)
"$MEMPLAN" simulate "$REPRO_TMP/vgg16-caffe.json" --policy vdnn-all --memory 1024TiB \
  --plan-out "$REPRO_TMP/vdnn-all.plan" >/dev/null
/usr/bin/python3 - "$REPRO_TMP/vdnn-all.plan" "$REPRO_TMP/plan-vdnn-all-on-demand.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
for d in plan["maps"]:
    if d["tensor"] == "features.1":
        d["prefetch_before"] = "features.2_bwd"
plan["policy"] = "vdnn-all-on-demand"
json.dump(plan, open(sys.argv[2], "w"))
PY
for memory in - 1024TiB; do
  repro_run "$out" "$REPRO_TMP/vgg16-caffe.json" vgg16-caffe-on-demand 256 titanx-maxwell pcie3 \
    "$memory" "plan:$REPRO_TMP/plan-vdnn-all-on-demand.json" 0
done
# The same plan at 12 GiB under PyTorch's caching allocator instead of the contiguous arena.
repro_run "$out" "$REPRO_TMP/vgg16-caffe.json" vgg16-caffe-on-demand-caching 256 titanx-maxwell \
  pcie3 - "plan:$REPRO_TMP/plan-vdnn-all-on-demand.json" 0 --allocator caching
# The average-memory rows.
mem_out=$(dirname "$out")/vdnn-memory.csv
echo "network,batch,algorithms,no_reuse_bytes,persistent_bytes,average_live_bytes,peak_bytes,step_s" \
  >"$mem_out"
for model in alexnet overfeat googlenet; do
  trace=$REPRO_TMP/$model-128.json
  repro_zoo "$trace" "$model" 128 titanx-maxwell --caffe
  "$MEMPLAN" info "$trace" --json >"$REPRO_TMP/info.json"
  "$MEMPLAN" simulate "$trace" --policy vdnn-all --memory 1024TiB --json \
    --plan-out "$REPRO_TMP/p.plan" >"$REPRO_TMP/p.json"
  # "m": the same plan with every op that has alternatives on its least-workspace algorithm.
  /usr/bin/python3 - "$trace" "$REPRO_TMP/p.plan" "$REPRO_TMP/m.plan" <<'PY'
import json, sys
trace, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
plan["algorithms"] = [
    {"op": o["name"], "algorithm": min(o["algorithms"], key=lambda a: a["workspace_bytes"])["name"]}
    for o in trace["ops"] if o.get("algorithms")]
json.dump(plan, open(sys.argv[3], "w"))
PY
  "$MEMPLAN" simulate "$trace" --plan "$REPRO_TMP/m.plan" --memory 1024TiB --json >"$REPRO_TMP/m.json"
  for alg in p m; do
    /usr/bin/python3 - "$REPRO_TMP/info.json" "$REPRO_TMP/$alg.json" "$model" "$alg" >>"$mem_out" <<'PY'
import json, sys
info, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
kinds = info["tensors_by_kind"]
# Held all step whatever the policy: weights, their gradients (as many bytes as the weights) and
# the optimizer's state.
persistent = 2 * kinds["parameter"]["bytes"] + kinds.get("optimizer_state", {"bytes": 0})["bytes"]
print(f"{sys.argv[3]},128,{sys.argv[4]},{info['no_reuse_bytes']},{persistent},"
      f"{run['average_live_bytes']},{run['peak_bytes']},{run['step_s']:.6f}")
PY
  done
done
echo "wrote $out and $mem_out"
