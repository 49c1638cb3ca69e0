#!/usr/bin/env bash
# The plan search's speed and quality on ResNet-50 batch 640, v100-16gb, PCIe 3 (issue 6's
# yardstick): wall time with 1 and 2 threads (same plan: --deterministic), plans evaluated per
# second per thread, and the overhead against the ideal device beside PoocH's and the best policy's.
#   bench/search-speed.sh [BUILD_DIR]   (default build/release; build it with scripts/build release)
set -euo pipefail
cd "$(dirname "$0")/.."
memplan=${1:-build/release}/bin/memplan
trace=$(mktemp --suffix=.json)
trap 'rm -f "$trace"' EXIT
"$memplan" zoo resnet50 --batch 640 --device v100-16gb -o "$trace" >/dev/null
ideal=$("$memplan" compare "$trace" --link pcie3 --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["ideal_s"])')
pooch=$("$memplan" simulate "$trace" --policy pooch --link pcie3 --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["step_s"])')
for threads in 1 2; do
  "$memplan" search "$trace" --link pcie3 --threads "$threads" --deterministic --json |
    /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
threads, ideal, pooch = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
ours = j["step_s"] / ideal - 1
theirs = pooch / ideal - 1
print(f"threads {threads}: {j['"'"'search_s'"'"']:.2f} s, {j['"'"'evaluated'"'"']} plans, "
      f"{j['"'"'evaluated'"'"'] / j['"'"'search_s'"'"'] / threads:.0f} plans/s/thread; search overhead {ours:+.1%}, "
      f"pooch {theirs:+.1%} (ratio {ours / theirs:.2f}), best policy {j['"'"'best_policy'"'"']}")
' "$threads" "$ideal" "$pooch"
done
