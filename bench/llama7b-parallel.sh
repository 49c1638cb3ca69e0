#!/usr/bin/env bash
# Issue 35: a 7-billion-parameter LLaMA (the zoo's llama at LLaMA-2-7B's shape, bf16 autocast,
# Adam, batch 1 per GPU) on H100 80 GB, 8 GPUs in a node (NVLink 4) and 2 nodes of 8 (NDR
# InfiniBand), at 4k and 8k tokens: under each standard data-parallel setting, each rank's
# in-core peak, the fastest of memplan compare's policies that fits on the 80 GB, and the
# search's plan (activations and host placement on top of the setting).
#   bench/llama7b-parallel.sh [BUILD_DIR]   SEARCH_TIME_LIMIT=seconds (default 10)
# Runtime: about 15 s a row, 12 rows.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
memplan=$build/bin/memplan
limit=${SEARCH_TIME_LIMIT:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "| setting | GPUs | tokens | per-rank in-core peak | fastest policy that fits | search |"
echo "| --- | --- | --- | --- | --- | --- |"
for seq in 4096 8192; do
  for gpus in 8 16; do
    network=""
    [ "$gpus" -gt 8 ] && network="--network ib-ndr"
    for setting in "--data-parallel $gpus" "--fsdp $gpus --fsdp-strategy shard-grad-op" \
                   "--fsdp $gpus"; do
      # shellcheck disable=SC2086  # the flags are words
      "$memplan" zoo llama --layers 32 --hidden 4096 --heads 32 --seq "$seq" --batch 1 \
        --device h100-80gb --optimizer adam --precision bf16 $setting $network \
        -o "$work/job.json" --json >"$work/zoo.json"
      "$memplan" compare "$work/job.json" --json >"$work/compare.json" || true
      "$memplan" search "$work/job.json" --time-limit "$limit" --threads 2 --json --quiet \
        >"$work/search.json" || true
      /usr/bin/python3 - "$setting" "$gpus" "$seq" "$work" <<'PY'
import json, sys
setting, gpus, seq, work = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
z = json.load(open(f"{work}/zoo.json"))
rows = json.load(open(f"{work}/compare.json"))["rows"]
fits = sorted((r for r in rows if r["feasible"]), key=lambda r: r["step_s"])
s = json.load(open(f"{work}/search.json"))
best = f"{fits[0]['policy']} {fits[0]['step_s'] * 1e3:.0f} ms" if fits else "none fits"
search = f"{s['step_s'] * 1e3:.0f} ms" if s.get("feasible") else "no plan fits"
name = z["data_parallel"].split(" over ")[0]
print(f"| {name} | {gpus} | {seq} | {z['peak_bytes_incore'] / 2**30:.1f} GiB | {best} | {search} |",
      flush=True)
PY
    done
  done
done
