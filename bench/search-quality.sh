#!/usr/bin/env bash
# Issue 6's quality table: on the reproduction workloads, the search's overhead against the ideal
# device beside pooch's and the best policy's (goal: at most 0.6x pooch's where pooch has any).
# Writes the per-policy rows (scripts/reproduce-common.sh format) to OUT.rows.csv and the table to
# OUT (default out/search-quality.csv), and prints the table.
#   bench/search-quality.sh [OUT.csv]   MEMPLAN=..., SEARCH_TIME_LIMIT=seconds (default 20)
# Runtime: a few minutes without 1517; ResNet-1517 alone takes about 10 minutes of CPU (PoocH's
# r(X) passes over 6,080 maps, run by `compare` and again by the search's seeding).
#   QUALITY_WORKLOADS="resnet50 vgg16 resnext 1517" picks a subset; QUALITY_EXTRA_ROWS=FILE adds
#   rows already made (e.g. out/reproductions/pooch.csv from scripts/reproduce-pooch.sh, whose
#   ResNet-50 batches 256-640 are the same runs) to the table.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/search-quality.csv}
rows=${out%.csv}.rows.csv
workloads=${QUALITY_WORKLOADS:-resnet50 vgg16 resnext 1517}
source scripts/reproduce-common.sh
repro_begin "$rows"
for w in $workloads; do
  case $w in
    resnet50)
      for batch in 256 384 512 640; do
        repro_zoo "$REPRO_TMP/t.json" resnet50 "$batch" v100-16gb
        for link in pcie3 nvlink2; do
          repro_run "$rows" "$REPRO_TMP/t.json" resnet50 "$batch" v100-16gb "$link" - all 1
        done
      done ;;
    vgg16)
      repro_zoo "$REPRO_TMP/t.json" vgg16 256 titanx-maxwell --caffe
      repro_run "$rows" "$REPRO_TMP/t.json" vgg16-caffe 256 titanx-maxwell pcie3 - all 1 ;;
    resnext)
      # Batch 1 fits a 16 GB V100 in-core (765 MiB peak) and no budget under that fits (the
      # stem conv's 197 MiB workspace); batch 96 is over (18.3 GiB in-core peak).
      repro_zoo "$REPRO_TMP/t.json" resnext101-3d "${RESNEXT_BATCH:-96}" v100-16gb --input 16x112x112
      repro_run "$rows" "$REPRO_TMP/t.json" resnext101-3d "${RESNEXT_BATCH:-96}" v100-16gb pcie3 - \
        all 1 ;;
    1517)
      repro_zoo "$REPRO_TMP/t.json" resnet "${RESNET1517_BATCH:-16}" titanx-maxwell --depth 1517
      repro_run "$rows" "$REPRO_TMP/t.json" resnet1517 "${RESNET1517_BATCH:-16}" titanx-maxwell \
        pcie3 - all 1 ;;
    *) echo "search-quality: unknown workload '$w'" >&2; exit 2 ;;
  esac
done
if [[ -n ${QUALITY_EXTRA_ROWS:-} ]]; then
  # Batch 128 fits in-core: not a quality workload.
  tail -n +2 "$QUALITY_EXTRA_ROWS" | grep -v '^resnet50,128,' >>"$rows"
fi
/usr/bin/python3 - "$rows" "$out" <<'PY'
import csv, sys
rows_path, out_path = sys.argv[1:3]
groups = {}
for r in csv.DictReader(open(rows_path)):
    key = (r["workload"], r["batch"], r["device"], r["link"], r["memory"])
    groups.setdefault(key, {})[r["policy"]] = r
def over(r):
    return float(r["overhead"]) if r and r["feasible"] == "1" else None
fmt = lambda x: "" if x is None else f"{x:.4f}"
with open(out_path, "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["workload", "batch", "device", "link", "memory", "ideal_s", "pooch_overhead",
                "best_policy", "best_policy_overhead", "search_overhead", "search_over_pooch",
                "search_s"])
    for key, g in groups.items():
        policies = {p: r for p, r in g.items() if p != "search"}
        fitting = [(over(r), p) for p, r in policies.items() if over(r) is not None]
        best = min(fitting) if fitting else (None, "none fits")
        pooch, search = over(g.get("pooch")), over(g.get("search"))
        ratio = search / pooch if (search is not None and pooch) else None
        w.writerow([*key, next(iter(g.values()))["ideal_s"], fmt(pooch), best[1], fmt(best[0]),
                    fmt(search), "" if ratio is None else f"{ratio:.2f}",
                    g["search"]["decide_s"] if "search" in g else ""])
print(open(out_path).read(), end="")
PY
