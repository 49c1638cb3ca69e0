#!/usr/bin/env bash
# PoocH (Ito et al. 2019): ResNet-50 on a 16 GB V100, batch 128..640, PCIe 3 (x86) and NVLink 2
# (POWER9); every policy of `memplan compare` plus `memplan search`. Table: docs/reproductions.md.
#   scripts/reproduce-pooch.sh [OUT.csv]   (default out/reproductions/pooch.csv)
# Then ResNeXt-101 3D (16x112x112 clips) at batch 96 and 256 on both links: pooch and superneurons
# (`memplan simulate --policy`, no search).
# resnext-info.csv: each ResNeXt batch's feature-map bytes and forward and backward compute.
#   POOCH_BATCHES="128 256 384 512 640" picks the ResNet-50 batches.
#   MEMPLAN=path/to/memplan, SEARCH_TIME_LIMIT=seconds (default 10 here)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/reproductions/pooch.csv}
SEARCH_TIME_LIMIT=${SEARCH_TIME_LIMIT:-10}
source scripts/reproduce-common.sh
repro_begin "$out"
for batch in ${POOCH_BATCHES:-128 256 384 512 640}; do
  repro_zoo "$REPRO_TMP/resnet50.json" resnet50 "$batch" v100-16gb
  for link in pcie3 nvlink2; do
    repro_run "$out" "$REPRO_TMP/resnet50.json" resnet50 "$batch" v100-16gb "$link" - all 1
  done
done
# The SuperNeurons rule at 640 with every checkpoint swapped (its least memory): the live peak.
repro_zoo "$REPRO_TMP/resnet50.json" resnet50 640 v100-16gb
"$MEMPLAN" simulate "$REPRO_TMP/resnet50.json" --policy superneurons \
  --plan-out "$REPRO_TMP/sn.plan" >/dev/null
/usr/bin/python3 - "$REPRO_TMP/sn.plan" "$REPRO_TMP/plan-superneurons-all-swapped.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
for d in plan["maps"]:
    if d["action"] == "keep":
        d["action"] = "swap"
        d.pop("prefetch_before", None)
json.dump(plan, open(sys.argv[2], "w"))
PY
repro_run "$out" "$REPRO_TMP/resnet50.json" resnet50 640 v100-16gb pcie3 1024TiB \
  "plan:$REPRO_TMP/plan-superneurons-all-swapped.json" 0
# The rule under a caching pool's placement (PyTorch's rules; CuPy's pool, which Chainer uses,
# likewise splits cached blocks and gives free ones back only when cudaMalloc fails) instead of
# the contiguous arena.
repro_run "$out" "$REPRO_TMP/resnet50.json" resnet50-caching 640 v100-16gb pcie3 - superneurons 0 \
  --allocator caching
info_out=$(dirname "$out")/resnext-info.csv
echo "batch,feature_map_bytes,forward_s,backward_s" >"$info_out"
for batch in 96 256; do
  repro_zoo "$REPRO_TMP/resnext.json" resnext101-3d "$batch" v100-16gb --input 16x112x112
  "$MEMPLAN" info "$REPRO_TMP/resnext.json" --json | /usr/bin/python3 -c "
import json, sys
j = json.load(sys.stdin)
print(f\"$batch,{j['feature_map_bytes']},{j['compute_s']['forward']},{j['compute_s']['backward']}\")" \
    >>"$info_out"
  for link in pcie3 nvlink2; do
    repro_run "$out" "$REPRO_TMP/resnext.json" resnext101-3d "$batch" v100-16gb "$link" - \
      pooch,superneurons 0
  done
done
echo "wrote $out"
