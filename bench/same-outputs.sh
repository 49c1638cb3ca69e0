#!/usr/bin/env bash
# Checks that two memplan binaries decide the same: `memplan compare --json` and `memplan search
# --deterministic --json` on seven workloads (four modeled by the zoo, two imported from real
# profiler traces, one recorded on the host backend), every field compared but the wall-clock ones
# (decide_s, search_s, elapsed_s).
# For refactors that must not change behaviour: run it with the build before and the build after.
# Usage: bench/same-outputs.sh OLD_MEMPLAN NEW_MEMPLAN [WORKDIR]
set -euo pipefail
old=$1 new=$2 work=${3:-$(mktemp -d)}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
# Modeled and imported workloads, each with a memory that makes the policies choose.
"$new" zoo resnet50 --device v100-16gb --batch 64 -o "$work/resnet50.json" >/dev/null
"$new" zoo densenet121 --device v100-16gb --batch 64 -o "$work/densenet121.json" >/dev/null
"$new" zoo vgg16 --device v100-16gb --batch 32 -o "$work/vgg16.json" >/dev/null
"$new" zoo gpt --device a100-40gb --layers 4 --seq 512 --batch 4 -o "$work/gpt.json" >/dev/null
"$new" import kineto "$root/../shared/data/kineto-current/a100_training_control.pt.trace.json.gz" \
  -o "$work/a100.json" >/dev/null
cases=(
  "resnet50.json 3GiB"
  "densenet121.json 4GiB"
  "vgg16.json 3GiB"
  "gpt.json 1400MiB"
  "a100.json 2GiB"
  "$root/traces/resnet50_b32_v100.json 2GiB"
  "$root/traces/mlp4.json 450KiB"
)
strip() { python3 -c '
import json, sys
def walk(x):
    if isinstance(x, dict):
        return {k: walk(v) for k, v in x.items() if k not in ("decide_s", "search_s", "elapsed_s")}
    if isinstance(x, list):
        return [walk(v) for v in x]
    return x
print(json.dumps(walk(json.load(sys.stdin)), indent=1, sort_keys=True))'; }
status=0
for c in "${cases[@]}"; do
  read -r trace memory <<<"$c"
  [[ "$trace" == /* ]] || trace="$work/$trace"
  name=$(basename "$trace" .json)
  for cmd in "compare" "search --deterministic --rounds 3"; do
    tag="$name.${cmd%% *}"
    "$old" $cmd "$trace" --memory "$memory" --json 2>/dev/null | strip >"$work/$tag.old" || true
    "$new" $cmd "$trace" --memory "$memory" --json 2>/dev/null | strip >"$work/$tag.new" || true
    if cmp -s "$work/$tag.old" "$work/$tag.new"; then
      echo "same       $tag ($(wc -c <"$work/$tag.new") bytes)"
    else
      echo "DIFFERENT  $tag: diff $work/$tag.old $work/$tag.new"
      status=1
    fi
  done
done
exit $status
