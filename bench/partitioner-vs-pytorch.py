"""Issue 37: memplan's emulation of torch.compile's memory-budget partitioner against the
partitioner itself. For each model and activation_memory_budget, the step is compiled
(backend "aot_eager_decomp_partition": AOTAutograd's decompositions and its min-cut partitioner,
which is where the budget acts, without inductor's code generation) and run once under saved-tensor
hooks, counting the distinct storages the compiled forward saves for backward (parameters left
out); memplan's `budget-partitioner=B` plan on the same step captured eagerly
(memplan.torch.capture) keeps its maps' bytes. One row per model and budget: both byte counts,
both tensor counts, and the difference. With --verbose, after each row, the tensors only one side
saves, by shape and dtype (PyTorch's as its saved-tensor hooks see them, memplan's by map name).

    $(scripts/setup --torch2-python) bench/partitioner-vs-pytorch.py [--verbose] [--model gpt|resnet|mlp]... [BUILD_DIR]

Needs PyTorch 2.4 or later (the budget); a few seconds a row on two cores.
"""
import argparse
import collections
import pathlib
import sys

import torch
import torch._functorch.config as functorch_config
from torch.nn import functional as F

ROOT = pathlib.Path(__file__).resolve().parents[1]
parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("build", nargs="?", type=pathlib.Path, default=ROOT / "build/release")
parser.add_argument("--verbose", action="store_true",
                    help="list the tensors only one side saves, by shape and dtype")
parser.add_argument("--model", action="append", choices=("gpt", "resnet", "mlp"),
                    help="only this model's rows (repeatable; all three by default)")
args = parser.parse_args()
sys.path.insert(0, str(args.build / "python"))

import memplan  # noqa: E402
from memplan.torch import capture  # noqa: E402
from memplan.torch.capture import memplan_trace  # noqa: E402
from memplan.torch.models import GPT  # noqa: E402


def gpt():
    model = GPT(layers=2, hidden=64, heads=4, sequence=32, vocab=128, dropout=0.0)
    tokens, labels = model.memplan_batch(2, [32])
    return model, tokens, labels, model.memplan_loss


def resnet():
    import torchvision
    model = torchvision.models.resnet18(num_classes=10)
    return model, torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,)), F.cross_entropy


def mlp():
    model = torch.nn.Sequential(*(layer for _ in range(4) for layer in (
        torch.nn.Linear(256, 256), torch.nn.GELU())), torch.nn.Linear(256, 10))
    return model, torch.randn(64, 256), torch.randint(0, 10, (64,)), F.cross_entropy


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def compiled_saves(model, x, y, loss_fn, budget):
    """The distinct storages the compiled forward and loss save for backward: {storage: (shape,
    dtype, bytes)}, a saved view standing for its storage."""
    torch._dynamo.reset()
    functorch_config.activation_memory_budget = budget
    step = torch.compile(lambda x, y: loss_fn(model(x), y), backend="aot_eager_decomp_partition")
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = (tuple(t.shape), dtype_name(t.dtype), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = step(x, y)
    loss.backward()
    model.zero_grad()
    return list(saved.values())


def emulated_keeps(trace, budget):
    """The maps memplan's plan keeps, and the batch tensors backward reads: [(name, shape, dtype,
    bytes)]."""
    plan = memplan.simulate(memplan_trace(trace), policy=f"budget-partitioner={budget}",
                            memory="64GiB").plan.to_dict()
    tensors = {t["id"]: t for t in trace["tensors"]}
    tensors.update({t["name"]: t for t in trace["tensors"]})
    kept = [tensors[m["tensor"]] for m in plan["maps"] if m["action"] == "keep"]
    # A batch tensor backward reads that is no map (no plan decides about it) is saved too.
    maps = {m["tensor"] for m in plan["maps"]}
    read = {t for op in trace["ops"] if op["phase"] == "backward" for t in op["inputs"]}
    kept += [t for t in trace["tensors"] if t["kind"] == "input" and t["id"] in read
             and t["id"] not in maps and t["name"] not in maps]
    return [(t["name"], tuple(t.get("shape", ())), t.get("dtype", "?"), t["bytes"]) for t in kept]


def print_differences(real, emulated):
    """The tensors only one side saves, matched by dtype and bytes (a saved view of a storage and
    the map of the same data have different shapes)."""
    left = collections.Counter((dtype, size) for _, dtype, size in emulated_keys(emulated))
    for shape, dtype, size in sorted(real, key=lambda t: -t[2]):
        if left[(dtype, size)] > 0:
            left[(dtype, size)] -= 1
        else:
            print(f"    PyTorch only: {list(shape)} {dtype} ({size:,} B)")
    left = collections.Counter((dtype, size) for _, dtype, size in real)
    for name, shape, dtype, size in sorted(emulated, key=lambda t: -t[3]):
        if left[(dtype, size)] > 0:
            left[(dtype, size)] -= 1
        else:
            print(f"    memplan only: {name} {list(shape)} {dtype} ({size:,} B)")


def emulated_keys(emulated):
    return [(shape, dtype, size) for _, shape, dtype, size in emulated]


def main():
    print("| model | budget | PyTorch saves | memplan keeps | difference |")
    print("| --- | --- | --- | --- | --- |")
    for name, make in (("gpt 2 layers", gpt), ("resnet18 32x32", resnet), ("mlp 4x256", mlp)):
        if args.model and make.__name__ not in args.model:
            continue
        torch.manual_seed(0)
        model, x, y, loss_fn = make()
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        trace = capture(model, (x, y), loss_fn, opt).trace
        for budget in (1.0, 0.7, 0.5, 0.3, 0.0):
            saved = compiled_saves(model, x, y, loss_fn, budget)
            kept = emulated_keeps(trace, budget)
            real, real_n = sum(size for *_, size in saved), len(saved)
            emulated, emulated_n = sum(size for *_, size in kept), len(kept)
            difference = f"{(emulated - real) / max(real, 1) * 100:+.1f}%"
            print(f"| {name} | {budget} | {real:,} B ({real_n}) | {emulated:,} B ({emulated_n}) "
                  f"| {difference} |", flush=True)
            if args.verbose:
                print_differences(saved, kept)


if __name__ == "__main__":
    main()
