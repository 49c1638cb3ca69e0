#!/usr/bin/env bash
# PoocH's classification time on ResNeXt-101 3D (issue 5: under one second on one core; its
# authors' implementation took about two minutes for a 300-layer network). Runs
# `memplan compare --json` pinned to one core (taskset; oneTBB follows the affinity mask) and
# prints pooch's decide_s, at batch 1 (everything fits a 16 GB V100) and at batch 96 (18.0 GiB
# in-core: over budget, so PoocH has maps to classify). decide_s is wall time: on a loaded
# machine compare it with the user CPU time `time` prints, and with the CPU time of
# `memplan simulate --policy pooch` alone, printed last for each batch.
#   bench/pooch-speed.sh [BUILD_DIR] [BATCHES...]   (default build/release; 1 96)
set -euo pipefail
cd "$(dirname "$0")/.."
memplan=${1:-build/release}/bin/memplan
shift || true
batches=("$@")
[[ ${#batches[@]} -gt 0 ]] || batches=(1 96)
trace=$(mktemp --suffix=.json)
trap 'rm -f "$trace"' EXIT
for batch in "${batches[@]}"; do
  "$memplan" zoo resnext101-3d --batch "$batch" --input 16x112x112 --device v100-16gb -o "$trace"
  "$memplan" info "$trace" --json | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
print(f"resnext101-3d batch {sys.argv[1]}, 16x112x112, v100-16gb, pcie3: {j['"'"'ops'"'"']} ops, "
      f"{j['"'"'feature_maps'"'"']} feature maps")' "$batch"
  time (taskset -c 0 "$memplan" compare "$trace" --json | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
r = next(r for r in j["rows"] if r["policy"] == "pooch")
a = r["actions"]
fits = f"fits, {r['"'"'overhead'"'"']:+.1%} vs ideal" if r["feasible"] else "does not fit"
print(f"  pooch decide_s {r['"'"'decide_s'"'"']:.3f} s on one core ({fits}; "
      f"{a['"'"'keep'"'"']} keep / {a['"'"'swap'"'"']} swap / {a['"'"'recompute'"'"']} recompute)")
print(f"  {r['"'"'note'"'"']}")')
  # PoocH alone (its decision, one lowering and one simulation), CPU and wall time on one core.
  /usr/bin/time -f "  simulate --policy pooch on one core: %U s user, %S s sys, %e s wall" \
    taskset -c 0 "$memplan" simulate "$trace" --policy pooch --json >/dev/null
done
