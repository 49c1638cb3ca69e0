#!/usr/bin/env bash
# Issue 38: memplan's model of PyTorch's caching allocator against the real allocator, one row per
# memory snapshot: the snapshot's events replayed through the model (memplan import snapshot
# --json; importers/snapshot/allocator_replay.hpp) from the segments and blocks held at the first
# event. Each row: reserved and allocated bytes and segments at the dump (snapshot / model), the
# allocations the model placed at the address PyTorch gave them, whether the reserved bytes are
# equal after every event, and what the model does not do that the snapshot shows.
#   bench/allocator-fidelity.sh [SNAPSHOT...]   (default: traces/kineto-h200/*.snapshot.pickle.gz
#                                                and ../shared/data/memory-snapshots/*.pickle)
#   MEMPLAN=path to the binary (default build/release/bin/memplan)
set -euo pipefail
cd "$(dirname "$0")/.."
memplan=${MEMPLAN:-build/release/bin/memplan}
snapshots=("$@")
if [[ ${#snapshots[@]} -eq 0 ]]; then
  snapshots=(traces/kineto-h200/*.snapshot.pickle.gz)
  for s in ../shared/data/memory-snapshots/*.pickle; do [[ -e $s ]] && snapshots+=("$s"); done
fi
echo "| snapshot | device | reserved: snapshot / model | allocated: snapshot / model | segments | allocations at PyTorch's address | reserved after every event | not modelled |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for s in "${snapshots[@]}"; do
  "$memplan" import snapshot "$s" --json | /usr/bin/python3 -c '
import json, sys
name = sys.argv[1]
for d in json.load(sys.stdin)["devices"]:
    m = d["model"]
    mismatch = m["first_reserved_mismatch_event"]
    every = "equal" if mismatch is None else "differ from event %d" % mismatch
    print("| %s | %d | %s / %s | %s / %s | %d / %d | %s of %s | %s | %s |" % (
        name, d["device"], format(d["reserved_bytes"], ","), format(m["reserved_bytes"], ","),
        format(d["allocated_bytes"], ","), format(m["allocated_bytes"], ","), d["segments"],
        m["segments"], format(m["placed_as_recorded"], ","), format(m["allocations"], ","), every,
        "; ".join(m["differences"]) or "-"))
' "$(basename "$s")"
done
