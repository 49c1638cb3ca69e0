#!/usr/bin/env bash
# Gist (Jain et al. 2018): footprint reduction of the encodings on five CNNs (AlexNet, OverFeat,
# VGG-16, GoogLeNet, ResNet-50; batch 64 on a 12 GB Titan X) with memory to spare: in-core
# without and with `--encode all` (binarize, sparse and the default precision reduction), and
# with only the lossless pair (`--encode binarize,sparse`), and with the lossless pair plus 8-bit
# precision reduction (`--encode binarize,sparse,fp8`, Gist's most aggressive DPR). Table: docs/reproductions.md.
#   scripts/reproduce-gist.sh [OUT.csv]   (default out/reproductions/gist.csv)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/reproductions/gist.csv}
source scripts/reproduce-common.sh
repro_begin "$out"
for model in alexnet overfeat vgg16 googlenet resnet50; do
  repro_zoo "$REPRO_TMP/$model.json" "$model" 64 titanx-maxwell
  repro_run "$out" "$REPRO_TMP/$model.json" "$model" 64 titanx-maxwell pcie3 1024TiB in-core 0
  repro_run "$out" "$REPRO_TMP/$model.json" "$model+all" 64 titanx-maxwell pcie3 1024TiB in-core 0 \
    --encode all
  repro_run "$out" "$REPRO_TMP/$model.json" "$model+lossless" 64 titanx-maxwell pcie3 1024TiB \
    in-core 0 --encode binarize,sparse
  repro_run "$out" "$REPRO_TMP/$model.json" "$model+fp8" 64 titanx-maxwell pcie3 1024TiB in-core 0 \
    --encode binarize,sparse,fp8
done
echo "wrote $out"
