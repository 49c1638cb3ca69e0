"""memplan.torch.apply and validate: plans carried out through saved-tensor hooks give the baseline
step's loss, gradients and updated weights bit for bit (keep, swap, recompute, binarize, sparse) or
within Note [Validation tolerance] (fp16, fp10, fp8), with the saved-bytes peak the simulator
predicts; plans for another model or input shape, and encodings where their consumer pattern does
not hold, are refused with one line; random plans (fixed seeds) hold the same property."""

import gc
import json
import math
import pathlib
import random
import sys
import weakref

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
from memplan.torch.capture import memplan_trace  # noqa: E402
from memplan.torch.encodings import (decode_map, encode_map, encoded_bytes,  # noqa: E402
                                     narrow_codes, narrow_values)
from memplan.torch.models import GPT  # noqa: E402
from memplan.torch.recorder import StepRecorder  # noqa: E402
from memplan.torch.saved_bytes import feature_maps  # noqa: E402
from memplan.torch.validate import DoesNotFit, validate  # noqa: E402
from torch_support import Tiny, with_fixed_durations  # noqa: E402


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
            "workload": {"fingerprint": memplan_trace(trace).fingerprint, "ops": len(trace["ops"]),
                         "tensors": len(trace["tensors"])},
            "maps": [{"tensor": t, "action": a} for t, a in actions.items()]}


def policy_plan(trace, policy):
    """The policy's plan on the captured trace at 64 GiB (memplan.simulate), as a dict."""
    simulation = memplan.simulate(memplan_trace(trace), policy=policy, memory="64GiB")
    assert simulation.feasible, simulation.oom
    return simulation.plan.to_dict()


@pytest.mark.parametrize("policy", ["swap-all", "recompute-all"])
def test_resnet18_plans_are_bitwise_lossless(policy):
    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    batch = (torch.randn(2, 3, 32, 32), torch.randint(0, 1000, (2,)))
    opt, captured = capture_setup(model, batch)
    plan = policy_plan(captured.trace, policy)
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    assert result.lossless_ok, result
    # The saved-bytes peak (memplan.torch.saved_bytes) as the hooks measured it and as the
    # simulator predicts it, to the byte.
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
    if policy == "swap-all":
        # Every feature map is copied to host once: the simulator's host peak to the byte.
        assert result["measured_host_peak_bytes"] == result["predicted_host_peak_bytes"]
    else:
        assert result["recomputed_ops"] > 0 and result["measured_host_peak_bytes"] == 0


def test_gpt_block_with_adam_recompute_replays_dropout():
    torch.manual_seed(0)
    model = GPT(layers=1, hidden=32, heads=2, sequence=16, vocab=64)
    batch = model.memplan_batch(2, [16])
    opt, captured = capture_setup(model, batch, model.memplan_loss, adam=True)
    plan = policy_plan(captured.trace, "recompute-all")
    result = validate(model, batch, model.memplan_loss, opt, plan, captured)
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]


def search_plan(trace, shares, encode=None):
    """memplan.search's plan (maps only) at the in-core peak less the first of `shares` of the
    feature-map bytes at which it finds one (small inputs leave little besides the parameters)."""
    parsed = memplan_trace(trace)
    info = parsed.info()
    for share in shares:
        budget = info.peak_bytes_incore - int(info.feature_map_bytes * share)
        found = memplan.search(parsed, memory=budget, time_limit=60, rounds=4, deterministic=True,
                               maps_only=True, encode=encode)
        if found.feasible:
            return found.plan.to_dict()
    pytest.fail(f"no plan found at {shares} of the feature-map bytes")


@pytest.mark.parametrize("which", ["mobilenet_v2", "gpt_block"])
def test_search_plan_at_half_the_saved_bytes_measures_its_predicted_peak(which):
    torch.manual_seed(0)
    if which == "gpt_block":
        model = GPT(layers=1, hidden=32, heads=2, sequence=16, vocab=64)
        batch, loss_fn = model.memplan_batch(2, [16]), model.memplan_loss
    else:
        model = torchvision.models.mobilenet_v2()
        batch = (torch.randn(2, 3, 64, 64), torch.randint(0, 1000, (2,)))
        loss_fn = F.cross_entropy
    opt, captured = capture_setup(model, batch, loss_fn)
    plan = search_plan(captured.trace, [0.5, 0.4, 0.3])
    assert any(m["action"] != "keep" for m in plan["maps"])
    result = validate(model, batch, loss_fn, opt, plan, captured)
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
    assert result["measured_host_peak_bytes"] == result["predicted_host_peak_bytes"]


