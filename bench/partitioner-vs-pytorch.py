"""Issue 37: memplan's emulation of torch.compile's memory-budget partitioner against the
partitioner itself. For each model and activation_memory_budget, the step is compiled
(backend "aot_eager_decomp_partition": AOTAutograd's decompositions and its min-cut partitioner,
which is where the budget acts, without inductor's code generation) and run once under saved-tensor
hooks, counting the distinct storages the compiled forward saves for backward (parameters left
out); memplan's `budget-partitioner=B` plan on the same step captured eagerly
(memplan.torch.capture) keeps its maps' bytes. One row per model and budget: both byte counts,
both tensor counts, and the difference.

    $(scripts/setup --torch2-python) bench/partitioner-vs-pytorch.py [BUILD_DIR]

Needs PyTorch 2.4 or later (the budget); a few seconds a row on two cores.
"""
import pathlib
import sys

import torch
import torch._functorch.config as functorch_config
from torch.nn import functional as F

ROOT = pathlib.Path(__file__).resolve().parents[1]
build = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build/release"
sys.path.insert(0, str(build / "python"))

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


def compiled_saves(model, x, y, loss_fn, budget):
    """Bytes and count of the distinct storages the compiled forward and loss save for backward."""
    torch._dynamo.reset()
    functorch_config.activation_memory_budget = budget
    step = torch.compile(lambda x, y: loss_fn(model(x), y), backend="aot_eager_decomp_partition")
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = step(x, y)
    loss.backward()
    model.zero_grad()
    return sum(saved.values()), len(saved)


def emulated_keeps(trace, budget):
    plan = memplan.simulate(memplan_trace(trace), policy=f"budget-partitioner={budget}",
                            memory="64GiB").plan.to_dict()
    sizes = {t["id"]: t["bytes"] for t in trace["tensors"]}
    sizes.update({t["name"]: t["bytes"] for t in trace["tensors"]})
    kept = [sizes[m["tensor"]] for m in plan["maps"] if m["action"] == "keep"]
    # A batch tensor backward reads that is no map (no plan decides about it) is saved too.
    maps = {m["tensor"] for m in plan["maps"]}
    read = {t for op in trace["ops"] if op["phase"] == "backward" for t in op["inputs"]}
    kept += [t["bytes"] for t in trace["tensors"] if t["kind"] == "input" and t["id"] in read
             and t["id"] not in maps and t["name"] not in maps]
    return sum(kept), len(kept)


def main():
    print("| model | budget | PyTorch saves | memplan keeps | difference |")
    print("| --- | --- | --- | --- | --- |")
    for name, make in (("gpt 2 layers", gpt), ("resnet18 32x32", resnet), ("mlp 4x256", mlp)):
        torch.manual_seed(0)
        model, x, y, loss_fn = make()
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        trace = capture(model, (x, y), loss_fn, opt).trace
        for budget in (1.0, 0.7, 0.5, 0.3, 0.0):
            real, real_n = compiled_saves(model, x, y, loss_fn, budget)
            emulated, emulated_n = emulated_keeps(trace, budget)
            difference = f"{(emulated - real) / max(real, 1) * 100:+.1f}%"
            print(f"| {name} | {budget} | {real:,} B ({real_n}) | {emulated:,} B ({emulated_n}) "
                  f"| {difference} |", flush=True)


if __name__ == "__main__":
    main()
