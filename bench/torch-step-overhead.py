"""Issue 36: what running a plan through memplan.torch.apply costs per step, against the same
plan written by hand. Each row times whole training steps on this CPU in one thread, by the
process's CPU time (steady when other work shares the cores), the two alternating (STEPS of each
after two warm-up steps, the median): `PlannedModel.step` (the recorder that
gives every tensor its captured id and carries out the plan's packs) against

  - in-core: the plain step (zero_grad, forward, loss, backward, optimizer step), no hooks;
  - full-ac: the same step with each transformer block under torch.utils.checkpoint
    (use_reentrant=False), which is what memplan's `full-ac` plan recomputes.

and, as the floor of any recorder at the dispatcher, the hand-written step under a dispatch mode
that only calls each op and saved-tensor hooks that only hand the tensor back ("bare mode").

The goal the issue sets is an overhead of at most 2%. `PY=$(scripts/setup --torch2-python);
STEPS=6 $PY bench/torch-step-overhead.py`, PyTorch 2.15, a 2-core machine shared with other work
(rows move by a few percent from run to run):

    | model | plan | by hand | memplan.torch.apply | overhead | bare mode |
    | gpt 4x256, b16x128 | in-core | 467.1 ms | 509.2 ms | +9.0% | +2.0% |
    | gpt 4x256, b16x128 | full-ac | 574.5 ms | 616.2 ms | +7.3% | +3.2% |
    | resnet18 b16 64x64 | in-core | 104.3 ms | 131.3 ms | +26.0% | +5.4% |

(full-ac was +113.8% while each step's recorder stayed alive, held by its hooks on the
parameters' AccumulateGrad nodes, with the maps it had regenerated.) What remains is the
recorder's Python at every aten op (captured ids, the step's trace, the check against the
capture, the plan's points), ~20 us an op: a larger share of a step of short ops. docs/torch.md,
"What a planned step costs", has the measurements and what would take it to 2%.

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
from torch.utils._python_dispatch import TorchDispatchMode

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


class BareMode(TorchDispatchMode):
    """A dispatch mode that only calls each op: what any recorder at the dispatcher costs."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def in_bare_mode(step):
    with BareMode(), torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        step()


def checkpointed_blocks(model):
    """Each block of `model.h` under torch.utils.checkpoint: the hand-written full-ac."""
    for block in model.h:
        forward = block.forward
        block.forward = (lambda f: lambda *a: torch.utils.checkpoint.checkpoint(
            f, *a, use_reentrant=False))(forward)


def compare(label, model, batch, loss_fn, policy, by_hand=lambda m: None):
    """`model` under memplan's `policy` against a copy of it that `by_hand` prepares, each with
    its own optimizer."""
    hand, bare = copy.deepcopy(model), copy.deepcopy(model)
    by_hand(hand)
    by_hand(bare)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    hand_optimizer = torch.optim.SGD(hand.parameters(), lr=1e-3, momentum=0.9)
    bare_optimizer = torch.optim.SGD(bare.parameters(), lr=1e-3, momentum=0.9)
    captured = memplan.torch.capture(model, batch, loss_fn, optimizer)
    plan = memplan.simulate(captured, policy=policy).plan
    planned = memplan.torch.apply(model, plan, captured)
    mine = lambda: planned.step(batch, loss_fn, optimizer)  # noqa: E731
    theirs = lambda: default_step(hand, batch, loss_fn, hand_optimizer)  # noqa: E731
    floor = lambda: in_bare_mode(  # noqa: E731
        lambda: default_step(bare, batch, loss_fn, bare_optimizer))
    for _ in range(2):
        mine()
        theirs()
        floor()
    a, b, c = [], [], []
    for _ in range(STEPS):
        a.append(timed(mine))
        b.append(timed(theirs))
        c.append(timed(floor))
    planned_s, hand_s, bare_s = (statistics.median(x) for x in (a, b, c))
    print(f"| {label} | {policy} | {hand_s * 1e3:.1f} ms | {planned_s * 1e3:.1f} ms | "
          f"{(planned_s / hand_s - 1) * 100:+.1f}% | {(bare_s / hand_s - 1) * 100:+.1f}% |",
          flush=True)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print("| model | plan | by hand | memplan.torch.apply | overhead | bare mode |")
    print("| --- | --- | --- | --- | --- | --- |")

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