def readers_in_forward(ops, tensor):
    """The forward ops reading `tensor`, and its producer."""
    producer = next(op["id"] for op in ops if tensor in op["outputs"])
    return [producer] + [op["id"] for op in ops if op["phase"] == "forward" and tensor in op["inputs"]]


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_plans_are_bitwise_lossless(seed):
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
    for entry in plan["maps"]:  # half the swaps freed later than their last forward use
        if entry["action"] == "swap" and rng.random() < 0.5:
            dropped = max(readers_in_forward(ops, entry["tensor"]))
            readers = [op["id"] for op in ops if entry["tensor"] in op["inputs"]]
            first_backward = min(i for i in readers if ops[i]["phase"] == "backward")
            default = first_backward - 1 if first_backward - 1 > dropped else first_backward
            entry["release_before"] = rng.randint(dropped + 1,
                                                  entry.get("prefetch_before", default))
    for entry in plan["maps"]:  # half the recomputations per use
        if entry["action"] == "recompute" and rng.random() < 0.5:
            entry["per_use"] = True
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    assert result.lossless_ok, (actions, result)
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"], plan
    assert result["regenerated_left_bytes"] == 0, plan
    swapped = sum(captured.trace["tensors"][t]["bytes"] for t, a in actions.items() if a == "swap")
    assert result["measured_host_peak_bytes"] <= swapped


def test_a_step_lets_go_of_its_recorder_when_it_returns():
    """The capture's recorder and each planned step's go when the step returns, by reference
    counts alone, with every copy the plan made (issue 36: each one was held for good by its hook
    on the parameters' AccumulateGrad nodes, which outlive the step, so a recomputing plan's step
    kept its regenerated maps and grew by them every step); no hook stays on the model, nor after
    a step refused before it runs. Recorders an earlier test left reachable (a graph it kept) are
    not this test's."""
    gc.collect()
    earlier = weakref.WeakSet(o for o in gc.get_objects() if isinstance(o, StepRecorder))
    gc.disable()
    try:
        model, batch, opt, captured = tiny_setup()
        planned = apply(model, policy_plan(captured.trace, "recompute-all"), captured)
        for _ in range(2):
            planned.step(batch, F.cross_entropy, opt)
        assert planned.stats["recomputed_ops"] > 0
        with pytest.raises(PlanError):
            planned.step(batch, F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.01))
        left = [o for o in gc.get_objects()
                if isinstance(o, StepRecorder) and o not in earlier]
    finally:
        gc.enable()
    assert left == []
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


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


