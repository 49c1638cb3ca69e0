"""Issue 36: what running a plan through memplan.torch.apply costs per step, against the same
plan written by hand. Each row times whole training steps on this CPU in one thread, by the
process's CPU time (steady when other work shares the cores), the four steps alternating (STEPS
of each after two warm-up steps, the median):

  - by hand: the plain step (zero_grad, forward, loss, backward, optimizer step) for in-core; with
    each transformer block under torch.utils.checkpoint (use_reentrant=False) for full-ac, which is
    what memplan's `full-ac` plan recomputes; under saved-tensor hooks that copy every saved tensor
    but the parameters, buffers and batch out at the pack and back at the unpack for swap-all;
  - steady step: `PlannedModel.step` from its second step on, the steady path
    (memplan.torch.steady: the plan through saved-tensor hooks alone, no dispatch mode; the plain
    step for in-core);
  - recorded step: `PlannedModel.step` with `steady = False`, every step under the recorder that
    gives every tensor its captured id and carries out the plan op by op (what every step cost
    before the steady path);
  - bare mode: the hand-written step under a dispatch mode that only calls each op (and
    saved-tensor hooks that only hand the tensor back, or the hand-written swap's): the floor of
    any recorder at the dispatcher.

The goal the issue sets is an overhead of at most 2%. docs/torch.md, "What a planned step costs",
has the command, the measured table and the machine's load.

    $(scripts/setup --torch2-python) bench/torch-step-overhead.py [BUILD_DIR]
    STEPS (default 10)
"""
import contextlib
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


def in_bare_mode(step, hooks=None):
    """`step` under BareMode, and under `hooks()` (the hand-written step's saved-tensor hooks)
    or hooks that only hand the tensor back."""
    with BareMode(), hooks() if hooks else torch.autograd.graph.saved_tensors_hooks(
            lambda t: t, lambda t: t):
        step()


def checkpointed_blocks(model):
    """Each block of `model.h` under torch.utils.checkpoint: the hand-written full-ac."""
    for block in model.h:
        forward = block.forward
        block.forward = (lambda f: lambda *a: torch.utils.checkpoint.checkpoint(
            f, *a, use_reentrant=False))(forward)


def swapped_by_hand(model, batch):
    """Saved-tensor hooks that copy each saved tensor but the parameters, buffers and batch (by
    their data pointers) out at the pack and back at the unpack: the hand-written swap-all (on
    the CPU both copies are memory copies, as memplan's are). memplan copies a storage once
    where autograd saves it twice (a ReLU's result, then the next convolution's input); these
    hooks copy it at each pack."""
    held = {t.data_ptr() for t in [*model.parameters(), *model.buffers(), *batch]}

    def pack(t):
        return t if t.data_ptr() in held else (t.device, t.to("cpu", copy=True))

    def unpack(packed):
        return packed if isinstance(packed, torch.Tensor) else packed[1].to(packed[0], copy=True)
    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def compare(label, model, batch, loss_fn, policy, by_hand=lambda m: None, hooks=None):
    """`model` under memplan's `policy` against a copy of it that `by_hand` prepares and whose
    step runs under `hooks()` when given, each with its own optimizer."""
    hand, bare = copy.deepcopy(model), copy.deepcopy(model)
    by_hand(hand)
    by_hand(bare)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    hand_optimizer = torch.optim.SGD(hand.parameters(), lr=1e-3, momentum=0.9)
    bare_optimizer = torch.optim.SGD(bare.parameters(), lr=1e-3, momentum=0.9)
    captured = memplan.torch.capture(model, batch, loss_fn, optimizer)
    plan = memplan.simulate(captured, policy=policy).plan
    steady, steady_optimizer = copy.deepcopy((model, optimizer))  # its momentum too
    planned = memplan.torch.apply(model, plan, captured)
    recorded = memplan.torch.apply(steady, plan, captured)
    recorded.steady = False  # every step under the recorder, as before the steady path
    mine = lambda: planned.step(batch, loss_fn, optimizer)  # noqa: E731
    recorded_step = lambda: recorded.step(batch, loss_fn, steady_optimizer)  # noqa: E731
    def theirs():
        with hooks(hand, batch) if hooks else contextlib.nullcontext():
            default_step(hand, batch, loss_fn, hand_optimizer)

    def floor():
        in_bare_mode(lambda: default_step(bare, batch, loss_fn, bare_optimizer),
                     hooks and (lambda: hooks(bare, batch)))
    steps = (theirs, mine, recorded_step, floor)
    for _ in range(2):
        for step in steps:
            step()
    assert planned.stats["steady"] and not recorded.stats["steady"], planned.steady_reason
    times = [[] for _ in steps]
    for _ in range(STEPS):
        for step, spent in zip(steps, times):
            spent.append(timed(step))
    hand_s, steady_s, recorded_s, bare_s = (statistics.median(x) for x in times)

    def share(seconds):
        return f"{(seconds / hand_s - 1) * 100:+.1f}%"
    print(f"| {label} | {policy} | {hand_s * 1e3:.1f} ms | {steady_s * 1e3:.1f} ms | "
          f"{share(steady_s)} | {recorded_s * 1e3:.1f} ms | {share(recorded_s)} | "
          f"{share(bare_s)} |", flush=True)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print("| model | plan | by hand | steady step | overhead | recorded step | overhead | "
          "bare mode |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")

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
    model = torchvision.models.resnet18(num_classes=10)
    compare("resnet18 b16 64x64", model, batch, torch.nn.functional.cross_entropy, "swap-all",
            hooks=swapped_by_hand)
    model, batch, loss_fn = gpt()
    compare("gpt 4x256, b16x128", model, batch, loss_fn, "swap-all", hooks=swapped_by_hand)


if __name__ == "__main__":
    main()
