#!/usr/bin/env python3
"""Predicted against measured, one row per `memplan validate --json` output (issue 41's table).

  bench/validate-table.py NET.PLAN.validate.json ...

Each file is named NET.PLAN.validate.json (as scripts/gpu-check writes them). Prints a Markdown
table: step time predicted and measured and their error, peak bytes predicted and measured, and
whether the gradients are the in-core run's bits; then the median and the worst |error| over the
rows that ran. A file that is empty or not JSON (the run failed or did not fit) is a row saying so.
"""
import json
import pathlib
import statistics
import sys


def main(paths):
    print("| network | plan | step predicted (ms) | measured (ms) | error | peak predicted (B) | "
          "measured (B) | peaks equal | gradients bitwise |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    errors = []
    for path in map(pathlib.Path, paths):
        net, plan = path.name.split(".")[:2]
        try:
            r = json.loads(path.read_text())
        except (OSError, ValueError):
            print(f"| {net} | {plan} | no result (see the log) | | | | | | |")
            continue
        if not r.get("fits", False) or r.get("iteration_s_measured") is None:
            print(f"| {net} | {plan} | does not fit | | | | | | |")
            continue
        predicted, measured = r["iteration_s_predicted"], r["iteration_s_measured"]
        error = (measured - predicted) / predicted * 100
        errors.append(abs(error))
        print(f"| {net} | {plan} | {predicted * 1e3:.2f} | {measured * 1e3:.2f} | {error:+.1f}% | "
              f"{r['peak_bytes_predicted']:,} | {r['peak_bytes_measured']:,} | "
              f"{'yes' if r['peaks_match'] else 'NO'} | "
              f"{'yes' if r['gradients_match'] else 'NO'} |")
    if errors:
        print(f"\n{len(errors)} runs: median |error| {statistics.median(errors):.1f}%, "
              f"worst {max(errors):.1f}%")


if __name__ == "__main__":
    main(sys.argv[1:])
