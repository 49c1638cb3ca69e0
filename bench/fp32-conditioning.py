#!/usr/bin/python3
"""How far a network's fp32 training step is from the exact one (issue 41, item 1): for torchvision
networks on the CPU, the relative L2 distance of all fp32 weight gradients of one step from the
same step in float64 (same weights, same batch, dropout off), with the largest element difference.

Two correct fp32 implementations of a step (cuDNN on a GPU, memplan's host backend) can each be
this far from the exact gradients, so they can differ from one another by about as much: a
cross-backend tolerance below it fails correct kernels.

  bench/fp32-conditioning.py [NET:BATCH:SIZE ...]     (default: the rows of docs/gpu-validation.md)
Figures depend on the weights' random initialisation (seed 0); run with Debian's python3.
"""
import sys

import torch
import torchvision
from torch.nn import functional as F


def gradients(model, x, y):
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    return torch.cat([p.grad.flatten().double() for p in model.parameters()])


def main(cases):
    print("| network | batch | input | relative L2 (fp32 vs fp64) | max abs diff | gradient norm |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for case in cases:
        name, batch, size = case.split(":")
        batch, size = int(batch), int(size)
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)().train()
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        x, y = torch.randn(batch, 3, size, size), torch.randint(0, 1000, (batch,))
        g32 = gradients(model, x, y)
        g64 = gradients(model.double(), x.double(), y)
        print(f"| {name} | {batch} | {size}x{size} | {((g32 - g64).norm() / g64.norm()).item():.2e}"
              f" | {(g32 - g64).abs().max().item():.2e} | {g64.norm().item():.3g} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["resnet18:4:64", "densenet121:4:64", "mobilenet_v2:4:64",
                          "mobilenet_v2:8:128", "mobilenet_v2:16:224"])
