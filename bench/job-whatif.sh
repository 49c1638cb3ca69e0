#!/usr/bin/env bash
# What-if interconnects for the shared multi-GPU jobs (issue #34): each job imported once, then
# replayed in-core with its recorded collectives and under three fabrics; per fabric the job's step
# (the slowest rank) and, per kind of collective, what the cost model says the calls cost on rank 0
# (transfer summed over the step) and how long the ranks waited for each other.
#   bench/job-whatif.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
memplan=$(realpath "${1:-build/release}")/bin/memplan
data=../shared/data/kineto-multirank
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$memplan" import kineto "$data/mi300x_resnet_ddp_4ranks_merged.json.gz" -o "$work/mi300x.json" >/dev/null
"$memplan" import kineto "$data/dlrm_v100_ddp_rank0.pt.trace.json.gz" \
  "$data/dlrm_v100_ddp_rank1.pt.trace.json.gz" -o "$work/dlrm.json" >/dev/null
for job in mi300x dlrm; do
  for net in recorded "xgmi" "nvlink3" "pcie4-p2p" "nvlink4 --network ib-ndr --gpus-per-node 1"; do
    # shellcheck disable=SC2086
    "$memplan" simulate "$work/$job.json" --policy in-core --memory 1TiB --interconnect $net --json \
      >"$work/$job-$(echo "$net" | cut -d' ' -f1,3 | tr ' ' _).json"
  done
done
/usr/bin/python3 - "$work" <<'PY'
import collections, glob, json, os, sys
work = sys.argv[1]
print(f"{'job':8} {'interconnect':24} {'step ms':>9} {'wait ms':>8}  per kind on rank 0: calls, transfer ms")
for path in sorted(glob.glob(f"{work}/*-*.json")):
    job, net = os.path.basename(path)[:-5].split("-", 1)
    j = json.load(open(path))
    rank0 = j["ranks"][0] if "ranks" in j else j
    kinds = collections.OrderedDict()
    for call in rank0["collectives"]["by_call"]:
        k = kinds.setdefault(call["kind"], [0, 0.0])
        k[0] += 1
        k[1] += call["transfer_s"] * 1e3
    step = j["step_s"] * 1e3
    wait = max(r["collectives"]["wait_s"] for r in j.get("ranks", [j])) * 1e3
    detail = "; ".join(f"{k} {n}, {t:.3f}" for k, (n, t) in kinds.items())
    print(f"{job:8} {net.replace('_', ' '):24} {step:9.3f} {wait:8.3f}  {detail}")
PY