class ReluChain(nn.Module):
    """x -> fc1 -> three ReLUs -> fc2: each ReLU's output is saved by its own autograd node, the
    last one by fc2's too (for its weight's gradient)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 64), nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(torch.relu(torch.relu(torch.relu(self.fc1(x)))))


def test_per_use_recomputation_regenerates_for_every_node_that_reads_a_map():
    """per_use (SuperNeurons' memory-centric mode; refused before): a map is regenerated for each
    autograd node that unpacks it, from the checkpoint (fc1's input), and let go with what was
    regenerated on the way when that node returns (Lowerer::forget_per_use). Recomputing the three
    ReLU outputs once re-runs fc1's addmm and the three ReLUs (4 ops) when fc2's node first needs
    the last one and keeps all three; per use, fc2's node and the last ReLU's re-run the 4 ops
    each, the second ReLU's 3 (addmm, two ReLUs) and the first's 2: 13. The step is still
    bitwise, the saved-bytes peak is the simulator's to the byte, and it is lower than recompute
    once's, which holds all three maps once fc2's node has run."""
    torch.manual_seed(0)
    model = ReluChain()
    batch = (torch.randn(4, 16), torch.randint(0, 10, (4,)))
    opt, captured = capture_setup(model, batch)
    tensors = captured.trace["tensors"]
    relus = [t for t in feature_maps(captured.trace) if tensors[t]["name"].startswith("relu")]
    assert len(relus) == 3
    results = {}
    for per_use in (False, True):
        plan = make_plan(captured.trace, {t: "recompute" for t in relus})
        for entry in plan["maps"]:
            entry["per_use"] = per_use
        result = validate(model, batch, F.cross_entropy, opt, plan, captured)
        assert result.lossless_ok, result
        assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
        results[per_use] = result
    assert results[False]["recomputed_ops"] == 4
    assert results[True]["recomputed_ops"] == 4 + 4 + 3 + 2
    assert results[True]["measured_saved_peak_bytes"] < results[False]["measured_saved_peak_bytes"]
    # fc1's output is no map (addmm's backward reads its input, ReLU's its output): regenerated
    # on the way to the first ReLU's output, it goes after the re-run that reads it, the first
    # ReLU's, as the lowering frees it; it was held to the end of the step (16 x 32 floats).
    for result in results.values():
        assert result["regenerated_left_bytes"] == 0, result


def test_a_copy_regenerated_on_the_way_goes_after_the_rerun_that_reads_it_last():
    """sim::regenerated_frees on ReluChain, every ReLU output recomputed once: the copy of fc1's
    output (no map) that the regeneration makes goes after the first ReLU's re-run, the only one
    that reads it; the ReLU outputs are maps, let go at their own drop points."""
    torch.manual_seed(0)
    model = ReluChain()
    batch = (torch.randn(4, 16), torch.randint(0, 10, (4,)))
    _, captured = capture_setup(model, batch)
    tensors, ops = captured.trace["tensors"], captured.trace["ops"]
    relus = [t for t in feature_maps(captured.trace) if tensors[t]["name"].startswith("relu")]
    plan = memplan.parse_plan(json.dumps(make_plan(captured.trace, {t: "recompute" for t in relus})),
                              memplan_trace(captured.trace), "the plan")
    frees = memplan._validation.regenerated_frees(plan)
    assert len(frees) == 1, frees
    tensor, rerun, occurrence = frees[0]
    assert ops[tensors[tensor]["producer"]]["name"] == "fc1.addmm"
    assert rerun == tensors[relus[0]]["producer"] and tensor in ops[rerun]["inputs"]
    assert occurrence == 0


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device: apply/validate with CUDA memory needs a GPU")
def test_cuda_swap_plan_is_bitwise_lossless():
    torch.manual_seed(0)
    model = Tiny().cuda()
    batch = (torch.randn(4, 3, 8, 8).cuda(), torch.randint(0, 10, (4,)).cuda())
    opt, captured = capture_setup(model, batch)
    plan = policy_plan(captured.trace, "swap-all")
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
    # CUDA memory: swapping every map must lower what the step allocates above its resident
    # tensors, as the simulator predicts it lower than in-core's.
    assert result["measured_cuda_step_peak_bytes"] < result["baseline_cuda_step_peak_bytes"], result
    assert result["predicted_step_peak_bytes"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device: PyTorch's CUDA kernels need a GPU")
@pytest.mark.parametrize("name", ["mobilenet_v2", "efficientnet_b0"])
def test_cuda_plans_of_depthwise_networks_are_bitwise_lossless(name):
    """On an H200, both networks' swap-all and recompute-all steps differed from their baselines
    (every plan, swaps included) while resnet18's and densenet121's did not: the two steps were not
    repeatable until validate ran them under PyTorch's deterministic algorithms."""
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10).cuda()
    batch = (torch.randn(4, 3, 64, 64).cuda(), torch.randint(0, 10, (4,)).cuda())
    opt, captured = capture_setup(model, batch)
    before = torch.backends.cudnn.deterministic, torch.are_deterministic_algorithms_enabled()
    for policy in ("swap-all", "recompute-all"):
        result = validate(model, batch, F.cross_entropy, opt, policy_plan(captured.trace, policy),
                          captured)
        assert result.lossless_ok, (policy, result)
    assert (torch.backends.cudnn.deterministic, torch.are_deterministic_algorithms_enabled()) == \
        before


def test_cpu_validation_reports_no_cuda_memory():
    model, batch, opt, captured = tiny_setup()
    result = validate(model, batch, F.cross_entropy, opt, make_plan(captured.trace, {}), captured)
    assert result["measured_cuda_step_peak_bytes"] is None
    assert result["baseline_cuda_step_peak_bytes"] is None
    assert result["predicted_step_peak_bytes"] > 0


def test_validate_predicts_on_the_machine_the_what_if_values_describe():
    """The what-if values act on the prediction as in memplan.simulate: a swap plan is predicted
    slower over PCIe 3 than over NVLink 2, slower still over a 1 MB/s link; the machine is
    reported; the measured side (results, peaks) does not depend on it."""
    model, batch, opt, captured = tiny_setup()
    plan = policy_plan(captured.trace, "swap-all")

    def run(**what_if):
        result = validate(model, batch, F.cross_entropy, opt, plan, captured, **what_if)
        assert result.lossless_ok and result.peaks_match, result
        return result

    pcie3, nvlink2 = run(link="pcie3"), run(link="nvlink2")
    slow = run(link="nvlink2", h2d="1MB/s", d2h="2MB/s", latency="1ms", allocator="caching")
    assert pcie3["machine"]["h2d_bytes_per_s"] == 16e9
    assert nvlink2["machine"]["h2d_bytes_per_s"] == 75e9
    assert slow["machine"] == dict(nvlink2["machine"], h2d_bytes_per_s=1e6, d2h_bytes_per_s=2e6,
                                   copy_latency_ns=1000000, allocator="caching")
    assert slow["predicted_seconds"] > pcie3["predicted_seconds"] > nvlink2["predicted_seconds"]
    expected = memplan.simulate(memplan_trace(captured), policy="in-core")
    assert run()["machine"] == expected.summary["machine"]  # no what-if: the trace's device


def test_a_plan_that_does_not_fit_the_machine_is_refused_unless_forced():
    """memory (the device's) and host_memory (pinned host memory for swapped maps) make the
    prediction not fit: DoesNotFit before anything runs, unless force=True."""
    model, batch, opt, captured = tiny_setup()
    plan = policy_plan(captured.trace, "swap-all")
    for what_if in ({"memory": "1KiB"}, {"host_memory": "1KiB"}):
        with pytest.raises(DoesNotFit, match="does not fit") as error:
            validate(model, batch, F.cross_entropy, opt, plan, captured, **what_if)
        assert "\n" not in str(error.value)
    forced = validate(model, batch, F.cross_entropy, opt, plan, captured, memory="1KiB",
                      force=True)
    assert forced.lossless_ok and not forced["predicted_feasible"]
    assert forced["predicted_seconds"] is None and forced["predicted_oom"]


def test_memplan_torch_asks_the_simulator_in_process():
    """No module of memplan.torch runs another process: every question to the simulator goes to
    memplan._core (issue 33: no second copy of the core reached by subprocess)."""
    folder = pathlib.Path(sys.modules["memplan.torch"].__file__).parent
    sources = sorted(folder.glob("*.py"))
    assert sources
    for source in sources:
        text = source.read_text()
        for word in ("subprocess", "os.system", "os.popen", "os.exec"):
            assert word not in text, f"{source.name} uses {word}"


def test_fp16_plan_is_within_the_stated_tolerance_and_measures_its_peak():
    """encode:fp16 narrows each map after its last forward reader and widens it before its first
    backward one. Note [Validation tolerance] (runtime/validation.hpp) bounds the gradients
    norm-wise: ||plan - baseline|| <= min(4 * L * 2^-11, 0.5) * ||baseline|| for L narrowed maps."""
    model, batch, opt, captured = tiny_setup()
    tensors = captured.trace["tensors"]
    maps = [t for t in feature_maps(captured.trace) if tensors[t].get("dtype") == "float32"
            and tensors[t]["bytes"] > 64]
    plan = make_plan(captured.trace, {t: "encode:fp16" for t in maps})
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
    bound = min(4.0 * len(maps) * 2.0 ** -11, 0.5)
    assert result["gradient_relative_error"] <= bound, (result, bound)
    assert result["gradient_relative_error"] > 0  # narrowed: not the baseline's bits


def test_host_placement_is_taken_and_a_host_update_the_reader_refuses_is_one_line():
    """apply carries out host placement (test_torch_host_placement.py has the figures); an update
    on the host that memplan's plan reader refuses is one line."""
    model, batch, opt, captured = tiny_setup()
    plan = make_plan(captured.trace, {})
    plan["tensors"] = [{"tensor": "conv1.weight", "placement": "host"}]
    apply(model, plan, captured)  # carried out
    plan["update"] = "host"
    # (memplan's plan reader refuses this one: the update reads gradients and optimizer state
    # left on the device)
    with pytest.raises(PlanError, match="on the device") as error:
        apply(model, plan, captured)
    assert "\n" not in str(error.value)


def test_gpt_block_search_with_fp16_measures_its_peak_within_the_tolerance():
    """The search's plan with encode:fp16 allowed (swaps and narrowed maps): the saved-bytes and
    host peaks to the byte, the gradients within Note [Validation tolerance]'s bound."""
    torch.manual_seed(0)
    model = GPT(layers=1, hidden=32, heads=2, sequence=16, vocab=64)
    batch = model.memplan_batch(2, [16])
    opt, captured = capture_setup(model, batch, model.memplan_loss)
    plan = search_plan(with_fixed_durations(captured.trace), [0.5, 0.4, 0.3], encode="fp16")
    narrowed = sum(m["action"] == "encode:fp16" for m in plan["maps"])
    assert narrowed > 0
    result = validate(model, batch, model.memplan_loss, opt, plan, captured)
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
    assert result["measured_host_peak_bytes"] == result["predicted_host_peak_bytes"]
    assert result["gradient_relative_error"] <= min(4.0 * narrowed * 2.0 ** -11, 0.5), result
    assert result.within_tolerance and result["narrowed_maps"] == narrowed


# ---- Gist's encodings ----------------------------------------------------------------------------

def reference_code(exponent_bits, mantissa_bits, value):
    """host_backend/encodings.cpp's narrow_encode_value, line for line, in Python's doubles."""
    bias = (1 << (exponent_bits - 1)) - 1
    ones = (1 << exponent_bits) - 1
    sign = 1 << (exponent_bits + mantissa_bits) if math.copysign(1.0, value) < 0 else 0
    if math.isnan(value):
        return (ones << mantissa_bits) | 1
    if math.isinf(value):
        return sign | (ones << mantissa_bits)
    a = abs(value)
    if a == 0.0:
        return sign
    min_exponent = 1 - bias
    max_finite = math.ldexp(2.0 - math.ldexp(1.0, -mantissa_bits), bias)
    exponent = max(math.frexp(a)[1] - 1, min_exponent)
    quantum = math.ldexp(1.0, exponent - mantissa_bits)
    q = min(round(a / quantum) * quantum, max_finite)  # round: to nearest, ties to even
    if q == 0.0:
        return sign
    e = math.frexp(q)[1] - 1
    if e < min_exponent:
        return sign | int(math.ldexp(q, mantissa_bits - min_exponent))
    mantissa = int(math.ldexp(q, mantissa_bits - e)) - (1 << mantissa_bits)
    return sign | ((e + bias) << mantissa_bits) | mantissa


def awkward_floats():
    """float32 values in every range of every narrow format: random magnitudes over 2^-30..2^20,
    the formats' ties, subnormals, largest values and overflows, zeros of both signs, inf, NaN."""
    g = torch.Generator().manual_seed(7)
    spread = torch.randn(3000, generator=g) * torch.exp2(torch.randint(-30, 20, (3000,),
                                                                       generator=g).float())
    special = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, 1.03125, 1.09375, 1.0625 + 2 ** -23,
               2 ** -14, 2 ** -24, 3 * 2 ** -25, 2 ** -6, 2 ** -9, 2 ** -10, 3 * 2 ** -11,
               65504.0, 65520.0, 70000.0, 63488.0, 64000.0, 240.0, 248.0, 1e30, 1e-40, -1e-45]
    ties = [(k + 0.5) * 2.0 ** -m for m in (3, 4, 10) for k in range(16, 40)]
    return torch.cat([spread, torch.tensor(special + ties + [-v for v in ties])])


