"""Issue 37 in PyTorch: the search's plan and the best of today's policies at the same byte
budget, both carried out by memplan.torch.apply on the same CPU in one run. For each model and
budget (a budget of f keeps at most f of the in-core feature-map bytes on the device: the in-core
peak less (1 - f) of them), today's policies that run in PyTorch (full-ac, selective-ac,
selective-ac-layer, megatron-selective, budget-partitioner, offload-activations; the offload
rows place parameters on the host, which apply does not carry out) are simulated, the fastest
that fits is taken, and the search (maps only, 10 s) runs; then both plans run STEPS steps each,
one after the other, and each row gives the predicted step and saved-bytes peak
(memplan.torch.validate's prediction) beside the measured ones (the median step; the peak is the
same every step).

    $(scripts/setup --torch2-python) bench/today-vs-search-torch.py [BUILD_DIR]
    STEPS (default 5), TODAY_TORCH_BUDGETS (default "0.7 0.5 0.3")

The simulated device is the capture's (the CPU, with the host's memory and no copy engine worth
the name): what the table shows is whether each plan's peak and relative cost hold when PyTorch
runs it, not a GPU's times. A few minutes on two cores.
"""
import os
import pathlib
import statistics
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
build = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build/release"
sys.path.insert(0, str(build / "python"))

import memplan  # noqa: E402
import memplan.torch  # noqa: E402
from memplan.torch.models import GPT  # noqa: E402
from memplan.torch.validate import predict  # noqa: E402

TODAY = ("full-ac", "selective-ac", "selective-ac-layer", "megatron-selective",
         "budget-partitioner", "offload-activations")
STEPS = int(os.environ.get("STEPS", "5"))
BUDGETS = [float(b) for b in os.environ.get("TODAY_TORCH_BUDGETS", "0.7 0.5 0.3").split()]


def gpt():
    model = GPT(layers=4, hidden=128, heads=4, sequence=128, vocab=512, dropout=0.1)
    return model, model.memplan_batch(8, [128]), model.memplan_loss


def resnet():
    import torchvision
    model = torchvision.models.resnet18(num_classes=10)
    batch = (torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,)))
    return model, batch, torch.nn.functional.cross_entropy


def measure(model, plan, captured, batch, loss_fn, optimizer):
    planned = memplan.torch.apply(model, plan, captured)
    seconds, peaks = [], set()
    for _ in range(STEPS):
        planned.step(batch, loss_fn, optimizer)
        seconds.append(planned.stats["step_seconds"])
        peaks.add(planned.stats["peak_saved_bytes"])
    return statistics.median(seconds), max(peaks)


def main():
    print("| model | budget | plan | predicted step | measured step | predicted peak | "
          "measured peak |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, make in (("gpt 4x128, b8x128", gpt), ("resnet18 b16 64x64", resnet)):
        torch.manual_seed(0)
        model, batch, loss_fn = make()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        captured = memplan.torch.capture(model, batch, loss_fn, optimizer)
        info = memplan.info(captured)
        for f in BUDGETS:
            memory = f"{int(info.peak_bytes_incore - (1 - f) * info.feature_map_bytes)}B"
            runs = [memplan.simulate(captured, policy=p, memory=memory) for p in TODAY]
            fits = sorted((r for r in runs if r.feasible), key=lambda r: r.step_s)
            found = memplan.search(captured, memory=memory, maps_only=True, time_limit=10)
            plans = [(fits[0].plan.policy, fits[0])] if fits else []
            if found.feasible:
                plans.append(("search", found))
            for label, result in plans:
                _, predicted = predict(result.plan, captured, memory=memory)
                step, peak = measure(model, result.plan, captured, batch, loss_fn, optimizer)
                print(f"| {name} | {f:.0%} | {label} | {predicted['predicted_seconds'] * 1e3:.1f} "
                      f"ms | {step * 1e3:.1f} ms | {predicted['predicted_saved_peak_bytes']:,} B | "
                      f"{peak:,} B |", flush=True)
            if not fits:
                print(f"| {name} | {f:.0%} | none of today's fits | - | - | - | - |", flush=True)


if __name__ == "__main__":
    main()
