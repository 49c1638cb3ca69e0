#!/usr/bin/env bash
# How well an imported step replays what the profiler recorded (issue 15), one row per profiler
# trace in ../shared/data and traces/kineto-h100 (or the files given), each figure the median
# over the trace's ProfilerStep#N:
#   wall        the recorded ProfilerStep wall time (the host's: the device may still be running
#               the step's work when the host leaves it)
#   span        from the step's start to the end of the last device work it launched
#   busy        the recorded GPU busy time (union of the kernels and memsets launched in the step)
#   op time     the sum of the imported ops' device times (busy time on one stream)
#   replay      `memplan simulate --policy in-core`'s step period: the step repeated back to back
#               by the engine with its host stream, the next step's host starting when this one's
#               leaves while its device work drains (Note [Step period] in sim/engine.hpp) — what
#               ProfilerStep#N measures in a training loop
#   in-order    `memplan info`'s host-side estimate: the step alone, ops in issue order on one
#               device stream, the host as a stream of its own (trace format v2)
# and the errors: replay and in-order against the wall, in-order against the span (a single step
# replayed alone ends when its device work does), op time against the busy time; idle is the
# recorded GPU idle share of the wall.
#   bench/replay-fidelity.sh [BUILD_DIR] [TRACE.json.gz...]   (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
memplan=$(realpath "${1:-build/release}")/bin/memplan
shift || true
traces=("$@")
if [[ ${#traces[@]} -eq 0 ]]; then
  mapfile -t traces < <(ls ../shared/data/kineto*/*.json.gz ../shared/data/kineto*/*.json traces/kineto-h100/*.json.gz 2>/dev/null)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%-40s %5s %9s %9s %9s %9s %9s %9s %8s %8s %8s %8s %6s\n' trace steps wall_ms span_ms \
  busy_ms optime_ms replay_ms inorder_ms replay% inorder% in/span% optime% idle%
for trace in "${traces[@]}"; do
  # The import error for a step that does not exist lists the steps there are.
  steps=$("$memplan" import kineto "$trace" --step 999999999 -o "$work/none.json" 2>&1 |
    grep -o '#[0-9]*' | tr -d '#' | grep -v '^999999999$' || true)
  rows="$work/rows"
  : >"$rows"
  for step in $steps; do
    out="$work/step.json"
    "$memplan" import kineto "$trace" --step "$step" -o "$out" >"$work/import.txt"
    "$memplan" simulate "$out" --policy in-core --json >"$work/sim.json"
    "$memplan" info "$out" --json >"$work/info.json"
    /usr/bin/python3 - "$work" >>"$rows" <<'EOF'
import json, re, sys
work = sys.argv[1]
text = open(f"{work}/import.txt").read()
busy = float(re.search(r"recorded busy ([0-9.]+) ms", text).group(1))
optime = float(re.search(r"in-core replay ([0-9.]+) ms", text).group(1))
m = re.search(r"recorded step wall ([0-9.]+) ms, its device work ends at ([0-9.]+) ms", text)
wall, span = float(m.group(1)), float(m.group(2))
sim = json.load(open(f"{work}/sim.json"))
replay = sim["step_s"] * 1e3
host = json.load(open(f"{work}/info.json")).get("host")
inorder = host["wall_s"] * 1e3 if host else float("nan")
print(wall, busy, optime, replay, inorder, span)
EOF
  done
  /usr/bin/python3 - "$trace" "$rows" <<'EOF'
import statistics, sys, os
name, rows = sys.argv[1], [list(map(float, l.split())) for l in open(sys.argv[2]) if l.strip()]
if not rows:
    print(f"{os.path.basename(name)[:40]:<40} no importable step"); sys.exit()
med = lambda k: statistics.median(r[k] for r in rows)
err = lambda k, ref: statistics.median(100.0 * (r[k] - r[ref]) / r[ref] for r in rows)
wall, busy, optime, replay, inorder, span = (med(k) for k in range(6))
print(f"{os.path.basename(name)[:40]:<40} {len(rows):5d} {wall:9.3f} {span:9.3f} {busy:9.3f} "
      f"{optime:9.3f} {replay:9.3f} {inorder:9.3f} {err(3, 0):+8.1f} {err(4, 0):+8.1f} "
      f"{err(4, 5):+8.1f} {err(2, 1):+8.1f} {100 * (1 - busy / wall):6.1f}")
EOF
done
