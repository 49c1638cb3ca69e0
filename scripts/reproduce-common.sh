# Shared by scripts/reproduce-*.sh and bench/search-quality.sh (sourced, not run): build a
# workload with `memplan zoo`, run `memplan compare --json` and `memplan search --json` on it, and
# append one CSV line per policy (and one for the search) to the output file. why_not, for a row
# that does not fit, is the out-of-memory report in one line (op, request, largest free block,
# bytes missing, live bytes), as `memplan compare` prints it; empty when the row fits. step_s
# and ideal_s are the step back to back (Note [Step period]), the measure `memplan
# compare` ranks by: on a step with a recorded host side it is not the step replayed alone.
#   MEMPLAN   the memplan binary (default build/release/bin/memplan)
#   SEARCH_TIME_LIMIT  seconds for each `memplan search` (default 20)
set -euo pipefail
MEMPLAN=${MEMPLAN:-build/release/bin/memplan}
SEARCH_TIME_LIMIT=${SEARCH_TIME_LIMIT:-20}
REPRO_TMP=$(mktemp -d)
trap 'rm -rf "$REPRO_TMP"' EXIT

if [[ ! -x $MEMPLAN ]]; then
  echo "reproduce: $MEMPLAN not built (scripts/build release, or set MEMPLAN)" >&2
  exit 2
fi

readonly REPRO_HEADER="workload,batch,device,link,memory,policy,feasible,step_s,ideal_s,overhead,peak_bytes,keep,swap,recompute,encode,decide_s,note,why_not"

# repro_begin OUT: creates OUT (and its folder) with the header.
repro_begin() {
  mkdir -p "$(dirname "$1")"
  echo "$REPRO_HEADER" >"$1"
}

# repro_zoo TRACE MODEL BATCH DEVICE [zoo flags...]: writes the modeled step to TRACE.
repro_zoo() {
  local trace=$1 model=$2 batch=$3 device=$4
  shift 4
  "$MEMPLAN" zoo "$model" --batch "$batch" --device "$device" "$@" -o "$trace" >/dev/null
}

# repro_run OUT TRACE LABEL BATCH DEVICE LINK MEMORY POLICIES SEARCH [what-if flags...]
#   POLICIES: "all" runs `memplan compare --json` (every policy; decide_s is the policy's own
#   decision time); a comma-separated list runs `memplan simulate --policy P --json` for each
#   (decide_s is then the wall time of that command: decision, lowering and simulation); an item
#   "plan:DIR/plan-NAME.json" simulates that plan file instead, in a row named NAME.
#   SEARCH: 1 to add a `memplan search` row (decide_s = the search's own time), 0 not to.
#   LINK/MEMORY: "-" for the trace's own; other what-if flags (e.g. --encode all) follow.
repro_run() {
  local out=$1 trace=$2 label=$3 batch=$4 device=$5 link=$6 memory=$7 policies=$8 search=$9
  shift 9
  local flags=("$@") ideal_flags=()
  if [[ $link != - ]]; then
    flags+=(--link "$link")
    ideal_flags+=(--link "$link")
  fi
  [[ $memory != - ]] && flags+=(--memory "$memory")
  local dir=$REPRO_TMP/run
  rm -rf "$dir" && mkdir -p "$dir"
  if [[ $policies == all ]]; then
    "$MEMPLAN" compare "$trace" "${flags[@]}" --json >"$dir/compare.json"
  else
    # The ideal device: in-core with memory to spare (what `memplan compare` calls ideal_s).
    "$MEMPLAN" simulate "$trace" "${ideal_flags[@]}" --policy in-core --memory 1024TiB --json \
      >"$dir/ideal.json"
    local p names=()
    IFS=, read -ra plist <<<"$policies"
    for p in "${plist[@]}"; do
      # "plan:DIR/plan-NAME.json" simulates that plan file; its row is named NAME.
      local t0 t1 name=$p source=(--policy "$p")
      if [[ $p == plan:* ]]; then
        name=$(basename "${p#plan:}" .json)
        name=${name#plan-}
        source=(--plan "${p#plan:}")
      fi
      names+=("$name")
      t0=$(date +%s.%N)
      "$MEMPLAN" simulate "$trace" "${flags[@]}" "${source[@]}" --json >"$dir/policy-$name.json" ||
        [[ $? == 1 ]]
      t1=$(date +%s.%N)
      echo "$t0 $t1" >"$dir/policy-$name.time"
    done
    policies=$(IFS=,; echo "${names[*]}")
  fi
  if [[ $search == 1 ]]; then
    # Exit status 1 means "no plan fits": still a row.
    "$MEMPLAN" search "$trace" "${flags[@]}" --time-limit "$SEARCH_TIME_LIMIT" --json \
      >"$dir/search.json" || [[ $? == 1 ]]
  fi
  /usr/bin/python3 - "$dir" "$label" "$batch" "$device" "$link" "$memory" "$policies" \
    >>"$out" <<'PY'
import csv, json, os, sys
d, label, batch, device, link, memory, policies = sys.argv[1:8]
w = csv.writer(sys.stdout, lineterminator="\n")
def step_s(j):  # the step's time as `memplan compare` ranks it: back to back (Note [Step period])
    return j["step_s"]
if policies == "all":
    compare = json.load(open(f"{d}/compare.json"))
    ideal = compare["ideal_s"]
    rows = [(r["policy"], r, r["decide_s"], r["note"]) for r in compare["rows"]]
else:
    ideal = step_s(json.load(open(f"{d}/ideal.json")))
    rows = []
    for p in policies.split(","):
        t0, t1 = map(float, open(f"{d}/policy-{p}.time").read().split())
        j = json.load(open(f"{d}/policy-{p}.json"))
        rows.append((p, j, t1 - t0, "decide_s: wall time of memplan simulate --policy"))
if os.path.exists(f"{d}/search.json"):
    s = json.load(open(f"{d}/search.json"))
    note = (f"best policy {s['best_policy']}; {s['evaluated']} plans; "
            f"{'converged' if s['converged'] else 'stopped by the time limit'}")
    rows.append(("search", s, s["search_s"], note))
def mib(b):  # as memplan prints sizes: B, KiB, MiB or GiB
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b} B"
def why_not(j):
    o = j.get("oom")
    if j["feasible"] or not o:
        return ""
    if o["memory"] == "host":
        return f"out of pinned host memory: {mib(o['bytes_missing'])} missing"
    where = f"at op '{o['op']}'" if o["op"] is not None else "before the first op"
    return (f"out of device memory {where}: {o.get('allocation', 'an allocation')} needs "
            f"{mib(o['requested_bytes'])}, largest free block {mib(o['largest_free_block'])}, "
            f"{mib(o['bytes_missing'])} missing; live {mib(o['live_bytes'])} of "
            f"{mib(o['capacity_bytes'])}")
for policy, j, decide_s, note in rows:
    a = j["actions"]
    feasible = bool(j["feasible"])
    w.writerow([label, batch, device, link, memory, policy, int(feasible),
                f"{step_s(j):.9f}" if feasible else "", f"{ideal:.9f}",
                f"{step_s(j) / ideal - 1:.6f}" if feasible else "", j["peak_bytes"],
                a["keep"], a["swap"], a["recompute"], a["encode"], f"{decide_s:.3f}", note,
                why_not(j)])
PY
}
