"""memplan.torch on the patterns real models are made of, beyond convolutions and linears: tensors
made outside the dispatcher (swin's shifted-window mask), recurrent cells that write their gates
in place into chunks of one buffer (nn.LSTM, nn.GRU), and torch.utils.checkpoint. Each is
captured into a trace `memplan info` reads, with what backward keeps counted as autograd keeps it,
and carried out by apply bit for bit with the saved-bytes peak the simulator predicts. A step that
goes another way than its capture (a branch on data, the optimizer's options) is refused with one
line naming that cause."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.nn import functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build

import memplan  # noqa: E402
from memplan.torch import capture, saved_bytes_in_trace  # noqa: E402
from memplan.torch.capture import memplan_trace  # noqa: E402
from memplan.torch.schedule import PlanError  # noqa: E402
from memplan.torch.validate import validate  # noqa: E402

MEMPLAN = pathlib.Path(os.environ.get("MEMPLAN_BINARY", ROOT / "build/release/bin/memplan"))


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)


def info(captured, tmp_path):
    """`memplan info --json` of the captured trace (the C++ reader's checks)."""
    if not MEMPLAN.exists():
        pytest.skip(f"{MEMPLAN} is not built (scripts/build release)")
    path = tmp_path / "trace.json"
    captured.save(path)
    run = subprocess.run([str(MEMPLAN), "info", "--json", str(path)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def policy_plan(trace, policy):
    simulation = memplan.simulate(memplan_trace(trace), policy=policy, memory="64GiB")
    assert simulation.feasible, simulation.oom
    return simulation.plan.to_dict()


def plan_of(trace, actions):
    """A plan in format v1 with the given {tensor id: action}."""
    return {"format": "memplan-plan", "version": 1, "policy": "test",
            "workload": {"fingerprint": memplan_trace(trace).fingerprint, "ops": len(trace["ops"]),
                         "tensors": len(trace["tensors"])},
            "maps": [{"tensor": t, "action": a} for t, a in actions.items()]}


def assert_plans_run_bitwise(model, batch, loss_fn, opt, captured,
                             policies=("swap-all", "recompute-all")):
    for policy in policies:
        result = validate(model, batch, loss_fn, opt, policy_plan(captured.trace, policy),
                          captured)
        assert result.lossless_ok, (policy, result)
        assert result.peaks_match, (policy, result)


# ---- issue 36, defect 1: identity by storage, not by address -----------------------------------

class Rebuffered(nn.Module):
    """Reads a storage over a buffer, lets it go, then reads a new storage over the same bytes:
    two storages, one after the other, at one address (as the allocator gives a freed buffer's
    address to the next storage of its size)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bytes = bytearray(16)

    def forward(self, x):
        first = torch.frombuffer(self.bytes, dtype=torch.float32)
        h = self.fc(x) + first
        del first
        second = torch.frombuffer(self.bytes, dtype=torch.float32)
        return h * second


def test_a_new_storage_at_a_freed_storages_address_is_a_new_tensor():
    torch.manual_seed(0)
    model = Rebuffered()
    batch = (torch.randn(2, 4), torch.randint(0, 4, (2,)))
    trace = capture(model, batch, F.cross_entropy, sgd(model)).trace
    ops, tensors = trace["ops"], trace["tensors"]
    add = next(op for op in ops if op["phase"] == "forward" and op["name"] == "add")
    mul = next(op for op in ops if op["phase"] == "forward" and op["name"] == "mul")
    externals = {t["id"] for t in tensors if t["name"].startswith("external.")}
    (first,) = set(add["inputs"]) & externals
    (second,) = set(mul["inputs"]) & externals
    assert first != second


class ShiftedWindows(nn.Module):
    """torchvision's Swin blocks (shifted windows every other block): the attention mask is built
    by `mask[h, w] = count`, whose Python number torch 1.13 lifts into a 0-dim tensor made outside
    the dispatcher at whatever address the allocator has free."""

    def __init__(self, blocks=4):
        super().__init__()
        from torchvision.models.swin_transformer import SwinTransformerBlock
        self.blocks = nn.Sequential(*[SwinTransformerBlock(16, 2, [4, 4], [2 * (i % 2)] * 2)
                                      for i in range(blocks)])
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.blocks(x).mean((1, 2)))


def test_swin_blocks_plans_replay_the_captured_ids():
    # Before tensors were known by their StorageImpl, torch 1.13 refused every plan here ("op 130
    # is 'blocks.1.attn.fill_' here and 'blocks.1.attn.fill_' in the captured trace"): the
    # lifted scalars took the ids of freed tensors at other addresses at capture and at replay.
    torch.manual_seed(0)
    model = ShiftedWindows()
    batch = (torch.randn(2, 8, 8, 16), torch.randint(0, 10, (2,)))
    opt = sgd(model)
    captured = capture(model, batch, F.cross_entropy, opt)
    assert saved_bytes_in_trace(captured.trace) == captured.saved_bytes_hooks
    assert_plans_run_bitwise(model, batch, F.cross_entropy, opt, captured)


# ---- issue 36, defect 3: what autograd saves of a recurrent cell -------------------------------

class Recurrent(nn.Module):
    """A two-layer nn.LSTM or nn.GRU over a short sequence, then a linear head on the last step.
    On the CPU each cell writes its gates with sigmoid_ and tanh_ into `unsafe_chunk`s of one
    buffer, which autograd saves gate by gate while the later gates are still to be written."""

    def __init__(self, cell):
        super().__init__()
        self.rnn = getattr(nn, cell)(8, 16, num_layers=2, batch_first=True)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][:, -1])


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_recurrent_cells_are_captured_as_autograd_saves_them(cell, tmp_path):
    # Before, `memplan info` refused the trace: "tensor 21 'rnn.sigmoid_.out0' is still read
    # after op 19" (the first gate saved, then written over by the next gate's sigmoid_).
    torch.manual_seed(0)
    model = Recurrent(cell)
    batch = (torch.randn(2, 3, 8), torch.randint(0, 5, (2,)))
    opt = sgd(model)
    captured = capture(model, batch, F.cross_entropy, opt)
    summary = info(captured, tmp_path)
    assert summary["feature_map_bytes"] == captured.saved_activation_bytes_hooks
    assert saved_bytes_in_trace(captured.trace) == captured.saved_bytes_hooks
    assert_plans_run_bitwise(model, batch, F.cross_entropy, opt, captured)


# ---- issue 36, defect 5: what a checkpointed step holds -----------------------------------------

class Checkpointed(nn.Module):
    """linear -> a non-reentrant torch.utils.checkpoint block (linear, ReLU, linear) -> linear. The
    block's input is saved by nothing but the checkpoint, which recomputes the block from it in
    backward: torch 2.x saves it through autograd (and so through the saved-tensor hooks),
    torch 1.13 keeps it in a closure the hooks never see."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(32, 64)
        self.a = nn.Linear(64, 64)
        self.b = nn.Linear(64, 64)
        self.out = nn.Linear(64, 10)

    def block(self, x):
        return self.b(torch.relu(self.a(x)))

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        return self.out(checkpoint(self.block, self.inp(x), use_reentrant=False))


def test_a_checkpoint_blocks_input_is_counted_as_held_for_backward(tmp_path):
    # Before, torch 1.13's trace left the block input out of what backward keeps (4,096 of the
    # step's 11,012 bytes), and validate could not see it.
    torch.manual_seed(0)
    model = Checkpointed()
    batch = (torch.randn(16, 32), torch.randint(0, 10, (16,)))
    opt = sgd(model)
    captured = capture(model, batch, F.cross_entropy, opt)
    trace = captured.trace
    block_input = next(op for op in trace["ops"] if op["name"] == "inp.addmm")["outputs"][0]
    summary = info(captured, tmp_path)
    assert block_input in memplan_trace(trace).feature_maps()
    assert summary["feature_map_bytes"] == \
        captured.saved_activation_bytes_hooks + captured.held_activation_bytes
    assert saved_bytes_in_trace(trace) == captured.saved_bytes_hooks + captured.held_bytes
    assert captured.held_bytes in (0, 16 * 64 * 4)  # 1.13: the block input, beside the hooks
    assert captured.stats["held_tensors"] == ([block_input] if captured.held_bytes else [])
    # Every other map swapped, then recomputed, the block input kept: bitwise, to the byte.
    maps = memplan_trace(trace).feature_maps()
    for action in ("swap", "recompute"):
        plan = plan_of(trace, {t: "keep" if t == block_input else action for t in maps})
        result = validate(model, batch, F.cross_entropy, opt, plan, captured)
        assert result.lossless_ok and result.peaks_match, (action, result)
    # Swapping the block input: torch 2 carries it out; torch 1.13's closure holds it where the
    # hooks cannot reach it, and apply says so before backward starts.
    plan = plan_of(trace, {t: "swap" for t in maps})
    if captured.held_bytes:
        with pytest.raises(PlanError, match="'inp.addmm.out0': the plan says swap, but the step "
                                            "holds it for backward outside autograd's saved"):
            validate(model, batch, F.cross_entropy, opt, plan, captured)
    else:
        result = validate(model, batch, F.cross_entropy, opt, plan, captured)
        assert result.lossless_ok and result.peaks_match, result


class CheckpointedAttention(nn.Module):
    """linear -> two torch.utils.checkpoint'ed attention blocks (test_torch_steps.Block: the
    attention written out under torch 1.13, scores divided by a Python float) -> head. `how`:
    "non-reentrant", "reentrant" (its backward runs the block's backward in a nested
    torch.autograd.backward) or "selective" (SAC, torch 2.4 and later: the matmuls' outputs saved,
    the rest recomputed)."""

    def __init__(self, how):
        super().__init__()
        from test_torch_steps import Block
        self.how = how
        self.inp = nn.Linear(32, 32)
        self.blocks = nn.ModuleList(Block(32, 4) for _ in range(2))
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        import functools
        from torch.utils import checkpoint
        x = self.inp(x)
        for block in self.blocks:
            if self.how == "selective":
                def policy(ctx, op, *args, **kwargs):
                    return (checkpoint.CheckpointPolicy.MUST_SAVE
                            if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
                            else checkpoint.CheckpointPolicy.PREFER_RECOMPUTE)
                contexts = functools.partial(checkpoint.create_selective_checkpoint_contexts,
                                             policy)
                x = checkpoint.checkpoint(block, x, use_reentrant=False, context_fn=contexts)
            else:
                x = checkpoint.checkpoint(block, x, use_reentrant=self.how == "reentrant")
        return self.head(x.mean(1))


@pytest.mark.parametrize("how", ["non-reentrant", "reentrant", "selective"])
def test_checkpointed_attention_is_captured_and_its_plans_run_bitwise(how):
    # Before: torch 1.13 failed the non-reentrant capture ("aten::detach() Expected a value of
    # type 'Tensor' ... found type 'float'": the wrapped 1/sqrt(d) handed over as a number), and
    # a step's backward pass wrapped for its phases refused the reentrant one's nested pass.
    import torch.utils.checkpoint as checkpoint
    if how == "selective" and not hasattr(checkpoint, "create_selective_checkpoint_contexts"):
        pytest.skip(f"torch {torch.__version__} has no selective activation checkpointing")
    torch.manual_seed(0)
    model = CheckpointedAttention(how)
    batch = (torch.randn(4, 32, 32), torch.randint(0, 10, (4,)))
    opt = sgd(model)
    captured = capture(model, batch, F.cross_entropy, opt)
    trace = captured.trace
    forward = [op["name"] for op in trace["ops"] if op["phase"] == "forward"]
    backward = [op["name"] for op in trace["ops"] if op["phase"] == "backward"]
    # The blocks' forward ops run again in backward: each block's GELU, recomputed.
    assert sum(n.endswith(".mlp.1.gelu") for n in forward) == 2
    assert sum(n.rsplit(".", 1)[-1] == "gelu" for n in backward) == 2, backward
    # What backward keeps is counted whichever way the step keeps it: autograd's saved tensors
    # and what the step held beside them (1.13's checkpoint closure, SAC's saved outputs).
    summary = memplan_trace(trace).info()
    assert summary.feature_map_bytes == \
        captured.saved_activation_bytes_hooks + captured.held_activation_bytes
    if how == "selective":
        assert captured.held_bytes > 0  # what SAC saves bypasses the saved-tensor hooks
    # Every map the hooks reach swapped, then recomputed, the held ones kept: bitwise.
    held = set(captured.stats["held_tensors"])
    maps = memplan_trace(trace).feature_maps()
    for action in ("swap", "recompute"):
        plan = plan_of(trace, {t: "keep" if t in held else action for t in maps})
        result = validate(model, batch, F.cross_entropy, opt, plan, captured)
        assert result.lossless_ok and result.peaks_match, (action, result)
    if held:  # a plan that acts on a held map: one line, before backward starts
        plan = plan_of(trace, {t: "swap" for t in maps})
        with pytest.raises(PlanError, match="the plan says swap, but the step holds it for "
                                            "backward outside autograd's saved tensors"):
            validate(model, batch, F.cross_entropy, opt, plan, captured)


# ---- issue 36, defect 7: a step that goes another way is named for its cause ------------------

class Branching(nn.Module):
    """ReLU or tanh, whichever the sign of the features' sum says: a branch on the data."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8, bias=False)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        h = self.fc(x)
        h = torch.relu(h) if h.sum() > 0 else torch.tanh(h)
        return self.head(h)


def test_a_branch_on_data_that_goes_the_other_way_is_named_as_such():
    torch.manual_seed(0)
    model = Branching()
    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    opt = sgd(model)
    captured = capture(model, (x, y), F.cross_entropy, opt)
    plan = policy_plan(captured.trace, "swap-all")
    took_relu = any(op["layer"] == "relu" for op in captured.trace["ops"])
    with torch.no_grad():  # the other branch, for the weights the capture's step left
        flipped = x if (model.fc(x).sum() > 0) != took_relu else -x
    # Before: "... in the captured trace: another model or input shape".
    with pytest.raises(PlanError, match=r"here and '(relu|tanh)' \([\w:]+\) in the captured trace: "
                                        r"the step took another path after op \d+ '\w+' read a "
                                        r"tensor's value into Python \(a branch on the data"):
        validate(model, (flipped, y), F.cross_entropy, opt, plan, captured)


def test_other_optimizer_options_with_the_same_state_are_named_as_such():
    # Adam with weight decay keeps the same state as without; its step adds the decay first.
    torch.manual_seed(0)
    model = Recurrent("GRU")
    batch = (torch.randn(2, 3, 8), torch.randint(0, 5, (2,)))
    adam = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    captured = capture(model, batch, F.cross_entropy, adam)
    plan = policy_plan(captured.trace, "swap-all")
    adam.param_groups[0]["weight_decay"] = 0.1
    with pytest.raises(PlanError, match=r"in the captured trace: the optimizer step differs from "
                                        r"the captured one \(another optimizer, or other options"):
        validate(model, batch, F.cross_entropy, adam, plan, captured)
