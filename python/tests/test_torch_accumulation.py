"""Gradient accumulation in memplan.torch: a step of k micro-batches (for each, the forward pass,
the loss divided by k and its backward pass; then one optimizer step) is captured as forward and
backward phases alternating k times, then the update; memplan's feature maps of micro-batch i are
read by backward pass i only; and keep, recompute, swap and searched plans of it run in PyTorch
with the loss, the gradients and the weights bitwise the in-core step's and the saved-bytes peak
the simulator's to the byte. Run under PyTorch 1.13 and 2.x (docs/python.md, "Tests")."""

import pathlib
import sys

import pytest
import torch
from torch.nn import functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build
sys.path.append(str(pathlib.Path(__file__).resolve().parent))

import memplan  # noqa: E402
from memplan import _core  # noqa: E402
from memplan.torch import PlanError, apply, capture, validate  # noqa: E402
from memplan.torch.capture import memplan_trace, saved_bytes_in_trace  # noqa: E402
from test_torch_steps import Attention  # noqa: E402
from torch_support import Tiny, with_fixed_durations  # noqa: E402


def accumulating_step(micro_batches):
    """A training step of `micro_batches` micro-batches, as a loop writes gradient accumulation:
    each micro-batch's loss divided by their number and its backward pass (plain `.backward()`,
    which adds into the `.grad` tensors the previous pass left), then one optimizer step."""
    def step(model, batch, loss_fn, optimizer):
        optimizer.zero_grad(set_to_none=True)
        total = None
        for x, y in zip(batch[0].chunk(micro_batches), batch[1].chunk(micro_batches)):
            loss = loss_fn(model(x), y) / micro_batches
            loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        optimizer.step()
        return total
    return step


def tiny_setup(micro_batches, optimizer=torch.optim.SGD):
    torch.manual_seed(0)
    model = Tiny()
    batch = (torch.randn(4 * micro_batches, 3, 8, 8), torch.randint(0, 10, (4 * micro_batches,)))
    options = {"lr": 0.05, "momentum": 0.9} if optimizer is torch.optim.SGD else {"lr": 1e-3}
    opt = optimizer(model.parameters(), **options)
    step = accumulating_step(micro_batches)
    return model, batch, opt, step, capture(model, batch, F.cross_entropy, opt, step=step)


def micro_batch_of(ops):
    """Per op, the micro-batch whose forward or backward pass it is in (the update: the last)."""
    pass_of, current = [], -1
    for op in ops:
        if op["phase"] == "forward" and (not pass_of or ops[op["id"] - 1]["phase"] != "forward"):
            current += 1
        pass_of.append(current)
    return pass_of


def runs(phases):
    """The phases in order, each run of equal ones once."""
    out = []
    for p in phases:
        if not out or out[-1] != p:
            out.append(p)
    return out


@pytest.mark.parametrize("micro_batches", [2, 3])
def test_an_accumulating_step_is_captured_as_alternating_passes(micro_batches):
    _, _, _, _, captured = tiny_setup(micro_batches)
    trace = captured.trace
    ops = trace["ops"]
    assert runs(op["phase"] for op in ops) == \
        ["forward", "backward"] * micro_batches + ["update"]
    # Micro-batch i's feature maps are read by backward pass i only.
    pass_of = micro_batch_of(ops)
    parsed = memplan_trace(captured)
    maps = _core.feature_maps(parsed._workload)
    assert maps
    made_in = {m: pass_of[trace["tensors"][m]["producer"]] for m in maps}
    assert set(made_in.values()) == set(range(micro_batches))
    for op in ops:
        if op["phase"] == "backward":
            for t in op["inputs"]:
                if t in made_in:
                    assert made_in[t] == pass_of[op["id"]], (op["name"], t)
    # The second pass adds into the gradients the first one made: a new version of each, in place.
    tensors = trace["tensors"]
    accumulated = [t for t in tensors if t["kind"] == "gradient" and
                   t.get("in_place_of") is not None and
                   tensors[t["in_place_of"]]["kind"] == "gradient" and
                   pass_of[t["producer"]] > pass_of[tensors[t["in_place_of"]]["producer"]]]
    weights = [p for p in tensors if p["kind"] == "parameter" and "running" not in p["name"]
               and "num_batches" not in p["name"]]
    assert len(accumulated) >= (micro_batches - 1) * len(weights)
    # What backward keeps: the hooks' count plus what the step held, to the byte, over every
    # micro-batch's maps.
    assert saved_bytes_in_trace(captured) == captured.saved_bytes_hooks + captured.held_bytes
    # Its in-core peak holds one micro-batch's maps at a time, not all of them.
    info = parsed.info()
    assert info.feature_map_bytes > 0


