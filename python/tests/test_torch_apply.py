"""memplan.torch.apply and validate: plans carried out through saved-tensor hooks give the baseline
step's loss, gradients and updated weights bit for bit; plans for another model or input shape are
refused with one line; random plans (fixed seeds) hold the same property."""

import json
import os
import pathlib
import random
import subprocess
import sys

import pytest
import torch
import torchvision
from torch import nn
from torch.nn import functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build

from memplan.torch import capture  # noqa: E402
from memplan.torch.apply import PlanError, apply, trace_fingerprint  # noqa: E402
from memplan.torch.models import GPT  # noqa: E402
from memplan.torch.validate import feature_maps, validate  # noqa: E402

MEMPLAN = pathlib.Path(os.environ.get("MEMPLAN_BINARY", ROOT / "build/release/bin/memplan"))


def need_memplan():
    if not MEMPLAN.exists():
        pytest.skip(f"{MEMPLAN} is not built (scripts/build release)")


class Tiny(nn.Module):
    """conv-bn-relu_ -> max-pool -> residual conv-bn + add -> relu_ -> dropout -> linear: in-place
    chains, a residual, and randomness that recompute must replay."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x)), inplace=True), 2)
        h = F.relu(self.bn2(self.conv2(h)) + h, inplace=True)
        return self.fc(self.drop(h.flatten(1)))


def capture_setup(model, batch, loss_fn=F.cross_entropy, adam=False):
    opt = (torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False) if adam else
           torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False))
    captured = capture(model, batch, loss_fn, opt)
    return opt, captured


def tiny_setup(seed=0):
    torch.manual_seed(seed)
    model = Tiny()
    batch = (torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,)))
    opt, captured = capture_setup(model, batch)
    return model, batch, opt, captured


def make_plan(trace, actions):
    """A plan in format v1 with the given {tensor id: action}."""
    return {"format": "memplan-plan", "version": 1, "policy": "test",
            "workload": {"fingerprint": trace_fingerprint(trace), "ops": len(trace["ops"]),
                         "tensors": len(trace["tensors"])},
            "maps": [{"tensor": t, "action": a} for t, a in actions.items()]}


def policy_plan(trace, policy, tmp_path):
    need_memplan()
    trace_path, plan_path = tmp_path / "t.json", tmp_path / "p.json"
    from memplan.torch import write_trace
    write_trace(trace, trace_path)
    run = subprocess.run([str(MEMPLAN), "simulate", trace_path, "--policy", policy, "--memory",
                          "64GiB", "--plan-out", plan_path], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return json.loads(plan_path.read_text())


@pytest.mark.parametrize("policy", ["swap-all", "recompute-all"])
def test_resnet18_plans_are_bitwise_lossless(policy, tmp_path):
    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    batch = (torch.randn(2, 3, 32, 32), torch.randint(0, 1000, (2,)))
    opt, captured = capture_setup(model, batch)
    plan = policy_plan(captured.trace, policy, tmp_path)
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, memplan=str(MEMPLAN))
    assert result.lossless_ok, result
    # The saved-bytes peak (memplan.torch.saved_bytes) as the hooks measured it and as the
    # simulator predicts it, to the byte.
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
    if policy == "swap-all":
        # Every feature map is copied to host once: the simulator's host peak to the byte.
        assert result["measured_host_peak_bytes"] == result["predicted_host_peak_bytes"]
    else:
        assert result["recomputed_ops"] > 0 and result["measured_host_peak_bytes"] == 0


def test_gpt_block_with_adam_recompute_replays_dropout(tmp_path):
    torch.manual_seed(0)
    model = GPT(layers=1, hidden=32, heads=2, sequence=16, vocab=64)
    batch = model.memplan_batch(2, [16])
    opt, captured = capture_setup(model, batch, model.memplan_loss, adam=True)
    plan = policy_plan(captured.trace, "recompute-all", tmp_path)
    result = validate(model, batch, model.memplan_loss, opt, plan, captured, memplan=str(MEMPLAN))
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]


def search_plan(trace, shares, tmp_path, *extra):
    """`memplan search`'s plan at the in-core peak less the first of `shares` of the feature-map
    bytes at which it finds one (small inputs leave little besides the parameters)."""
    need_memplan()
    trace_path, plan_path = tmp_path / "t.json", tmp_path / "search.json"
    from memplan.torch import write_trace
    write_trace(trace, trace_path)
    info = json.loads(subprocess.run([str(MEMPLAN), "info", "--json", trace_path],
                                     capture_output=True, text=True, check=True).stdout)
    for share in shares:
        budget = info["peak_bytes_incore"] - int(info["feature_map_bytes"] * share)
        run = subprocess.run([str(MEMPLAN), "search", trace_path, "--memory", f"{budget}B",
                              "--time-limit", "60", "--rounds", "4", "--deterministic", "--maps-only", "-o", plan_path,
                              *extra],
                             capture_output=True, text=True)
        if run.returncode == 0:
            return json.loads(plan_path.read_text())
    pytest.fail(run.stderr)


@pytest.mark.parametrize("which", ["mobilenet_v2", "gpt_block"])
def test_search_plan_at_half_the_saved_bytes_measures_its_predicted_peak(which, tmp_path):
    torch.manual_seed(0)
    if which == "gpt_block":
        model = GPT(layers=1, hidden=32, heads=2, sequence=16, vocab=64)
        batch, loss_fn = model.memplan_batch(2, [16]), model.memplan_loss
    else:
        model = torchvision.models.mobilenet_v2()
        batch = (torch.randn(2, 3, 64, 64), torch.randint(0, 1000, (2,)))
        loss_fn = F.cross_entropy
    opt, captured = capture_setup(model, batch, loss_fn)
    plan = search_plan(captured.trace, [0.5, 0.4, 0.3], tmp_path)
    assert any(m["action"] != "keep" for m in plan["maps"])
    result = validate(model, batch, loss_fn, opt, plan, captured, memplan=str(MEMPLAN))
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
    assert result["measured_host_peak_bytes"] == result["predicted_host_peak_bytes"]


def readers_in_forward(ops, tensor):
    """The forward ops reading `tensor`, and its producer."""
    producer = next(op["id"] for op in ops if tensor in op["outputs"])
    return [producer] + [op["id"] for op in ops if op["phase"] == "forward" and tensor in op["inputs"]]


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_plans_are_bitwise_lossless(seed):
    need_memplan()
    model, batch, opt, captured = tiny_setup()
    rng = random.Random(seed)
    maps = feature_maps(captured.trace)
    actions = {t: rng.choice(["keep", "swap", "recompute"]) for t in maps}
    plan = make_plan(captured.trace, actions)
    ops = captured.trace["ops"]
    for entry in plan["maps"]:  # half the swaps at a random prefetch point of their own
        if entry["action"] == "swap" and rng.random() < 0.5:
            readers = [op["id"] for op in ops if entry["tensor"] in op["inputs"]]
            first_backward = min(i for i in readers if ops[i]["phase"] == "backward")
            entry["prefetch_before"] = rng.randint(max(readers_in_forward(ops, entry["tensor"])) + 1,
                                                   first_backward)
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, memplan=str(MEMPLAN))
    assert result.lossless_ok, (actions, result)
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"], plan
    swapped = sum(captured.trace["tensors"][t]["bytes"] for t, a in actions.items() if a == "swap")
    assert result["measured_host_peak_bytes"] <= swapped


def test_a_plan_for_another_trace_is_refused():
    model, batch, opt, captured = tiny_setup()
    plan = make_plan(captured.trace, {})
    plan["workload"]["fingerprint"] = "0123456789abcdef"
    with pytest.raises(PlanError, match="made for another workload"):
        apply(model, plan, captured)


def test_a_plan_for_another_model_is_refused():
    model, batch, opt, captured = tiny_setup()
    plan = make_plan(captured.trace, {})
    other = nn.Sequential(nn.Conv2d(3, 8, 3))
    with pytest.raises(PlanError, match="another model"):
        apply(other, plan, captured)


def test_a_plan_for_another_input_shape_is_refused():
    model, batch, opt, captured = tiny_setup()
    planned = apply(model, make_plan(captured.trace, {}), captured)
    bigger = (torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,)))
    with pytest.raises(PlanError, match="another input shape") as error:
        planned.step(bigger, F.cross_entropy, opt)
    assert "\n" not in str(error.value)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device: apply/validate with CUDA memory needs a GPU")
def test_cuda_swap_plan_is_bitwise_lossless(tmp_path):
    torch.manual_seed(0)
    model = Tiny().cuda()
    batch = (torch.randn(4, 3, 8, 8).cuda(), torch.randint(0, 10, (4,)).cuda())
    opt, captured = capture_setup(model, batch)
    plan = policy_plan(captured.trace, "swap-all", tmp_path)
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, memplan=str(MEMPLAN))
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]


def test_fp16_plan_is_within_the_stated_tolerance_and_measures_its_peak(tmp_path):
    """encode:fp16 narrows each map after its last forward reader and widens it before its first
    backward one. Note [Validation tolerance] (runtime/validation.hpp) bounds the gradients
    norm-wise: ||plan - baseline|| <= min(4 * L * 2^-11, 0.5) * ||baseline|| for L narrowed maps."""
    need_memplan()
    model, batch, opt, captured = tiny_setup()
    tensors = captured.trace["tensors"]
    maps = [t for t in feature_maps(captured.trace) if tensors[t].get("dtype") == "float32"
            and tensors[t]["bytes"] > 64]
    plan = make_plan(captured.trace, {t: "encode:fp16" for t in maps})
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, memplan=str(MEMPLAN))
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
    bound = min(4.0 * len(maps) * 2.0 ** -11, 0.5)
    assert result["gradient_relative_error"] <= bound, (result, bound)
    assert result["gradient_relative_error"] > 0  # narrowed: not the baseline's bits


def test_plans_that_place_tensors_on_the_host_are_refused_with_one_line():
    """apply carries out feature-map plans; host placement (memplan's offload policies) is not."""
    model, batch, opt, captured = tiny_setup()
    tensors = captured.trace["tensors"]
    parameter = next(t["name"] for t in tensors if t["kind"] == "parameter")
    plan = make_plan(captured.trace, {})
    plan["tensors"] = [{"tensor": parameter, "placement": "host"}]
    with pytest.raises(PlanError, match="--maps-only") as error:
        apply(model, plan, captured)
    assert "\n" not in str(error.value)
    plan = make_plan(captured.trace, {})
    plan["update"] = "host"
    with pytest.raises(PlanError, match="update on the host"):
        apply(model, plan, captured)


def test_other_encodings_are_refused_with_one_line():
    model, batch, opt, captured = tiny_setup()
    maps = feature_maps(captured.trace)
    plan = make_plan(captured.trace, {maps[0]: "encode:fp8"})
    with pytest.raises(PlanError, match="not carried out") as error:
        apply(model, plan, captured)
    assert "\n" not in str(error.value)


def test_gpt_block_search_with_fp16_measures_its_peak_within_the_tolerance(tmp_path):
    """The search's plan with encode:fp16 allowed (swaps and narrowed maps): the saved-bytes and
    host peaks to the byte, the gradients within Note [Validation tolerance]'s bound."""
    torch.manual_seed(0)
    model = GPT(layers=1, hidden=32, heads=2, sequence=16, vocab=64)
    batch = model.memplan_batch(2, [16])
    opt, captured = capture_setup(model, batch, model.memplan_loss)
    plan = search_plan(captured.trace, [0.5, 0.4, 0.3], tmp_path, "--encode", "fp16")
    narrowed = sum(m["action"] == "encode:fp16" for m in plan["maps"])
    assert narrowed > 0
    result = validate(model, batch, model.memplan_loss, opt, plan, captured, memplan=str(MEMPLAN))
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
    assert result["measured_host_peak_bytes"] == result["predicted_host_peak_bytes"]
    assert result["gradient_relative_error"] <= min(4.0 * narrowed * 2.0 ** -11, 0.5), result
    assert result.within_tolerance and result["narrowed_maps"] == narrowed
