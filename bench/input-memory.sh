#!/usr/bin/env bash
# Peak memory and time of reading big and hostile inputs (#40 item 2): a 10^6-event profiler trace
# (the A100 trace of ../shared/data/kineto-current repeated with its times, ids and step numbers
# shifted), a gzip of spaces, a gzip of 70 M tiny events, /dev/zero, and `memplan --help`. Prints
# one line per input: seconds, peak resident set, the exit status and the first line of stderr.
# Usage: bench/input-memory.sh [BUILD_DIR]   (default build/release; inputs under $TMPDIR)
set -euo pipefail
cd "$(dirname "$0")/.."
MEMPLAN=${1:-build/release}/bin/memplan
SHARED=${SHARED:-../shared}
WORK=${TMPDIR:-/tmp}/memplan-input-memory
mkdir -p "$WORK"

/usr/bin/python3 - "$SHARED/data/kineto-current/a100_training_control.pt.trace.json.gz" "$WORK" <<'EOF'
import gzip, json, os, re, sys
src, work = sys.argv[1], sys.argv[2]
big = os.path.join(work, "events-1e6.json")
if not os.path.exists(big):
    d = json.load(gzip.open(src))
    ev = d["traceEvents"]
    ts = [e["ts"] for e in ev if isinstance(e.get("ts"), (int, float))]
    span = max(ts) - min(ts) + 1000
    nsteps = len({e["name"] for e in ev if e.get("name", "").startswith("ProfilerStep#")})
    out, copy = [], 0
    while len(out) < 1_000_000:
        for e in ev:
            if copy and e.get("ph") == "M":
                continue
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += copy * span
            if "args" in e:
                e["args"] = {k: (v + copy * 10_000_000 if k in ("External id", "external id",
                             "correlation", "Sequence number") and isinstance(v, int) and v > 0
                             else v) for k, v in e["args"].items()}
            if isinstance(e.get("id"), int):
                e["id"] += copy * 10_000_000
            m = re.match(r"ProfilerStep#(\d+)", e.get("name", ""))
            if m:
                e["name"] = "ProfilerStep#%d" % (int(m.group(1)) + copy * nsteps)
            out.append(e)
            if len(out) == 1_000_000:
                break
        copy += 1
    d["traceEvents"] = out
    with open(big + ".tmp", "w") as f:
        json.dump(d, f)
    os.replace(big + ".tmp", big)
spaces = os.path.join(work, "spaces.json.gz")
if not os.path.exists(spaces):  # 5 GB of spaces
    with gzip.open(spaces, "wb", compresslevel=9) as f:
        block = b" " * (1 << 24)
        for _ in range(300):
            f.write(block)
tiny = os.path.join(work, "tiny-events.json.gz")
if not os.path.exists(tiny):  # 70 M tiny events
    with gzip.open(tiny, "wb", compresslevel=9) as f:
        f.write(b'{"traceEvents": [')
        event = b'{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1},'
        block = event * 100_000
        for _ in range(700):
            f.write(block)
        f.write(event[:-1] + b"]}")
EOF

measure() {
  local name=$1; shift
  local status=0
  /usr/bin/time -o "$WORK/time" -f "%e %M" "$@" >/dev/null 2>"$WORK/err" || status=$?
  read -r seconds kb < <(tail -1 "$WORK/time")
  printf '%-34s %7.2f s %7d MB  exit %d  %s\n' "$name" "$seconds" "$((kb / 1024))" "$status" \
    "$(head -1 "$WORK/err" | cut -c1-110)"
}

size=$(stat -c %s "$WORK/events-1e6.json")
echo "events-1e6.json: $((size / 1000000)) MB; goal: import under 3x that"
measure "memplan --help" "$MEMPLAN" --help
measure "import kineto (10^6 events)" "$MEMPLAN" import kineto "$WORK/events-1e6.json" -o /dev/null
measure "info (10^6-event profiler trace)" "$MEMPLAN" info "$WORK/events-1e6.json"
measure "info /dev/zero" "$MEMPLAN" info /dev/zero
measure "import kineto spaces.json.gz" "$MEMPLAN" import kineto "$WORK/spaces.json.gz" -o /dev/null
measure "import kineto tiny-events.json.gz" "$MEMPLAN" import kineto "$WORK/tiny-events.json.gz" -o /dev/null
