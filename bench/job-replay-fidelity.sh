#!/usr/bin/env bash
# How well an imported job replays what its ranks recorded (issue #34), for the multi-rank
# profiler traces in ../shared/data/kineto-multirank (or the jobs given: each argument a file, or
# several files joined with commas). For every step complete on every rank: the job imported
# (`memplan import kineto`), replayed in-core with its recorded collectives (`memplan simulate
# --policy in-core`: the ranks together, each starting its step where it recorded it), and per rank
# the replayed step (from its start to its end) against the recorded ProfilerStep wall; for the job
# the span from the first rank's start to the last rank's end, replayed and recorded. Rows per
# step, then the median |error| per rank and for the job over the steps.
#   bench/job-replay-fidelity.sh [BUILD_DIR] [JOB...]   (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
memplan=$(realpath "${1:-build/release}")/bin/memplan
shift || true
data=../shared/data/kineto-multirank
jobs=("$@")
if [[ ${#jobs[@]} -eq 0 ]]; then
  jobs=("$data/mi300x_resnet_ddp_4ranks_merged.json.gz"
        "$data/dlrm_v100_ddp_rank0.pt.trace.json.gz,$data/dlrm_v100_ddp_rank1.pt.trace.json.gz")
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for job in "${jobs[@]}"; do
  IFS=, read -r -a files <<<"$job"
  # The import error for a step that does not exist lists the steps there are.
  steps=$("$memplan" import kineto "${files[@]}" --step 999999999 -o "$work/none.json" 2>&1 |
    grep -o '#[0-9]*' | tr -d '#' | grep -v '^999999999$' | sort -un || true)
  : >"$work/rows"
  for step in $steps; do
    "$memplan" import kineto "${files[@]}" --step "$step" -o "$work/job.json" --json \
      >"$work/import.json" 2>/dev/null || continue
    # A trace without device properties (the merged MI300X file) records no memory size: give
    # the simulation room, the replay is about time.
    "$memplan" simulate "$work/job.json" --policy in-core --memory 1TiB --json >"$work/sim.json"
    /usr/bin/python3 - "$work" "$step" >>"$work/rows" <<'PY'
import json, sys
work, step = sys.argv[1], sys.argv[2]
imp = json.load(open(f"{work}/import.json"))
imp = imp["ranks"] if "ranks" in imp else [imp]
sim = json.load(open(f"{work}/sim.json"))
ranks = sim["ranks"] if "ranks" in sim else [dict(sim, rank=0, start_s=0.0)]
recorded = [r["recorded_wall_s"] * 1e3 for r in imp]
replayed = [r["step_s"] * 1e3 for r in ranks]
starts = [r["start_s"] * 1e3 for r in ranks]
job_replayed = max(s + t for s, t in zip(starts, replayed))
job_recorded = max(s + t for s, t in zip(starts, recorded))  # the recorded starts are the same
print(step, " ".join(f"{a:.3f}:{b:.3f}" for a, b in zip(replayed, recorded)),
      f"{job_replayed:.3f}:{job_recorded:.3f}")
PY
  done
  /usr/bin/python3 - "$job" "$work/rows" <<'PY'
import os, statistics, sys
name, rows = sys.argv[1], [l.split() for l in open(sys.argv[2]) if l.strip()]
label = os.path.basename(name.split(",")[0])
if not rows:
    print(f"{label}: no step complete on every rank"); sys.exit()
err = lambda pair: 100.0 * (float(pair.split(":")[0]) / float(pair.split(":")[1]) - 1)
print(f"{label}")
for r in rows:
    cells = [f"rank {i} {p.replace(':', ' vs ')} ms ({err(p):+.1f}%)" for i, p in enumerate(r[1:-1])]
    print(f"  step {r[0]}: " + "; ".join(cells) + f"; job {r[-1].replace(':', ' vs ')} ms ({err(r[-1]):+.1f}%)")
n = len(rows[0]) - 2
meds = [statistics.median(abs(err(r[1 + i])) for r in rows) for i in range(n)]
print("  median |error| over the steps: " + ", ".join(f"rank {i} {m:.1f}%" for i, m in enumerate(meds))
      + f", job {statistics.median(abs(err(r[-1])) for r in rows):.1f}%")
PY
done
