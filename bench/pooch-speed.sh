#!/usr/bin/env bash
# PoocH's classification time on ResNeXt-101 3D (issue 5: under one second on one core; its
# authors' implementation took about two minutes for a 300-layer network). Runs
# `memplan compare --json` pinned to one core (taskset; oneTBB follows the affinity mask) and
# prints pooch's decide_s, on the device's own memory and on tighter budgets where PoocH has
# maps to classify.
#   bench/pooch-speed.sh [BUILD_DIR] [BUDGETS...]   (default build/release; 16GiB 1GiB 768MiB)
set -euo pipefail
cd "$(dirname "$0")/.."
memplan=${1:-build/release}/bin/memplan
shift || true
budgets=("$@")
[[ ${#budgets[@]} -gt 0 ]] || budgets=(16GiB 1GiB 768MiB)
trace=$(mktemp --suffix=.json)
trap 'rm -f "$trace"' EXIT
"$memplan" zoo resnext101-3d --batch 1 --input 16x112x112 --device v100-16gb -o "$trace"
layers=$("$memplan" info "$trace" --json | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
print(j.get("ops", "?"), "ops,", j.get("feature_maps", "?"), "feature maps")' 2>/dev/null || echo "?")
echo "resnext101-3d batch 1, 16x112x112, v100-16gb, pcie3: $layers"
for budget in "${budgets[@]}"; do
  taskset -c 0 "$memplan" compare "$trace" --memory "$budget" --json | /usr/bin/python3 -c '
import json, sys
budget = sys.argv[1]
j = json.load(sys.stdin)
r = next(r for r in j["rows"] if r["policy"] == "pooch")
a = r["actions"]
fits = "fits" if r["feasible"] else "does not fit"
print(f"  --memory {budget}: pooch decide_s {r['"'"'decide_s'"'"']:.3f} s on one core ({fits}; "
      f"{a['"'"'keep'"'"']} keep / {a['"'"'swap'"'"']} swap / {a['"'"'recompute'"'"']} recompute; {r['"'"'note'"'"']})")
' "$budget"
done
