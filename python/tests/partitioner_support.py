"""torch.compile's memory-budget partitioner against memplan's emulation of it (issue 37), shared by
bench/partitioner-vs-pytorch.py and test_budget_partitioner_vs_pytorch.py: the models, what the
compiled step saves for backward (saved-tensor hooks), what memplan's `budget-partitioner=B` plan
keeps on the same step captured eagerly, and the tensors only one side saves.

Needs PyTorch 2.4 or later (`torch._functorch.config.activation_memory_budget`) and torchvision."""
import collections

import torch
import torch._functorch.config as functorch_config
import torchvision
from torch.nn import functional as F

import memplan
from memplan.torch import capture
from memplan.torch.capture import memplan_trace
from memplan.torch.models import GPT

from policy_models import mobilenet_small, vit


def gpt():
    """A 2-layer GPT (a GPT block twice), its tokens and labels, and its loss."""
    model = GPT(layers=2, hidden=64, heads=4, sequence=32, vocab=128, dropout=0.0)
    tokens, labels = model.memplan_batch(2, [32])
    return model, tokens, labels, model.memplan_loss


def resnet():
    """torchvision's ResNet-18 on two 32x32 images."""
    model = torchvision.models.resnet18(num_classes=10)
    return model, torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,)), F.cross_entropy


def mobilenet():
    """torchvision's MobileNetV2 code, small (policy_models), on two 32x32 images."""
    return mobilenet_small(), torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,)), F.cross_entropy


def vit_blocks():
    """torchvision's ViT (vit_b_16's code, 2 encoder blocks; policy_models) on two 32x32 images."""
    return vit(), torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,)), F.cross_entropy


def mlp():
    """Four 256-wide linear + GELU layers and a classifier, on 64 rows."""
    model = torch.nn.Sequential(*(layer for _ in range(4) for layer in (
        torch.nn.Linear(256, 256), torch.nn.GELU())), torch.nn.Linear(256, 10))
    return model, torch.randn(64, 256), torch.randint(0, 10, (64,)), F.cross_entropy


# name -> (row label, builder): the models the bench and the test compare.
MODELS = {
    "gpt": ("gpt 2 layers", gpt),
    "resnet": ("resnet18 32x32", resnet),
    "mobilenet": ("mobilenet_v2 small 32x32", mobilenet),
    "vit": ("vit 2 blocks 32x32", vit_blocks),
    "mlp": ("mlp 4x256", mlp),
}


def supported():
    """Whether this PyTorch has the memory budget (2.4 and later)."""
    return hasattr(functorch_config, "activation_memory_budget")


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def compiled_saves(model, x, y, loss_fn, budget):
    """The distinct storages the compiled forward and loss save for backward, compiled with
    backend "aot_eager_decomp_partition" (AOTAutograd's decompositions and min-cut partitioner,
    where the budget acts, without inductor's code generation): [(shape, dtype, bytes)], a saved
    view standing for its storage, parameters left out."""
    torch._dynamo.reset()
    previous = functorch_config.activation_memory_budget
    functorch_config.activation_memory_budget = budget
    try:
        step = torch.compile(lambda x, y: loss_fn(model(x), y),
                             backend="aot_eager_decomp_partition")
        parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
        saved = {}

        def pack(t):
            storage = t.untyped_storage()
            if storage.data_ptr() not in parameters:
                saved[storage.data_ptr()] = (tuple(t.shape), dtype_name(t.dtype),
                                             storage.nbytes())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = step(x, y)
        loss.backward()
    finally:
        functorch_config.activation_memory_budget = previous
        torch._dynamo.reset()
    model.zero_grad()
    return list(saved.values())


def captured(model, x, y, loss_fn):
    """The step captured eagerly (memplan.torch.capture), as a trace dict."""
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    return capture(model, (x, y), loss_fn, opt).trace


def emulated_keeps(trace, budget):
    """The maps memplan's `budget-partitioner=B` plan keeps, and the batch tensors backward reads:
    [(name, shape, dtype, bytes)]."""
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


def differences(real, emulated):
    """The tensors only one side saves, matched by dtype and bytes (a saved view of a storage and
    the map of the same data have different shapes): (PyTorch's [(shape, dtype, bytes)],
    memplan's [(name, shape, dtype, bytes)]), largest first."""
    left = collections.Counter((dtype, size) for _, _, dtype, size in emulated)
    only_real = []
    for shape, dtype, size in sorted(real, key=lambda t: -t[2]):
        if left[(dtype, size)] > 0:
            left[(dtype, size)] -= 1
        else:
            only_real.append((shape, dtype, size))
    left = collections.Counter((dtype, size) for _, dtype, size in real)
    only_emulated = []
    for name, shape, dtype, size in sorted(emulated, key=lambda t: -t[3]):
        if left[(dtype, size)] > 0:
            left[(dtype, size)] -= 1
        else:
            only_emulated.append((name, shape, dtype, size))
    return only_real, only_emulated


def rows(make, budgets):
    """The comparisons for one model, a fresh one from `make` (seeded), captured once: [(budget,
    PyTorch's saves, memplan's keeps)]."""
    torch.manual_seed(0)
    model, x, y, loss_fn = make()
    trace = captured(model, x, y, loss_fn)
    return [(budget, compiled_saves(model, x, y, loss_fn, budget), emulated_keeps(trace, budget))
            for budget in budgets]