@pytest.mark.parametrize("scheme", ["fp16", "fp10", "fp8"])
def test_narrow_codes_are_host_backends(scheme):
    """apply's fp16, fp10 and fp8 (integer ops on the float32 bits) give the codes and values
    host_backend's encoder gives: nearest, ties to even, subnormals, saturation; fp16's codes are
    IEEE half's where half does not overflow; packed into sim::encoded_bytes."""
    exponent_bits, mantissa_bits = {"fp16": (5, 10), "fp10": (5, 4), "fp8": (4, 3)}[scheme]
    x = awkward_floats()
    codes = narrow_codes(x, scheme)
    assert codes.tolist() == [reference_code(exponent_bits, mantissa_bits, v) for v in x.tolist()]
    values = narrow_values(codes, scheme)
    finite = torch.isfinite(x)
    if scheme == "fp16":
        in_range = finite & (x.abs() < 65520)
        assert torch.equal(codes[in_range], x[in_range].half().view(torch.int16).int() & 0xFFFF)
        assert torch.equal(values[in_range], x[in_range].half().float())
    assert torch.equal(narrow_codes(values[finite], scheme), codes[finite])  # values are codes'
    encoded = encode_map(x, scheme)
    assert encoded.nbytes == encoded_bytes(scheme, x.numel())
    assert encoded.nbytes == (x.numel() * (1 + exponent_bits + mantissa_bits) + 7) // 8
    decoded = decode_map(encoded)
    assert torch.equal(decoded[finite], values[finite]) and decoded[~finite].isnan().sum() == 1


