"""memplan.torch.apply and validate with plans that place tensors other than feature maps on the
host (Note [Host placement] in core/plan.hpp, issue 36): parameters and buffers, gradients with
optimizer state, the input batch, and an update on the host. On the CPU "host" and "device" are
the same memory, but the step empties and fills the tensors' storages as on a GPU: loss,
gradients and weights are bitwise the baseline's, and the device (saved-bytes) and host peaks are
the simulator's to the byte. The search's plan without --maps-only is carried out too."""

import copy
import pathlib
import sys

import pytest
import torch
import torchvision
from torch import nn
from torch.nn import functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build

import memplan  # noqa: E402
from memplan.torch import capture  # noqa: E402
from memplan.torch.apply import PlanError, apply  # noqa: E402
from memplan.torch.capture import memplan_trace, run_step  # noqa: E402
from memplan.torch.models import GPT  # noqa: E402
from memplan.torch.recorder import storage_bytes  # noqa: E402
from memplan.torch.validate import validate  # noqa: E402
from torch_support import Tiny, with_fixed_durations  # noqa: E402

TORCH_2 = int(torch.__version__.split(".")[0]) >= 2


def manual_sgd(model, batch, loss_fn, optimizer):
    """A step whose update is the loop's own, in place: no temporaries (torch.optim's steps make
    some: torch 1.13's profiler record, Adam's denominator)."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(*batch[:-1]), batch[-1])
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-0.01)
    return loss


def small_setup(step=None, seed=0):
    torch.manual_seed(seed)
    model = Tiny()
    batch = (torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)
    return model, batch, opt, capture(model, batch, F.cross_entropy, opt, step=step)


def placeable(trace, kinds):
    """Ids of the trace's tensors of `kinds` that may go to the host (core/plan.cpp's
    host_placement_problem: pre-existing tensors that ops read, gradients that backward writes and
    the update reads; none written over in place)."""
    ops, tensors = trace["ops"], trace["tensors"]
    read = {t for op in ops for t in op["inputs"]}
    by_update = {t for op in ops if op["phase"] == "update" for t in op["inputs"]}
    overwritten = {t["in_place_of"] for t in tensors if t.get("in_place_of") is not None}
    out = []
    for t in tensors:
        if t["kind"] not in kinds or t["id"] in overwritten or t.get("in_place_of") is not None:
            continue
        if t["kind"] == "gradient":
            if t["id"] in by_update and ops[t["producer"]]["phase"] == "backward":
                out.append(t["id"])
        elif t["id"] in read:
            out.append(t["id"])
    return out


def host_plan(trace, kinds, maps="keep", update="device"):
    """A plan in format v1: every feature map `maps`, every placeable tensor of `kinds` on the
    host, the update on `update`."""
    plan = {"format": "memplan-plan", "version": 1, "policy": "test",
            "workload": {"fingerprint": memplan_trace(trace).fingerprint,
                         "ops": len(trace["ops"]), "tensors": len(trace["tensors"])},
            "maps": [{"tensor": t, "action": maps} for t in memplan_trace(trace).feature_maps()],
            "tensors": [{"tensor": t, "placement": "host"} for t in placeable(trace, kinds)],
            "update": update}
    assert plan["tensors"], kinds
    return plan


def assert_carried_out(result):
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"], result
    assert result["measured_host_peak_bytes"] == result["predicted_host_peak_bytes"], result
    assert result["predicted_host_peak_bytes"] > 0


@pytest.mark.parametrize("kinds,maps", [
    (("parameter",), "keep"),
    (("gradient", "optimizer_state"), "keep"),
    (("input",), "keep"),
    (("parameter", "gradient", "optimizer_state", "input"), "swap"),
    (("parameter", "gradient", "optimizer_state", "input"), "recompute"),
])
def test_each_kind_on_the_host_is_bitwise_and_measures_its_peaks(kinds, maps):
    """Parameters (batch norm's buffers among them: written in forward, copied back), gradients
    with the momentum (copied out as written, brought back for the update on the device), the
    batch (a placeholder filled for its forward and backward uses); with the maps kept, swapped
    (their host slots beside the gradients') and recomputed (re-reading host-placed parameters)."""
    model, batch, opt, captured = small_setup()
    plan = host_plan(captured.trace, kinds, maps)
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    assert_carried_out(result)
    if maps == "recompute":
        assert result["recomputed_ops"] > 0


@pytest.mark.parametrize("placed", [("gradient",), ("parameter", "gradient")])
def test_an_update_on_the_host_is_bitwise_and_measures_its_peaks(placed):
    """The update runs on the host's copies: the gradients' slots, and the parameters' (placed on
    the host) or their master copies (copied back to the device after each update op)."""
    model, batch, opt, captured = small_setup(step=manual_sgd)
    plan = host_plan(captured.trace, placed, update="host")
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, step=manual_sgd)
    assert_carried_out(result)


def test_sgd_with_momentum_updates_on_the_host():
    """torch.optim's SGD, whose step under torch 1.13 makes a profiler `zeros` and
    `_record_function_enter`'s handle: temporaries on the host too."""
    model, batch, opt, captured = small_setup()
    plan = host_plan(captured.trace, ("gradient", "optimizer_state"), update="host")
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    assert_carried_out(result)


@pytest.mark.parametrize("policy", ["zero-offload", "fsdp-offload"])
def test_offload_policies_are_carried_out(policy):
    model, batch, opt, captured = small_setup(step=manual_sgd)
    simulation = memplan.simulate(captured.memplan_trace(), policy=policy, memory="64GiB")
    plan = simulation.plan.to_dict()
    assert plan.get("tensors") and plan.get("update") == "host", plan
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, step=manual_sgd)
    assert_carried_out(result)


