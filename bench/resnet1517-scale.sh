#!/usr/bin/env bash
# Issue 22's figures on the zoo's ResNet-1517 (6,080 feature maps) at batch 16 on a V100 cost
# model, squeezed into 8 GiB:
#  1. each policy's decision time and simulations, one at a time on one thread (policy_bench);
#  2. `memplan compare` wall and CPU time (policies in parallel) and each row's decide_s;
#  3. `memplan search --time-limit 10`: wall time, rounds, what seeded it and what was skipped;
#  4. one full lowering + simulation (sim_bench), and one swapped map kept judged by a full
#     lowering + simulation, an allocation replay and incrementally (KeepCheck).
# Timings are machine-dependent: run it on an idle machine, or read the CPU times.
#   bench/resnet1517-scale.sh [BUILD_DIR=build/release]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
cmake --build "$build" --target memplan policy_bench sim_bench >/dev/null
trace=$(mktemp --suffix=.json)
trap 'rm -f "$trace"' EXIT
"$build/bin/memplan" zoo resnet --depth 1517 --batch 16 --device v100-16gb -o "$trace"
echo "== 1. policies one at a time, one thread"
"$build/bin/policy_bench" "$trace" 8GiB
echo "== 2. memplan compare --memory 8GiB"
/usr/bin/time -f "compare: %e s wall, %U s user CPU" "$build/bin/memplan" compare "$trace" \
  --memory 8GiB --csv | cut -d, -f1,2,4,12
echo "== 3. memplan search --memory 8GiB --time-limit 10"
/usr/bin/time -f "search: %e s wall, %U s user CPU" "$build/bin/memplan" search "$trace" \
  --memory 8GiB --time-limit 10 --json | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
print("search_s {:.2f}, rounds {}, evaluated {}, converged {}, best policy {} {:.3f} s -> {:.3f} s"
      .format(j["search_s"], j["rounds"], j["evaluated"], j["converged"], j["best_policy"],
              j["best_policy_step_s"], j["step_s"]))
for p, why in j.get("skipped_policies", {}).items():
    print("skipped {}: {}".format(p, why))'
echo "== 4. one lowering + simulation (CPU time)"
"$build/bench/sim_bench" 1517 20 16