def test_binarize_and_sparse_encodings_round_trip():
    """binarize keeps the sign (1 bit a value, decoded 1.0 / 0.0); sparse decodes bit for bit,
    -0.0 included, in the planned sim::encoded_bytes buffer, a denser map's rest spilled."""
    g = torch.Generator().manual_seed(3)
    for n in (1, 255, 256, 1000, 4097):
        x = torch.relu(torch.randn(n, generator=g))
        x[::7] = -0.0
        b = encode_map(x, "binarize")
        assert b.nbytes == (n + 7) // 8 == encoded_bytes("binarize", n)
        assert torch.equal(decode_map(b), (x > 0).float())
        for density in (0.1, 0.9):
            y = torch.where(torch.rand(n, generator=g) < density, x, torch.zeros(()))
            s = encode_map(y, "sparse")
            assert s.nbytes == encoded_bytes("sparse", n) == \
                2 * -(-n // 256) + 5 * math.ceil(n / 2)
            assert torch.equal(decode_map(s).view(torch.int32), y.view(torch.int32))
            stored = int((y.view(torch.int32) != 0).sum())
            spilled = 0 if s.spilled is None else s.spilled.numel()
            assert spilled == max(0, 2 * -(-n // 256) + 5 * stored - s.nbytes)


class Gist(nn.Module):
    """Gist's patterns: conv-bn-relu_ -> max-pool (binarize, in place), conv-bn-relu -> conv
    (sparse), conv-relu -> max-pool (binarize)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.conv3 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x)), inplace=True), 2)
        h = self.conv3(F.relu(self.bn2(self.conv2(h))))
        return self.fc(F.max_pool2d(F.relu(h), 2).flatten(1))


def gist_setup():
    torch.manual_seed(0)
    model = Gist()
    batch = (torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))
    opt, captured = capture_setup(model, batch)
    return model, batch, opt, captured


def encode_plan(trace, encodings):
    """The in-core plan with `encodings` applied (memplan.simulate(policy="in-core",
    encode=...)): every map the encodings' consumer patterns allow encoded, the rest kept."""
    simulation = memplan.simulate(memplan_trace(trace), policy="in-core", encode=encodings,
                                  memory="1GiB")
    assert simulation.feasible, simulation.oom
    return simulation.plan.to_dict()


def test_binarize_and_sparse_plan_is_bitwise_and_measures_its_peak():
    """Two ReLU outputs a max-pool reads binarized, one a convolution reads sparse: the loss,
    gradients and updated weights bit for bit, the saved-bytes peak the simulator's (the encoded
    buffers sized as sim::encoded_bytes, a sparse one for half its values)."""
    model, batch, opt, captured = gist_setup()
    plan = encode_plan(captured.trace, "binarize,sparse")
    actions = [m["action"] for m in plan["maps"]]
    assert actions.count("encode:binarize") == 2 and actions.count("encode:sparse") == 1
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    assert result.lossless_ok and result.within_tolerance, result
    assert result["narrowed_maps"] == 0
    assert result.peaks_match, result
    # in-core keeps every map: the encodings' savings are what lowers the peak
    incore = validate(model, batch, F.cross_entropy, opt, make_plan(captured.trace, {}), captured)
    assert result["measured_saved_peak_bytes"] < incore["measured_saved_peak_bytes"]


@pytest.mark.parametrize("scheme", ["fp10", "fp8"])
def test_fp10_and_fp8_plans_are_within_the_tolerance_and_measure_their_peak(scheme):
    """Every float32 map narrowed: the gradients within min(4 L u, 0.5) (u = 2^-5 for fp10, 2^-4
    for fp8), the saved-bytes peak the simulator's to the byte (10 or 8 bits a value)."""
    model, batch, opt, captured = gist_setup()
    plan = encode_plan(captured.trace, scheme)
    narrowed = sum(m["action"] == f"encode:{scheme}" for m in plan["maps"])
    assert narrowed > 0
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    u = {"fp10": 2.0 ** -5, "fp8": 2.0 ** -4}[scheme]
    assert result["narrowed_maps"] == narrowed and result["unit_roundoff"] == u
    assert result["gradient_tolerance"] == min(4.0 * narrowed * u, 0.5)
    assert 0 < result["gradient_relative_error"] <= result["gradient_tolerance"], result
    assert result.within_tolerance and result.peaks_match, result


class ReluToPoolAndConv(nn.Module):
    """A ReLU output that a max-pool reads (Gist's binarize pattern, which the simulator accepts)
    and a convolution reads too, whose backward needs its values, not its sign."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, stride=2)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        return self.fc((F.max_pool2d(h, 2) + self.conv2(h)).flatten(1))


def test_encodings_whose_pattern_does_not_hold_are_refused_with_one_line():
    """The simulator's rules, from memplan's plan reader: binarize of a ReLU output no max-pool
    reads, an encoding of a map that is not float32, a lossy encoding a recomputation would read,
    an unknown scheme. PyTorch's own: binarize of a map a backward op reads the values of. One
    line each."""
    model, batch, opt, captured = gist_setup()
    tensors, ops = captured.trace["tensors"], captured.trace["ops"]
    to_conv = next(op["inputs"][0] for op in ops  # the ReLU output conv3 reads
                   if op["layer"] == "conv2d" and op["phase"] == "forward"
                   and tensors[op["inputs"][0]]["producer"] is not None
                   and ops[tensors[op["inputs"][0]]["producer"]]["layer"] == "relu")
    indices = next(t["id"] for t in tensors if t["dtype"] == "int64" and t["kind"] == "activation")
    conv = next(op for op in ops if op["phase"] == "forward" and to_conv in op["inputs"])
    # The ReLU after conv3: regenerating it re-runs conv3 (its input is no feature map), which
    # reads to_conv.
    relu3 = next(op for op in ops
                 if op["phase"] == "forward" and conv["outputs"][0] in op["inputs"])
    cases = [({to_conv: "encode:binarize"}, "needs a ReLU output that a max-pool reads"),
             ({indices: "encode:sparse"}, "needs a float32 map, this one is int64"),
             ({to_conv: "encode:fp8", relu3["outputs"][0]: "recompute"},
              "re-run to regenerate a recomputed map"),
             ({to_conv: "encode:fp4"}, "unknown action 'encode:fp4'")]
    for actions, why in cases:
        with pytest.raises(PlanError, match=why) as error:
            apply(model, make_plan(captured.trace, actions), captured)
        assert "\n" not in str(error.value)
    torch.manual_seed(0)
    model = ReluToPoolAndConv()
    opt, captured = capture_setup(model, (torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,))))
    relu = next(op["outputs"][0] for op in captured.trace["ops"] if op["layer"] == "relu")
    with pytest.raises(PlanError, match="convolution_backward' \\(conv2d\\) reads its values"):
        apply(model, make_plan(captured.trace, {relu: "encode:binarize"}), captured)


def random_encoded_plan(trace, seed):
    """Each map kept, swapped, recomputed, or encoded where its consumer pattern holds: fp10 or fp8
    for a float32 map, binarize for a ReLU output a max-pool reads, sparse for one a convolution
    reads (seeds whose plan the simulator and apply accept: no lossy map read by a re-run op)."""
    rng = random.Random(seed)
    ops, tensors = trace["ops"], trace["tensors"]
    actions = {}
    for t in feature_maps(trace):
        choices = ["keep", "swap", "recompute"]
        if tensors[t].get("dtype") == "float32":
            readers = [op["layer"] for op in ops if op["phase"] == "forward" and t in op["inputs"]]
            relu = ops[tensors[t]["producer"]]["layer"] == "relu"
            choices.append(rng.choice(["encode:fp8", "encode:fp10"]))
            if relu and "max_pool2d" in readers:
                choices.append("encode:binarize")
            if relu and "conv2d" in readers:
                choices += ["encode:sparse"] * 2
        actions[t] = rng.choice(choices)
    return make_plan(trace, actions)


@pytest.mark.parametrize("seed", [3, 19, 20, 25, 127, 194])
def test_random_plans_with_encodings_measure_their_peak_within_the_tolerance(seed):
    """Encodings among swaps and recomputations (a sparse map a regeneration decodes, a denser
    sparse map spilling): the saved-bytes peak to the byte, the gradients within the bound."""
    model, batch, opt, captured = gist_setup()
    plan = random_encoded_plan(captured.trace, seed)
    actions = {m["action"] for m in plan["maps"]}
    assert {"swap", "recompute"} <= actions and any(a.startswith("encode:") for a in actions)
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    assert result.within_tolerance and result.peaks_match, (plan, result)
    assert result["regenerated_left_bytes"] == 0, plan


def test_validation_copies_own_their_optimizer_state():
    """validate's two copies of the optimizer must not share its momentum buffers: PyTorch 2's
    load_state_dict keeps the tensors it is given, and the baseline step would then move the
    planned step's momentum (found on torch 2.11: every weight off, gradients equal)."""
    from memplan.torch.validate import _copy
    model, batch, opt, _ = tiny_setup()
    assert opt.state, "the captured step made momentum buffers"
    model2, opt2 = _copy(model, opt)
    for p, p2 in zip(model.parameters(), model2.parameters()):
        mine, theirs = opt.state[p]["momentum_buffer"], opt2.state[p2]["momentum_buffer"]
        assert torch.equal(mine, theirs)
        assert mine.data_ptr() != theirs.data_ptr()


def test_a_recompute_chain_longer_than_pythons_recursion_limit_is_carried_out():
    """recompute-all on a deep MLP regenerates, at the first backward unpack, every layer from the
    input: a chain of 2 * 250 ops, each of whose inputs is gone. It is walked without Python
    recursion (issue 36: a 100-layer MLP and efficientnet_b0 hit the recursion limit)."""
    torch.manual_seed(0)
    layers = 250
    model = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(4, 4), nn.ReLU())])
    batch = (torch.randn(2, 4), torch.randint(0, 4, (2,)))
    opt, captured = capture_setup(model, batch)
    plan = policy_plan(captured.trace, "recompute-all")
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    assert result.lossless_ok and result.peaks_match, result
    assert result["recomputed_ops"] >= 2 * layers - 2
    assert result["regenerated_left_bytes"] == 0


