#!/usr/bin/env bash
# Layrub (Jin et al. 2018): the 1,517-layer residual network on a 12 GB GPU (the zoo's
# titanx-maxwell), PCIe 3. The largest batch in-core fits against what layrub (every map
# migrated) and superneurons fit. Table: docs/reproductions.md.
# Then layrub on five CNNs at batch 64 with Caffe's conventions (memory to spare, PCIe 3), the
# networks behind the paper's average overhead, with each one's `memplan info` (feature-map bytes,
# forward and backward compute) in OUT's folder as layrub-info.csv: migrating every map costs at
# least (map bytes / link bandwidth - forward) + (map bytes / link bandwidth - backward).
#   scripts/reproduce-layrub.sh [OUT.csv] [BATCHES]   (default out/reproductions/layrub.csv, "1 4 8 16")
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/reproductions/layrub.csv}
batches=${2:-1 4 8 16}
source scripts/reproduce-common.sh
repro_begin "$out"
info_out=$(dirname "$out")/layrub-info.csv
echo "network,feature_map_bytes,forward_s,backward_s,swap_in_stall_s,swap_out_stall_s" >"$info_out"
# repro_info TRACE NAME: one line of $info_out, with the stalls of the layrub row repro_run just
# simulated (its JSON is still in $REPRO_TMP/run).
repro_info() {
  "$MEMPLAN" info "$1" --json | /usr/bin/python3 -c "
import json, sys
j = json.load(sys.stdin)
s = json.load(open('$REPRO_TMP/run/policy-layrub.json'))['stall_s_by_cause']
print(f\"$2,{j['feature_map_bytes']},{j['compute_s']['forward']},{j['compute_s']['backward']},\"
      f\"{s['swap-in']},{s['swap-out']}\")" >>"$info_out"
}
for batch in $batches; do
  repro_zoo "$REPRO_TMP/resnet1517.json" resnet "$batch" titanx-maxwell --depth 1517
  repro_run "$out" "$REPRO_TMP/resnet1517.json" resnet1517 "$batch" titanx-maxwell pcie3 - \
    in-core,layrub,superneurons,checkpoint-sqrt 0
  repro_info "$REPRO_TMP/resnet1517.json" "resnet1517-$batch"
done
for model in alexnet overfeat vgg16 googlenet resnet50; do
  repro_zoo "$REPRO_TMP/$model.json" "$model" 64 titanx-maxwell --caffe
  repro_run "$out" "$REPRO_TMP/$model.json" "$model" 64 titanx-maxwell pcie3 1024TiB layrub 0
  repro_info "$REPRO_TMP/$model.json" "$model"
done
echo "wrote $out and $info_out"
