#!/usr/bin/env bash
# Layrub (Jin et al. 2018): the 1,517-layer residual network on a 12 GB GPU (the zoo's
# titanx-maxwell), PCIe 3. The largest batch in-core fits against what layrub (every map
# migrated) and superneurons fit. Table: docs/reproductions.md.
#   scripts/reproduce-layrub.sh [OUT.csv] [BATCHES]   (default out/reproductions/layrub.csv, "1 4 8 16")
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/reproductions/layrub.csv}
batches=${2:-1 4 8 16}
source scripts/reproduce-common.sh
repro_begin "$out"
for batch in $batches; do
  repro_zoo "$REPRO_TMP/resnet1517.json" resnet "$batch" titanx-maxwell --depth 1517
  repro_run "$out" "$REPRO_TMP/resnet1517.json" resnet1517 "$batch" titanx-maxwell pcie3 - \
    in-core,layrub,superneurons,checkpoint-sqrt 0
done
echo "wrote $out"