def policy_plan(captured, policy):
    simulation = memplan.simulate(memplan_trace(captured), policy=policy, memory="64GiB")
    assert simulation.feasible, simulation.oom
    return simulation.plan.to_dict()


@pytest.mark.parametrize("micro_batches", [2, 3])
@pytest.mark.parametrize("policy", ["in-core", "recompute-all", "swap-all"])
def test_plans_of_an_accumulating_step_are_bitwise_and_measure_their_peak(micro_batches, policy):
    model, batch, opt, step, captured = tiny_setup(micro_batches)
    plan = policy_plan(captured, policy)
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, step=step)
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
    if policy == "recompute-all":
        assert result["recomputed_ops"] > 0


def attention_setup(micro_batches):
    torch.manual_seed(0)
    model = Attention()
    batch = (torch.randn(8 * micro_batches, 64, 32), torch.randint(0, 10, (8 * micro_batches,)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = accumulating_step(micro_batches)
    return model, batch, opt, step, capture(model, batch, F.cross_entropy, opt, step=step)


def test_an_fp16_plan_of_an_accumulating_step_is_within_the_tolerance():
    # Every float32 map of both micro-batches narrowed after its last forward reader and widened
    # before its backward reader: gradients within Note [Validation tolerance], the peak exact.
    model, batch, opt, step, captured = tiny_setup(2)
    plan, tensors = policy_plan(captured, "in-core"), captured.trace["tensors"]
    narrowed = 0
    for m in plan["maps"]:
        if tensors[m["tensor"]].get("dtype") == "float32":
            m["action"] = "encode:fp16"
            narrowed += 1
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, step=step)
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
    assert result["narrowed_maps"] == narrowed
    assert 0 < result["gradient_relative_error"] <= result["gradient_tolerance"], result


def test_a_searched_plan_of_an_accumulating_attention_step_is_bitwise():
    model, batch, opt, step, captured = attention_setup(2)
    parsed = memplan_trace(captured)
    incore = parsed.info().peak_bytes_incore
    swapped = memplan.simulate(parsed, policy="swap-all", memory="64GiB").peak_bytes
    assert swapped < incore
    found = memplan.search(parsed, memory=(incore + swapped) // 2, time_limit=30, rounds=4,
                           deterministic=True, maps_only=True)
    assert found.feasible
    plan = found.plan.to_dict()
    assert any(m["action"] != "keep" for m in plan["maps"])
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, step=step)
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]


@pytest.mark.parametrize("policy", ["superneurons", "full-ac"])
def test_published_policies_plans_of_an_accumulating_step_are_bitwise(policy):
    # Each policy's plan at 60% of the in-core peak (fitting or not: validate's force) acts on
    # both micro-batches' maps.
    model, batch, opt, step, captured = attention_setup(2)
    plan = memplan.simulate(memplan_trace(captured), policy=policy, memory="60%").plan.to_dict()
    pass_of, tensors = micro_batch_of(captured.trace["ops"]), captured.trace["tensors"]
    acted = {pass_of[tensors[m["tensor"]]["producer"]] for m in plan["maps"]
             if m["action"] != "keep"}
    assert acted == {0, 1}
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, step=step, force=True)
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]


def test_a_searched_plan_with_host_placement_of_an_accumulating_step_is_bitwise():
    # At a third of the in-core peak the search places parameters, optimizer state or the batch on
    # the host too; each is brought back for every group of its uses, one per phase of each
    # micro-batch (Note [Host placement]).
    model, batch, opt, step, captured = attention_setup(2)
    with_fixed_durations(captured.trace)
    found = memplan.search(captured, memory="35%", time_limit=30, rounds=4, deterministic=True)
    assert found.feasible
    plan = found.plan.to_dict()
    assert plan.get("tensors")
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, step=step)
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]


def test_a_step_of_another_number_of_micro_batches_is_refused_in_one_line():
    model, batch, opt, _, captured = tiny_setup(2)
    plan = policy_plan(captured, "recompute-all")
    # A third micro-batch where the captured step began its update.
    planned = apply(model, plan, captured, step=accumulating_step(3))
    with pytest.raises(PlanError, match=r"another number of backward passes \(micro-batches\)"
                       ) as e:
        planned.step(batch, F.cross_entropy, opt)
    assert "\n" not in str(e.value)
    # One micro-batch where the captured step ran two: the step's code differs.
    planned = apply(model, plan, captured, step=accumulating_step(1))
    with pytest.raises(PlanError, match=r"the training step itself") as e:
        planned.step(batch, F.cross_entropy, opt)
    assert "\n" not in str(e.value)