def test_host_placement_holds_from_step_to_step():
    """Parameters and momentum stay on the host between steps (their storages empty), and three
    planned steps, then restore(), give the weights three baseline steps give."""
    model, batch, opt, captured = small_setup()
    base_model, base_opt = copy.deepcopy((model, opt))
    plan = host_plan(captured.trace, ("parameter", "gradient", "optimizer_state"), "swap")
    planned = apply(model, plan, captured)
    for _ in range(3):
        torch.manual_seed(1)
        base_loss = run_step(base_model, batch, F.cross_entropy, base_opt)
        torch.manual_seed(1)
        loss = planned.step(batch, F.cross_entropy, opt)
        assert torch.equal(loss, base_loss)
        assert all(storage_bytes(p) == 0 for p in model.parameters())
        assert planned.stats["peak_host_bytes"] > 0
    planned.restore()
    assert all(torch.equal(a, b) for a, b in zip(base_model.state_dict().values(),
                                                 model.state_dict().values()))
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(base_model.parameters(),
                                                          model.parameters()))


def adam_setup(optimizer, foreach, seed=0):
    torch.manual_seed(seed)
    model = Tiny()
    batch = (torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,)))
    opt = getattr(torch.optim, optimizer)(model.parameters(), lr=1e-3, foreach=foreach)
    return model, batch, opt, capture(model, batch, F.cross_entropy, opt)


def update_temporaries(trace):
    """Bytes of the tensors the trace's update ops make that are not written over another (each
    its own host slot in an update on the host)."""
    return sum(t["bytes"] for t in trace["tensors"] if t.get("producer") is not None and
               trace["ops"][t["producer"]]["phase"] == "update" and t.get("in_place_of") is None)


@pytest.mark.parametrize("optimizer", ["Adam", "AdamW"])
@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("placed", [("gradient", "optimizer_state"),
                                    ("parameter", "gradient", "optimizer_state")])
def test_adam_updates_on_the_host(optimizer, foreach, placed):
    """Adam's and AdamW's update on the host (ZeRO-Offload's CPU Adam): its temporaries
    (sqrt(exp_avg_sq), the denominator; the _foreach_ variants' lists) are made on the host's
    copies, never on the device, and held from their op to the last one that reads them, as the
    simulator holds their host slots: bitwise, both peaks predicted to the byte."""
    model, batch, opt, captured = adam_setup(optimizer, foreach)
    assert update_temporaries(captured.trace) > 0
    plan = host_plan(captured.trace, placed, update="host")
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    assert_carried_out(result)


def test_adam_on_the_host_holds_its_temporaries_in_host_memory():
    """The host peak of single-tensor Adam's update on the host: the host-placed slots
    (gradients, exp_avg, exp_avg_sq, step) and, at once, the largest parameter's sqrt(exp_avg_sq)
    and its quotient by the bias correction (fc.weight, 5120 bytes each), the add_ of eps
    written over the quotient in its slot."""
    model, batch, opt, captured = adam_setup("Adam", False)
    trace = captured.trace
    plan = host_plan(trace, ("gradient", "optimizer_state"), update="host")
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    assert_carried_out(result)
    placed = {p["tensor"] for p in plan["tensors"]}
    slots = sum(trace["tensors"][t]["bytes"] for t in placed)
    largest = max(t["bytes"] for t in trace["tensors"] if t["kind"] == "parameter")
    assert largest == 5120
    assert result["measured_host_peak_bytes"] == slots + 2 * largest


