#!/usr/bin/env bash
# The test command's time in a clean clone (issue #33): clones this repository's HEAD into a
# temporary folder beside ../shared (so the clone finds the shared data as CI does), runs
# scripts/test there, and prints each stage's wall time ("== preset: stage" lines of scripts/test)
# and the whole command's wall and CPU time. Nothing of this checkout's build is reused: no build
# folder and no ccache (CCACHE_DISABLE); what lives outside the repository (Debian packages, the
# torch 2.x venv scripts/setup keeps in ~/.cache/memplan) is reused as CI reuses it.
#   bench/test-time.sh [LOG]   (default: a temporary file, removed; the stage table always printed)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d "$(dirname "$root")/test-time.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=${1:-$work/log}
git clone -q "$root" "$work/clone"
ln -s "$(realpath ../shared)" "$work/shared"
start=$(date +%s)
set +e
(cd "$work/clone" && CCACHE_DISABLE=1 /usr/bin/time -f "cpu %U user %S sys" scripts/test 2>&1) |
  while IFS= read -r line; do printf '%s %s\n' "$(date +%s)" "$line"; done >"$log"
status=${PIPESTATUS[0]}
set -e
end=$(date +%s)
# A stage lasts from its "== " line to the next one (the last to the end of the command); the
# "== stage: N s" lines scripts/test prints at each stage's end are its own count, not a stage.
awk -v start="$start" -v end="$end" '
  BEGIN { name = "setup (scripts/setup)"; from = start }
  $2 == "==" && $NF != "s" { if (name != "") printf "%-28s %6d s\n", name, $1 - from; name = substr($0, index($0, "== ") + 3); from = $1 }
  $2 == "cpu" { cpu = $3 + $5 }
  END { if (name != "") printf "%-28s %6d s\n", name, end - from
        printf "%-28s %6d s wall, %d s CPU, exit %s\n", "scripts/test", end - start, cpu, "'"$status"'" }' "$log"
exit "$status"
