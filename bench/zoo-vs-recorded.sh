#!/usr/bin/env bash
# The zoo's modeled step in the precision a job trains in against that job's recorded step
# (issue 35): the networks of traces/kineto-h100 (README.md there: Hugging Face GPT-2, 6 layers,
# batch 8 x 512, bf16 autocast, fused AdamW; torchvision ResNet-50, batch 64, fp16 autocast with a
# GradScaler, SGD with momentum), built by `memplan zoo` on the h100-80gb preset, then NVIDIA's
# published ResNet-50 v1.5 training throughputs (DeepLearningExamples,
# PyTorch/Classification/ConvNets/resnet50v1.5/README.md, pytorch-21.03 container, one GPU of a
# DGX; batch sizes from configs.yml) as a step time, batch / throughput. One row per case:
#   zoo_ms      the modeled step's device time (`memplan simulate --policy in-core`: compute)
#   ref_ms      the recorded device time (`memplan import kineto`: recorded busy), or the
#               published step
#   replay_ms   the imported step's in-core replay (device time; - for a published figure)
#   zoo/ref     zoo_ms / ref_ms
#   peaks       the in-core live peaks of the zoo's step and of the imported one (GiB)
#   bench/zoo-vs-recorded.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
memplan=$(realpath "${1:-build/release}")/bin/memplan
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# simulate's figure KEY of trace $1 (compute_s, peak_bytes).
figure() {
  "$memplan" simulate "$1" --policy in-core --json |
    /usr/bin/python3 -c "import json, sys; print(json.load(sys.stdin)['$2'])"
}

printf '%-44s %9s %9s %9s %8s %9s %9s\n' case zoo_ms ref_ms replay_ms zoo/ref zoo_GiB ref_GiB
# recorded NAME TRACE ZOO_ARGS...
recorded() {
  local name=$1 trace=$2
  shift 2
  "$memplan" zoo "$@" -o "$work/zoo.json" >/dev/null
  "$memplan" import kineto "$trace" -o "$work/recorded.json" >"$work/import.txt"
  local busy
  busy=$(grep -o 'recorded busy [0-9.]* ms' "$work/import.txt" | grep -o '[0-9.]*')
  /usr/bin/python3 - "$name" "$busy" "$(figure "$work/zoo.json" compute_s)" \
    "$(figure "$work/recorded.json" compute_s)" "$(figure "$work/zoo.json" peak_bytes)" \
    "$(figure "$work/recorded.json" peak_bytes)" <<'EOF'
import sys
name, busy, zoo_s, replay_s, zoo_peak, ref_peak = sys.argv[1:]
zoo, busy, replay = float(zoo_s) * 1e3, float(busy), float(replay_s) * 1e3
print(f"{name:<44} {zoo:9.3f} {busy:9.3f} {replay:9.3f} {zoo / busy:8.2f} "
      f"{int(zoo_peak) / 2**30:9.2f} {int(ref_peak) / 2**30:9.2f}")
EOF
}
# published NAME BATCH IMAGES_PER_S ZOO_ARGS...
published() {
  local name=$1 batch=$2 rate=$3
  shift 3
  "$memplan" zoo "$@" --batch "$batch" -o "$work/zoo.json" >/dev/null
  /usr/bin/python3 - "$name" "$batch" "$rate" "$(figure "$work/zoo.json" compute_s)" \
    "$(figure "$work/zoo.json" peak_bytes)" <<'EOF'
import sys
name, batch, rate, zoo_s, zoo_peak = sys.argv[1:]
zoo, ref = float(zoo_s) * 1e3, int(batch) / float(rate) * 1e3
print(f"{name:<44} {zoo:9.3f} {ref:9.3f} {'-':>9} {zoo / ref:8.2f} "
      f"{int(zoo_peak) / 2**30:9.2f} {'-':>9}")
EOF
}

# Hugging Face's GPT-2 as the job ran it: scaled-dot-product attention (its default
# attn_implementation, the zoo's default in bf16) and gelu_new (GPT2Config's default activation).
recorded "gpt2 bf16, H100 (kineto-h100/gpt2)" traces/kineto-h100/gpt2.pt.trace.json.gz \
  gpt --layers 6 --hidden 768 --heads 12 --seq 512 --vocab 50257 --batch 8 --optimizer adam \
  --precision bf16 --attention sdpa --activation gelu_new --device h100-80gb
recorded "resnet50 fp16, H100 (kineto-h100/resnet50)" traces/kineto-h100/resnet50.pt.trace.json.gz \
  resnet50 --batch 64 --precision fp16 --channels-last --device h100-80gb
published "resnet50 AMP b256, A100 80GB: 2470 img/s" 256 2470 \
  resnet50 --precision fp16 --channels-last --device a100-80gb
published "resnet50 TF32 b256, A100 80GB: 938 img/s" 256 938 \
  resnet50 --precision tf32 --device a100-80gb
published "resnet50 AMP b256, V100 16GB: 1200 img/s" 256 1200 \
  resnet50 --precision fp16 --channels-last --device v100-16gb
published "resnet50 FP32 b112, V100 16GB: 367 img/s" 112 367 \
  resnet50 --device v100-16gb