def test_an_update_on_the_host_reading_a_forward_tensor_is_refused_with_one_line():
    """memplan's plan reader refuses it: an update scaled by the loss reads the loss, a forward
    activation the device holds (what the update writes itself is host memory)."""
    def scaled_by_loss(model, batch, loss_fn, optimizer):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(*batch[:-1]), batch[-1])
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(p.grad * loss * 0.01)
        return loss

    model, batch, opt, captured = small_setup(step=scaled_by_loss)
    plan = host_plan(captured.trace, ("gradient", "optimizer_state"), update="host")
    with pytest.raises(PlanError, match="reads .* written by forward op .* which stays on the "
                       "device") as error:
        apply(model, plan, captured)
    assert "\n" not in str(error.value)


def test_an_update_on_the_host_after_clipping_is_refused_with_one_line():
    """clip_grad_norm_ writes the gradients over in place in the update, so they cannot go to the
    host, and an update on the host would read them on the device: memplan's plan reader says
    so."""
    def clipped(model, batch, loss_fn, optimizer):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(*batch[:-1]), batch[-1])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        return loss

    model, batch, opt, captured = adam_setup("Adam", False)
    captured = capture(model, batch, F.cross_entropy, opt, step=clipped)
    plan = host_plan(captured.trace, ("gradient", "optimizer_state"), update="host")
    with pytest.raises(PlanError, match="on the device: it cannot go to the host: .* is written "
                       "over in place") as error:
        apply(model, plan, captured, step=clipped)
    assert "\n" not in str(error.value)


def deep_mlp():
    layers = []
    for _ in range(8):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(256, 10))


def search_setup(which):
    """Sizes where the search finds a plan at 60% of the in-core peak under both PyTorch
    versions."""
    torch.manual_seed(0)
    if which == "mlp":
        model = deep_mlp()
        return model, (torch.randn(1024, 256), torch.randint(0, 10, (1024,))), F.cross_entropy
    if which == "gpt_block":
        model = GPT(layers=1, hidden=64, heads=2, sequence=32, vocab=128)
        return model, model.memplan_batch(2, [32]), model.memplan_loss
    model = torchvision.models.resnet18(num_classes=10)
    return model, (torch.randn(32, 3, 128, 128), torch.randint(0, 10, (32,))), F.cross_entropy


@pytest.mark.parametrize("which", ["mlp", "gpt_block", "resnet18"])
def test_search_plan_without_maps_only_is_carried_out(which):
    """`memplan.search(captured, memory="60%")`: parameters on the host, and under torch 2 the
    gradients, momentum and update too (ZeRO-Offload's flow); carried out bitwise, both peaks
    the simulator's. 20 rounds, deterministic: the same plan on any machine (each case's search
    reaches it within 3 s here; 20 s of rounds gave the same placement)."""
    model, batch, loss_fn = search_setup(which)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)
    captured = capture(model, batch, loss_fn, opt)
    with_fixed_durations(captured.trace)
    found = memplan.search(captured, memory="60%", rounds=20, time_limit=60, deterministic=True)
    assert found.feasible
    plan = found.plan.to_dict()
    assert plan.get("tensors"), "the search placed nothing on the host"
    result = validate(model, batch, loss_fn, opt, found.plan, captured)
    assert_carried_out(result)


@pytest.mark.parametrize("which,optimizer,memory", [("mlp", "Adam", "40%"),
                                                    ("gpt_block", "AdamW", "60%")])
@pytest.mark.parametrize("foreach", [False, True])
def test_search_plan_with_adam_updates_on_the_host(which, optimizer, memory, foreach):
    """`memplan.search(captured, memory=...)` with Adam (AdamW) under both versions: the search
    moves the update to the host, its temporaries in host memory, and the plan is carried out
    bitwise, both peaks the simulator's. 20 rounds, deterministic, as above."""
    model, batch, loss_fn = search_setup(which)
    opt = getattr(torch.optim, optimizer)(model.parameters(), lr=1e-3, foreach=foreach)
    captured = capture(model, batch, loss_fn, opt)
    assert update_temporaries(captured.trace) > 0
    with_fixed_durations(captured.trace)
    found = memplan.search(captured, memory=memory, rounds=20, time_limit=60, deterministic=True)
    assert found.feasible
    plan = found.plan.to_dict()
    assert plan.get("update") == "host", plan.get("update")
    result = validate(model, batch, loss_fn, opt, found.plan, captured)
    assert_carried_out(result)
