#!/usr/bin/env bash
# vDNN (Rhu et al. 2016): VGG-16 batch 256 on a 12 GB Titan X (Maxwell), PCIe 3, with vdnn-all,
# vdnn-conv and vdnn-dyn, in two frameworks: PyTorch autograd (the zoo's default: ReLU backward
# allocates its gradient) and Caffe (vDNN's framework: ReLU backward in place and int32 max-pool masks, the zoo's
# --caffe), and `memplan search` (SEARCH_TIME_LIMIT seconds each, default 20). Nothing fits, so
# each row's why_not column carries the out-of-memory report the doc's table quotes.
# Table: docs/reproductions.md.
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
echo "wrote $out"