class PartlyTrained(nn.Module):
    """A frozen stem, a branch the forward never uses, and a trained head: the frozen and unused
    parameters end the step with no gradient (None)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.unused = nn.Linear(8, 8)
        self.body = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8 * 8 * 8, 10)
        self.stem.requires_grad_(False)

    def forward(self, x):
        return self.head(F.relu(self.body(F.relu(self.stem(x)))).flatten(1))


def partly_trained_setup():
    """PartlyTrained under AdamW over the trained parameters only, in two groups: weight decay on
    the weights, none on the biases (as training recipes do)."""
    torch.manual_seed(0)
    model = PartlyTrained()
    trained = [(n, p) for n, p in model.named_parameters()
               if p.requires_grad and not n.startswith("unused")]
    groups = [{"params": [p for n, p in trained if not n.endswith("bias")], "weight_decay": 0.1},
              {"params": [p for n, p in trained if n.endswith("bias")], "weight_decay": 0.0,
               "lr": 3e-3}]
    opt = torch.optim.AdamW(groups, lr=1e-3, foreach=False)
    batch = (torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,)))
    return model, batch, opt, capture(model, batch, F.cross_entropy, opt)


@pytest.mark.parametrize("policy", ["swap-all", "recompute-all"])
def test_validate_takes_frozen_and_unused_parameters_and_parameter_groups(policy):
    """None gradients (a frozen stem, an unused branch) compare equal to None, and the optimizer
    is copied as it is, over a subset of the parameters in two groups (issue 36: validate
    compared None gradients and rebuilt the optimizer from its defaults)."""
    model, batch, opt, captured = partly_trained_setup()
    plan = policy_plan(captured.trace, policy)
    result = validate(model, batch, F.cross_entropy, opt, plan, captured)
    assert result.lossless_ok and result.peaks_match, result
    assert result["gradient_relative_error"] == 0.0
    assert model.stem.weight.grad is None and model.unused.weight.grad is None


def test_validation_copies_the_optimizer_as_it_is():
    """The copies' optimizers have the user's groups, options and state, over the copied model's
    parameters."""
    from memplan.torch.validate import _copy
    model, _, opt, _ = partly_trained_setup()
    model2, opt2 = _copy(model, opt)
    params2 = {id(p): n for n, p in model2.named_parameters()}
    names = {id(p): n for n, p in model.named_parameters()}
    assert type(opt2) is type(opt) and len(opt2.param_groups) == len(opt.param_groups) == 2
    for group, group2 in zip(opt.param_groups, opt2.param_groups):
        assert [names[id(p)] for p in group["params"]] == [params2[id(p)] for p in group2["params"]]
        assert {k: v for k, v in group.items() if k != "params"} == \
            {k: v for k, v in group2.items() if k != "params"}
    for p, p2 in zip(model.parameters(), model2.parameters()):
        assert (p in opt.state) == (p2 in opt2.state)
        if p in opt.state:
            assert torch.equal(opt.state[p]["exp_avg"], opt2.state[p2]["exp_avg"])
            assert opt.state[p]["exp_avg"].data_ptr() != opt2.state[p2]["exp_avg"].data_ptr()


class WithAuxiliaryHead(nn.Module):
    """A trunk and an auxiliary classifier whose output the step returns but the loss does not
    read (GoogLeNet's and Inception's in training mode): the head's autograd nodes never run, so
    what they saved is never unpacked, and it goes with the graph after the step."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.aux = nn.Sequential(nn.Conv2d(8, 4, 1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 64, 10))
        self.fc = nn.Linear(8 * 64, 10)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        aux = self.aux(h)
        return self.fc(F.relu(self.conv2(h)).flatten(1)), aux


