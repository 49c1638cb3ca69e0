"""Issue 37: memplan's emulation of torch.compile's memory-budget partitioner against the
partitioner itself. For each model and activation_memory_budget, the step is compiled
(backend "aot_eager_decomp_partition": AOTAutograd's decompositions and its min-cut partitioner,
which is where the budget acts, without inductor's code generation) and run once under saved-tensor
hooks, counting the distinct storages the compiled forward saves for backward (parameters left
out); memplan's `budget-partitioner=B` plan on the same step captured eagerly
(memplan.torch.capture) keeps its maps' bytes. One row per model and budget: both byte counts,
both tensor counts, and the difference. With --verbose, after each row, the tensors only one side
saves, by shape and dtype (PyTorch's as its saved-tensor hooks see them, memplan's by map name).
The models and the counting are python/tests/partitioner_support.py's, which
python/tests/test_budget_partitioner_vs_pytorch.py asserts on.

    $(scripts/setup --torch2-python) bench/partitioner-vs-pytorch.py [--verbose] [--model NAME]... [BUILD_DIR]

Needs PyTorch 2.4 or later (the budget) and torchvision; a few seconds a row on two cores.
"""
import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL_NAMES = ("gpt", "resnet", "mobilenet", "vit", "mlp")
parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("build", nargs="?", type=pathlib.Path, default=ROOT / "build/release")
parser.add_argument("--verbose", action="store_true",
                    help="list the tensors only one side saves, by shape and dtype")
parser.add_argument("--model", action="append", choices=MODEL_NAMES,
                    help="only this model's rows (repeatable; all by default)")
parser.add_argument("--budget", action="append", type=float,
                    help="only this budget's rows (repeatable; 1, 0.7, 0.5, 0.3, 0 by default)")
args = parser.parse_args()
sys.path.insert(0, str(args.build / "python"))
sys.path.insert(0, str(ROOT / "python/tests"))  # the models and the counting, shared with the test

from partitioner_support import MODELS, differences, rows  # noqa: E402


def main():
    print("| model | budget | PyTorch saves | memplan keeps | difference |")
    print("| --- | --- | --- | --- | --- |")
    for key in MODEL_NAMES:
        if args.model and key not in args.model:
            continue
        label, make = MODELS[key]
        for budget, saved, kept in rows(make, args.budget or (1.0, 0.7, 0.5, 0.3, 0.0)):
            real, real_n = sum(size for *_, size in saved), len(saved)
            emulated, emulated_n = sum(size for *_, size in kept), len(kept)
            difference = f"{(emulated - real) / max(real, 1) * 100:+.1f}%"
            print(f"| {label} | {budget} | {real:,} B ({real_n}) | {emulated:,} B ({emulated_n}) "
                  f"| {difference} |", flush=True)
            if args.verbose:
                only_real, only_emulated = differences(saved, kept)
                for shape, dtype, size in only_real:
                    print(f"    PyTorch only: {list(shape)} {dtype} ({size:,} B)")
                for name, shape, dtype, size in only_emulated:
                    print(f"    memplan only: {name} {list(shape)} {dtype} ({size:,} B)")


if __name__ == "__main__":
    main()
