#!/usr/bin/env bash
# Issue 36's user battery: each model as a PyTorch user meets memplan, from the command line —
# `memplan capture` (one training step on the CPU), `memplan search` (parameters, gradients,
# optimizer state and the batch may go to the host, the update too; MAPS_ONLY=1: `--maps-only`,
# the battery before issue 36's host placement) at the in-core
# peak less half the feature-map bytes (memplan info --json; less 40, 30, 20, 10% of them where no plan
# fits, down to 10%), and
# `memplan validate --backend torch` of that plan (the plan carried out in PyTorch: loss, gradients
# and weights bitwise, the saved-bytes peak to the byte) — under each PyTorch the tests use (the
# PyPI venv's, Debian's 1.13). One row per model and PyTorch: what each stage said, the saved-bytes
# peak predicted and measured, and the stage that failed with its one line.
#   bench/torch-models.sh [MODEL...]          (default: the list below; torchvision:NAME or
#                                              package.module:factory, MODEL@STEP for a --step)
#   PYTHONS="venv debian" (default both), BATCH (8), INPUT (128x128), SEQUENCE (64, a GPT's),
#   SEARCH_TIME_LIMIT (10), MAPS_ONLY (unset)
# Runtime: about half a minute a model and PyTorch on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
memplan=${MEMPLAN:-build/release/bin/memplan}
batch=${BATCH:-8}
input=${INPUT:-128x128}
limit=${SEARCH_TIME_LIMIT:-10}
maps_only=()
[[ -n ${MAPS_ONLY:-} ]] && maps_only=(--maps-only)
models=("$@")
if [[ ${#models[@]} -eq 0 ]]; then
  models=(torchvision:resnet18 torchvision:resnet50 torchvision:resnext50_32x4d
          torchvision:wide_resnet50_2 torchvision:mobilenet_v2 torchvision:mobilenet_v3_small
          torchvision:mobilenet_v3_large torchvision:efficientnet_b0 torchvision:efficientnet_v2_s
          torchvision:densenet121 torchvision:squeezenet1_0 torchvision:squeezenet1_1
          torchvision:shufflenet_v2_x0_5 torchvision:mnasnet0_5 torchvision:regnet_x_400mf
          torchvision:regnet_y_400mf torchvision:vgg11 torchvision:vgg11_bn torchvision:alexnet
          torchvision:googlenet torchvision:convnext_tiny torchvision:swin_t
          memplan.torch.models:gpt_block memplan.torch.models:gpt_sdpa_block
          memplan.torch.models:gpt_sdpa_block@memplan.torch.models:bf16_autocast_step
          memplan.torch.models:compiled_gpt_block memplan.torch.models:compiled_resnet18
          memplan.torch.models:lstm_tagger
          memplan.torch.models:gru_tagger memplan.torch.models:ssdlite)
fi
declare -A pythons=([venv]="$(scripts/setup --torch2-python)" [debian]=/usr/bin/python3)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| model | PyTorch | capture | search (maps' bytes less) | validate in PyTorch | saved-bytes peak predicted / measured |"
echo "| --- | --- | --- | --- | --- | --- |"
for which in ${PYTHONS:-venv debian}; do
  python=${pythons[$which]}
  version=$("$python" -c "import torch; print(torch.__version__.split('+')[0])")
  for spec in "${models[@]}"; do
    model=${spec%%@*}
    step=()
    [[ $spec == *@* ]] && step=(--step "${spec#*@}")
    trace="$work/trace.json" plan="$work/plan.json"
    dims=$input
    [[ $model == *gpt* || $model == *tagger* ]] && dims=${SEQUENCE:-64}  # a sequence length
    row="| $spec | $version |"
    if ! MEMPLAN_PYTHON=$python "$memplan" capture "$model" --batch "$batch" --input "$dims" \
        "${step[@]}" -o "$trace" >"$work/out" 2>"$work/err"; then
      echo "$row failed: $(grep -v "^[[:space:]]*$" "$work/err" | tail -n 1) | - | - | - |"
      continue
    fi
    row="$row $("$memplan" info "$trace" --json | "$python" -c \
      'import json, sys; print(json.load(sys.stdin)["ops"])') ops |"
    rm -f "$plan"
    for less in 0.5 0.4 0.3 0.2 0.1; do
      memory=$("$memplan" info "$trace" --json | "$python" -c "import json, sys
j = json.load(sys.stdin); print(int(j['peak_bytes_incore'] - $less * j['feature_map_bytes']))")
      "$memplan" search "$trace" --memory "${memory}B" "${maps_only[@]}" --time-limit "$limit" \
        --quiet -o "$plan" >"$work/out" 2>"$work/err" || true
      [[ -e $plan ]] && break
    done
    if [[ ! -e $plan ]]; then
      echo "$row no plan down to 10% less | - | - |"
      continue
    fi
    row="$row ${less/0./}0% less: $(grep -m1 '^plan' "$work/out" | sed 's/^plan *//') |"
    if MEMPLAN_PYTHON=$python "$memplan" validate "$trace" --plan "$plan" --backend torch \
        --model "$model" --batch "$batch" --input "$dims" --memory "${memory}B" "${step[@]}" \
        >"$work/out" 2>"$work/err"; then
      verdict="ok"
    else
      verdict="exit $?: $(grep -v "^[[:space:]]*$" "$work/err" | tail -n 1)"
    fi
    peaks=$(grep -m1 -i "saved" "$work/out" | sed 's/^ *//' || true)
    echo "$row $verdict | ${peaks:--} |"
  done
done