def main_logits_loss(output, target):
    return F.cross_entropy(output[0], target)


@pytest.mark.parametrize("policy", ["recompute-all", "swap-all"])
def test_what_an_unused_head_saved_is_held_to_the_end_as_in_the_real_step(policy):
    """What the auxiliary head saved (its ReLU's output, the flattened input of its linear) is
    read by the step's last op, an update op, so it is no feature map, and no plan drops it: the
    planned run holds it as autograd does, and the saved-bytes peak is the predicted one (issue
    36: GoogLeNet's recomputing plans measured 993,280 B over, when such tensors were given to
    the last backward op as feature maps that the plan dropped and the real step kept)."""
    torch.manual_seed(0)
    model = WithAuxiliaryHead()
    batch = (torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,)))
    opt, captured = capture_setup(model, batch, main_logits_loss)
    trace = captured.trace
    last = trace["ops"][-1]
    assert last["phase"] == "update"
    held = [t for t in last["inputs"] if trace["tensors"][t]["kind"] == "activation"]
    assert held and set(held) == set(captured.stats["never_unpacked"])
    # They are not among what backward keeps, on either side of capture's identity.
    assert memplan_trace(trace).saved_activation_bytes() == \
        captured.saved_bytes_hooks + captured.held_bytes
    maps = {m["tensor"] for m in policy_plan(trace, policy)["maps"]}
    assert maps and not maps & set(held)
    result = validate(model, batch, main_logits_loss, opt, policy_plan(trace, policy), captured)
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
