#!/usr/bin/python3
"""Capture and validate in PyTorch (issues 16, 17 and 41): for resnet18, mobilenet_v2 and a GPT block
(also densenet121 and efficientnet_b0 with --models) on the CPU or, with --device cuda, a GPU, capture
one step (op counts, saved bytes against the hooks, capture time), then validate a
swap-heavy plan (swap-all), recompute-heavy plans (recompute-all, checkpoint-sqrt: maps made from
regenerated intermediates), `memplan search`'s plan at
a memory budget of the in-core peak less 50% of the feature-map bytes (then 45%, 42%, 40% when the
search finds no plan that fits), and with --encode the in-core plan with Gist's encodings wherever
their consumer patterns hold (`--encode binarize,sparse`, then fp10, then fp8).

Usage: bench/torch-capture-validate.py [--batch N] [--size S] [--models M,..] [--time-limit S]
                                       [--device cpu|cuda] [--encode] [MEMPLAN_BINARY]
A column says what copies the recomputations made the step still held at its end (0: each let go
where the lowering frees it). On a GPU the table adds the step's CUDA memory (torch.cuda.max_memory_allocated above the resident
tensors) against the simulator's prediction of the same. MEMPLAN_PYTHON_PATH, when set, is where
the memplan package is imported from (default: build/release/python).
Timings depend on the machine's load; they are figures for a report, never a test.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, os.environ.get("MEMPLAN_PYTHON_PATH", str(ROOT / "build/release/python")))

import torch  # noqa: E402
import torchvision  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from memplan.torch import capture, saved_bytes_in_trace  # noqa: E402
from memplan.torch.models import GPT  # noqa: E402
from memplan.torch.validate import validate  # noqa: E402


def models(names, batch, size, device):
    """(name, model, batch, loss) for each name, on `device`."""
    torch.manual_seed(0)
    image = (torch.randn(batch, 3, size, size, device=device),
             torch.randint(0, 1000, (batch,), device=device))
    for name in names:
        if name == "gpt_block":
            gpt = GPT(layers=1, hidden=256, heads=4, sequence=128, vocab=1024).to(device)
            yield (name, gpt, tuple(t.to(device) for t in gpt.memplan_batch(batch, [128])),
                   gpt.memplan_loss)
        else:
            yield name, getattr(torchvision.models, name)().to(device), image, F.cross_entropy


def plan_for(memplan, trace_path, how, folder, time_limit):
    plan_path = pathlib.Path(folder) / f"{how[0]}.plan.json"
    if how[0] == "search":
        info = json.loads(subprocess.run([memplan, "info", "--json", trace_path],
                                         capture_output=True, text=True, check=True).stdout)
        budget = info["peak_bytes_incore"] - int(info["feature_map_bytes"] * how[1])
        cmd = [memplan, "search", trace_path, "--memory", f"{budget}B", "--time-limit",
               str(time_limit), "--deterministic", "--maps-only", "-o", plan_path]
    elif how[0] == "encode":
        cmd = [memplan, "simulate", trace_path, "--policy", "in-core", "--encode", how[1],
               "--memory", "1024GiB", "--plan-out", plan_path]
    else:
        cmd = [memplan, "simulate", trace_path, "--policy", how[0], "--memory", "1024GiB",
               "--plan-out", plan_path]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        return None, run.stderr.strip() or run.stdout.strip().splitlines()[-1]
    return json.loads(plan_path.read_text()), ""


def cuda_columns(v):
    """The step's CUDA memory above the resident tensors, predicted and measured (GPU runs)."""
    if v["measured_cuda_step_peak_bytes"] is None:
        return ""
    return (f" {v['predicted_step_peak_bytes']:,} | {v['measured_cuda_step_peak_bytes']:,} | "
            f"{v['baseline_cuda_step_peak_bytes']:,} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--models", default="resnet18,mobilenet_v2,gpt_block",
                        help="gpt_block or torchvision model names (resnet18, densenet121, ...)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--time-limit", type=float, default=30, help="seconds for each search")
    parser.add_argument("--encode", action="store_true",
                        help="also the in-core plan with binarize,sparse, then fp10, then fp8")
    parser.add_argument("memplan", nargs="?", default=str(ROOT / "build/release/bin/memplan"))
    args = parser.parse_args()
    rows = []
    for name, model, batch, loss_fn in models(args.models.split(","), args.batch, args.size,
                                              torch.device(args.device)):
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)
        result = capture(model, batch, loss_fn, opt, name=name)
        s = result.stats
        print(f"{name}: {s['ops']} ops {s['ops_by_phase']}, saved {saved_bytes_in_trace(result.trace)}"
              f" B in the trace vs {result.saved_bytes_hooks} B by the hooks, capture "
              f"{s['capture_seconds']:.2f} s")
        with tempfile.TemporaryDirectory() as folder:
            trace_path = pathlib.Path(folder) / "trace.json"
            result.save(trace_path)
            hows = [("swap-all",), ("recompute-all",), ("checkpoint-sqrt",)] + \
                [("search", f) for f in (0.5, 0.45, 0.42, 0.4)]
            if args.encode:
                hows += [("encode", e) for e in ("binarize,sparse", "fp10", "fp8")]
            found = False
            for how in hows:
                if how[0] == "search" and found:
                    continue
                plan, why = plan_for(args.memplan, trace_path, how, folder, args.time_limit)
                if plan is None:
                    print(f"  {' '.join(map(str, how))}: no plan: {why}")
                    continue
                found = found or how[0] == "search"
                started = time.perf_counter()
                v = validate(model, batch, loss_fn, opt, plan, result)
                actions = {}
                for m in plan["maps"]:
                    actions[m["action"]] = actions.get(m["action"], 0) + 1
                error = v["measured_seconds"] / v["predicted_seconds"] - 1
                if v["narrowed_maps"]:
                    exact = (f"{v['gradient_relative_error']:.1e} ≤ {v['gradient_tolerance']:.2g}"
                             if v.within_tolerance else
                             f"NO: {v['gradient_relative_error']:.1e} > "
                             f"{v['gradient_tolerance']:.2g}")
                else:
                    exact = "yes" if v.lossless_ok else "NO"
                if v["sparse_spilled_bytes"]:
                    exact += f" (sparse spilled {v['sparse_spilled_bytes']:,} B)"
                rows.append(f"| {name} | {' '.join(map(str, how))} "
                            f"({', '.join(f'{k} {n}' for k, n in sorted(actions.items()))}) | "
                            f"{exact} | "
                            f"{v['predicted_saved_peak_bytes']:,} | {v['measured_saved_peak_bytes']:,} | "
                            f"{v['predicted_host_peak_bytes']:,} | {v['measured_host_peak_bytes']:,} | "
                            f"{v['predicted_seconds']:.3f} | {v['measured_seconds']:.3f} | "
                            f"{error:+.0%} | {v['regenerated_left_bytes']:,} |" + cuda_columns(v))
                print(f"  {' '.join(map(str, how))}: validated in "
                      f"{time.perf_counter() - started:.1f} s", flush=True)
    cuda = args.device == "cuda"
    print("\n| model | plan | bitwise (or relative error ≤ bound) | predicted saved peak (B) | "
          "measured saved peak (B) | predicted host peak (B) | measured host peak (B) | "
          "predicted time (s) | measured time (s) | time error | regenerated, held at the end (B) |" +
          (" predicted step CUDA memory (B) | measured (B) | baseline step's (B) |" if cuda else ""))
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" +
          (" ---: | ---: | ---: |" if cuda else ""))
    print("\n".join(rows))

if __name__ == "__main__":
    main()
