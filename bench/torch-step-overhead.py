"""Issue 36: what running a plan through memplan.torch.apply costs per step, against the same
plan written by hand. Each row times whole training steps on this CPU in one thread, by the
process's CPU time (steady when other work shares the cores), the two alternating (STEPS of each
after two warm-up steps, the median): `PlannedModel.step` (the recorder that
gives every tensor its captured id and carries out the plan's packs) against

  - in-core: the plain step (zero_grad, forward, loss, backward, optimizer step), no hooks;
  - full-ac: the same step with each transformer block under torch.utils.checkpoint
    (use_reentrant=False), which is what memplan's `full-ac` plan recomputes.

The goal the issue sets is an overhead of at most 2%.

    $(scripts/setup --torch2-python) bench/torch-step-overhead.py [BUILD_DIR]
    STEPS (default 10)
"""
import copy
import os
import pathlib
import statistics
import sys
import time

import torch
import torch.utils.checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[1]
build = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build/release"
sys.path.insert(0, str(build / "python"))

import memplan  # noqa: E402
import memplan.torch  # noqa: E402
from memplan.torch.capture import default_step  # noqa: E402
from memplan.torch.models import GPT  # noqa: E402

STEPS = int(os.environ.get("STEPS", "10"))


def timed(step):
    start = time.process_time()
    step()
    return time.process_time() - start


def checkpointed_blocks(model):
    """Each block of `model.h` under torch.utils.checkpoint: the hand-written full-ac."""
    for block in model.h:
        forward = block.forward
        block.forward = (lambda f: lambda *a: torch.utils.checkpoint.checkpoint(
            f, *a, use_reentrant=False))(forward)


def compare(label, model, batch, loss_fn, policy, by_hand=lambda m: None):
    """`model` under memplan's `policy` against a copy of it that `by_hand` prepares, each with
    its own optimizer."""
    hand = copy.deepcopy(model)
    by_hand(hand)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    hand_optimizer = torch.optim.SGD(hand.parameters(), lr=1e-3, momentum=0.9)
    captured = memplan.torch.capture(model, batch, loss_fn, optimizer)
    plan = memplan.simulate(captured, policy=policy).plan
    planned = memplan.torch.apply(model, plan, captured)
    mine = lambda: planned.step(batch, loss_fn, optimizer)  # noqa: E731
    theirs = lambda: default_step(hand, batch, loss_fn, hand_optimizer)  # noqa: E731
    for _ in range(2):
        mine()
        theirs()
    a, b = [], []
    for _ in range(STEPS):
        a.append(timed(mine))
        b.append(timed(theirs))
    planned_s, hand_s = statistics.median(a), statistics.median(b)
    print(f"| {label} | {policy} | {hand_s * 1e3:.1f} ms | {planned_s * 1e3:.1f} ms | "
          f"{(planned_s / hand_s - 1) * 100:+.1f}% |", flush=True)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print("| model | plan | by hand | memplan.torch.apply | overhead |")
    print("| --- | --- | --- | --- | --- |")

    def gpt():
        model = GPT(layers=4, hidden=256, heads=4, sequence=128, vocab=1024, dropout=0.0)
        return model, model.memplan_batch(16, [128]), model.memplan_loss

    model, batch, loss_fn = gpt()
    compare("gpt 4x256, b16x128", model, batch, loss_fn, "in-core")
    model, batch, loss_fn = gpt()
    compare("gpt 4x256, b16x128", model, batch, loss_fn, "full-ac", checkpointed_blocks)
    import torchvision
    model = torchvision.models.resnet18(num_classes=10)
    batch = (torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,)))
    compare("resnet18 b16 64x64", model, batch, torch.nn.functional.cross_entropy, "in-core")


if __name__ == "__main__":
    main()
