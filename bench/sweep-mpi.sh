#!/usr/bin/env bash
# `memplan sweep` under `mpirun -np 2` against the same sweep on two threads of one process
# (issue 22): wall and CPU time of each, and whether the two CSVs are the same bytes (they must be,
# with --deterministic). Each rank runs one thread (mpirun binds a rank to a core); the threaded
# run has two. The grid: the shipped traces (mlp4, resnet_tiny, ResNet-50 b32) x
# 4 memories x 3 links x every policy and the search (20 rounds), 396 cells.
#   bench/sweep-mpi.sh [BUILD_DIR] [RANKS]   (default build/release, 2)
set -euo pipefail
exec 2>&1  # the timings (stderr of /usr/bin/time) in order with the rest
cd "$(dirname "$0")/.."
memplan=$PWD/${1:-build/release}/bin/memplan
ranks=${2:-2}
command -v mpirun >/dev/null || { echo "bench/sweep-mpi.sh: no mpirun (scripts/setup installs Open MPI)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
grid=(traces/mlp4.json traces/resnet_tiny.json traces/resnet50_b32_v100.json
  --memory 2GiB,3GiB,4GiB,6GiB --link pcie3,nvlink2,c2c --search-rounds 20 --search-time-limit 120
  --deterministic --quiet)
echo "sweep of $(nproc) cores' machine, grid: ${grid[*]}"
/usr/bin/time -f "threads: --threads $ranks, one process: %e s wall, %U s user, %S s sys" \
  "$memplan" sweep "${grid[@]}" --threads "$ranks" -o "$dir/threads.csv" >/dev/null
/usr/bin/time -f "mpirun -np $ranks --oversubscribe, --threads 1 each: %e s wall, %U s user, %S s sys" \
  mpirun -np "$ranks" --oversubscribe "$memplan" sweep "${grid[@]}" --threads 1 \
  -o "$dir/mpi.csv" >/dev/null
rows=$(($(wc -l <"$dir/threads.csv") - 1))
if cmp -s "$dir/threads.csv" "$dir/mpi.csv"; then
  echo "CSVs: byte-identical ($rows rows, $(wc -c <"$dir/mpi.csv") bytes)"
else
  echo "CSVs: DIFFER"
  diff "$dir/threads.csv" "$dir/mpi.csv" | head -n 5
  exit 1
fi
