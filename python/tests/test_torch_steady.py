"""memplan.torch's steady path (issue 36): a PlannedModel's steps after a recorded one run the plan
through saved-tensor hooks alone, with no dispatch mode. Each test compares a planned model with
a copy of it trained by the plain step, bit for bit (loss, gradients, weights and buffers) over
several steps on other batches of the captured shapes; the steady path is shown taken by a
dispatch mode that is active in the recorded step and not in the steady ones; a steady step's
measured saved-bytes and host peaks are shown to be the simulator's, to the byte, from its own
log; plans and steps the steady path does not carry out are shown recorded, and a step that takes
another path than the recorded one is shown to finish with the in-core step's values and hand
over to the recorded path."""

import copy
import pathlib
import sys

import pytest
import torch
from torch import nn
from torch.nn import functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build

import memplan  # noqa: E402
from memplan.torch import PlanError, apply, capture  # noqa: E402
from memplan.torch.capture import memplan_trace, run_step  # noqa: E402
from memplan.torch.models import GPT  # noqa: E402
from memplan.torch.saved_bytes import peak  # noqa: E402
from memplan.torch.steady import _UNPACK, SteadyPathWarning  # noqa: E402
from memplan.torch.validate import predict  # noqa: E402

STEPS = 4


def policy_plan(trace, policy):
    simulation = memplan.simulate(memplan_trace(trace), policy=policy, memory="64GiB")
    assert simulation.feasible, simulation.oom
    return simulation.plan.to_dict()


def dispatch_mode_active():
    """Whether a TorchDispatchMode is active now (the recorder's is, in a recorded step)."""
    return torch._C._len_torch_dispatch_stack() > 0


class Watched:
    """A loss function that notes, at each call, whether a dispatch mode is active."""

    def __init__(self, loss_fn):
        self.loss_fn, self.modes = loss_fn, []

    def __call__(self, output, target):
        self.modes.append(dispatch_mode_active())
        return self.loss_fn(output, target)


def gpt(dropout=0.0):
    torch.manual_seed(0)
    model = GPT(layers=2, hidden=32, heads=2, sequence=16, vocab=64, dropout=dropout)
    return model, lambda: model.memplan_batch(4, [16]), model.memplan_loss


class Pooled(nn.Module):
    """A CNN with batch norm, in-place ReLUs and max-pooling; `pool` pools once more (a flag the
    step does not see that changes the shapes forward saves)."""

    def __init__(self):
        super().__init__()
        self.pool = False
        self.a = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8),
                               nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.b = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8),
                               nn.ReLU(inplace=True))
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        x = self.a(x)
        if self.pool:
            x = F.max_pool2d(x, 2)
        return self.head(F.adaptive_avg_pool2d(self.b(x), 1).flatten(1))


def cnn():
    torch.manual_seed(0)
    return (Pooled(), lambda: (torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))),
            F.cross_entropy)


def cnn16():
    """`cnn` on 16 images of 16x16: maps enough beside the parameters for memplan.search to
    find a plan that swaps some and recomputes others."""
    model, _, loss_fn = cnn()
    return model, lambda: (torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))), loss_fn


def searched(trace):
    """memplan.search's plan (maps only) at the in-core peak less the first share of the
    feature-map bytes at which it finds one, with any prefetch before a forward op moved to its
    default point (the steady path records such a plan's steps: `forward_prefetch_plan`)."""
    parsed = memplan_trace(trace)
    info = parsed.info()
    ops = {op["name"]: op for op in trace["ops"]}
    for share in (0.5, 0.4, 0.3, 0.2, 0.15, 0.1):
        found = memplan.search(parsed, memory=info.peak_bytes_incore - int(
            info.feature_map_bytes * share), time_limit=60, rounds=4, deterministic=True,
            maps_only=True)
        if found.feasible:
            plan = found.plan.to_dict()
            for entry in plan["maps"]:
                at = entry.get("prefetch_before")
                op = trace["ops"][at] if isinstance(at, int) else ops.get(at)
                if op is not None and op["phase"] == "forward":
                    del entry["prefetch_before"]
            return plan
    pytest.fail("no plan found")


def planned_setup(make, policy, step=None, with_plan=False):
    """A model captured (with training step `step`) and planned with `policy` (a policy's name,
    a plan, or a function of the trace that makes one), and a copy of it and its optimizer (taken
    after the capture's steps) to train by the plain step; with the plan and the capture too
    when `with_plan`."""
    model, batches, loss_fn = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    captured = capture(model, batches(), loss_fn, opt, step=step)
    plan = policy if isinstance(policy, dict) else policy(captured.trace) if callable(policy) \
        else policy_plan(captured.trace, policy)
    planned = apply(model, plan, captured, step=step)
    base, base_opt = copy.deepcopy((model, opt))
    if with_plan:
        return planned, opt, base, base_opt, batches, loss_fn, plan, captured
    return planned, opt, base, base_opt, batches, loss_fn


def assert_same(base, model, base_loss, loss):
    assert torch.equal(base_loss, loss)
    for (name, a), b in zip(base.named_parameters(), model.parameters()):
        assert torch.equal(a.grad, b.grad), name
    for (name, a), b in zip(base.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name


def run_both(planned, opt, base, base_opt, batch, loss_fn, seed):
    torch.manual_seed(seed)
    base_loss = run_step(base, batch, loss_fn, base_opt)
    torch.manual_seed(seed)
    loss = planned.step(batch, loss_fn, opt)
    assert_same(base, planned.model, base_loss, loss)


@pytest.mark.parametrize("make", [gpt, cnn])
@pytest.mark.parametrize("policy", ["in-core", "swap-all", "recompute-all", "checkpoint-sqrt"])
def test_steady_steps_are_bitwise_the_in_core_step(make, policy):
    """The first step is recorded under the recorder's dispatch mode, the next ones are steady (no
    dispatch mode); every one gives the loss, gradients, weights and buffers of the plain step,
    bit for bit, on a new batch each step; the steady steps swap and recompute what the plan says."""
    planned, opt, base, base_opt, batches, loss_fn = planned_setup(make, policy)
    watched = Watched(loss_fn)
    for i in range(STEPS):
        run_both(planned, opt, base, base_opt, batches(), watched, seed=i)
        assert planned.stats["steady"] == (i > 0)
    # the planned steps' calls (each follows its base step's): the recorder's mode, then none
    assert watched.modes[1::2] == [True] + [False] * (STEPS - 1)
    assert (planned.recorded_steps, planned.steady_steps) == (1, STEPS - 1)
    assert planned.steady_reason is None
    if policy in ("recompute-all", "checkpoint-sqrt"):
        assert planned.stats["recomputed_ops"] > 0
    if policy == "swap-all":
        assert planned.stats["swapped_maps"] > 0
    # the recorded step's measured peak, which a steady step repeats
    assert planned.stats["peak_saved_bytes"] > 0


@pytest.mark.parametrize("make,policy", [
    (gpt, "swap-all"), (gpt, "recompute-all"), (gpt, "checkpoint-sqrt"), (gpt, searched),
    (cnn, "swap-all"), (cnn, "recompute-all"), (cnn, "checkpoint-sqrt"), (cnn16, searched)])
def test_a_steady_step_measures_the_predicted_peaks_from_its_own_log(make, policy):
    """Every step, recorded or steady, measures the saved-bytes and host peaks the simulator
    predicts, to the byte; a steady step's from its own log (`last_step`: the copies it brought
    in, the recomputations it ran and the drops it made, at the points it made them, among the
    recorded step's ops), not the recorded step's."""
    planned, opt, base, base_opt, batches, loss_fn, plan, captured = planned_setup(
        make, policy, with_plan=True)
    _, predicted = predict(plan, captured)
    want = (predicted["predicted_saved_peak_bytes"], predicted["predicted_host_peak_bytes"])
    actions = {m["action"] for m in plan["maps"]}
    assert actions - {"keep"}
    recorded_log = None
    for i in range(STEPS):
        run_both(planned, opt, base, base_opt, batches(), loss_fn, seed=i)
        stats = planned.stats
        assert stats["steady"] == (i > 0)
        assert (stats["peak_saved_bytes"], stats["peak_host_bytes"]) == want
        # each copy a recomputation made was let go where the lowering frees it
        assert stats["regenerated_left_bytes"] == 0
        log, trace = planned.last_step
        assert peak(log, trace) == want[0]
        if i == 0:
            recorded_log = log
            continue
        assert log is not recorded_log
        entries = [e[0] for e in log.entries]
        assert sum(1 for e in log.entries if e[0] == "recompute") == stats["recomputed_ops"]
        if "swap" in actions:  # each swapped map brought back once
            assert entries.count("copy_in") == stats["swapped_maps"] > 0
        assert entries.count("drop") > 0
    if policy == "recompute-all":
        assert stats["recomputed_ops"] > 0
    assert planned.steady_steps == STEPS - 1


def test_drops_after_the_first_micro_batchs_backward_are_made_there_not_in_the_next_forward():
    """Gradient accumulation: the last node of the first micro-batch's backward that unpacks a
    map the plan moves is its first batch norm's (the convolution before it saves the batch and
    its weight, which the plan keeps). After it, the convolution's output and the batch norm's
    mean and inverse deviation (4,096 + 32 + 32 bytes) are read no more. The steady path lets them
    go when autograd lets go of what that node saved, as the recorded step does after its op. Its
    first rule made the drops at the next unpack of a moved map, in the second micro-batch's
    backward: the three were held through the second micro-batch's forward, whose peak is the
    step's (`_Program.place` with that rule, measured: 4,160 bytes above the prediction)."""
    planned, opt, base, base_opt, batches, loss_fn, plan, captured = planned_setup(
        cnn, "swap-all", step=accumulate2, with_plan=True)
    _, predicted = predict(plan, captured)
    want = predicted["predicted_saved_peak_bytes"]
    first = {}
    for t in captured.trace["tensors"]:
        first.setdefault(t["name"], t)
    held = sum(first[name]["bytes"] for name in (
        "a.0.convolution.out0", "a.1.native_batch_norm.out1", "a.1.native_batch_norm.out2"))
    assert (want, held) == (8256, 4160)
    for i in range(2):
        batch = batches()
        base_loss = run_step(base, batch, loss_fn, base_opt, step=accumulate2)
        assert_same(base, planned.model, base_loss, planned.step(batch, loss_fn, opt))
        assert planned.stats["steady"] == (i == 1)
        assert planned.stats["peak_saved_bytes"] == want
    planned._steady.program.place(kinds=(_UNPACK,), early=False)  # the first rule
    batch = batches()
    base_loss = run_step(base, batch, loss_fn, base_opt, step=accumulate2)
    assert_same(base, planned.model, base_loss, planned.step(batch, loss_fn, opt))
    assert planned.stats["steady"]
    assert planned.stats["peak_saved_bytes"] == want + held == 12416


def retained(model, batch, loss_fn, optimizer):
    """The default step with `backward(retain_graph=True)`: autograd lets go of no node's saved
    tensors during backward."""
    optimizer.zero_grad()
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward(retain_graph=True)
    optimizer.step()
    return loss.detach()


@pytest.mark.parametrize("make", [gpt, cnn])
def test_a_step_that_keeps_its_graph_drops_at_the_next_unpack_and_measures_the_prediction(make):
    """With the graph kept, the recorded step sees no release during backward (the graph goes
    when the step returns), so the steady steps make their drops at the next unpack of a moved
    map: within one backward pass nothing is written between two unpacks, and the measured peaks
    are still the predicted ones."""
    planned, opt, base, base_opt, batches, loss_fn, plan, captured = planned_setup(
        make, "swap-all", step=retained, with_plan=True)
    _, predicted = predict(plan, captured)
    for i in range(3):
        batch = batches()
        base_loss = run_step(base, batch, loss_fn, base_opt, step=retained)
        assert_same(base, planned.model, base_loss, planned.step(batch, loss_fn, opt))
        assert planned.stats["steady"] == (i > 0)
        assert (planned.stats["peak_saved_bytes"], planned.stats["peak_host_bytes"]) == (
            predicted["predicted_saved_peak_bytes"], predicted["predicted_host_peak_bytes"])
    # the plan acts at unpacks, and where the graph goes when the step returns
    program = planned._steady.program
    assert all(at_release is None or at_release[0] == len(program.ops)
               for *_, at_release in program.packs)
    assert any(before or after for _, before, after in program.unpacks)


def test_a_step_with_another_batch_shape_is_refused_as_the_recorded_path_refuses_it():
    """check_batch's refusal, not a steady step on the recorded step's recipes; the next step of
    the captured shapes is steady again."""
    planned, opt, base, base_opt, batches, loss_fn = planned_setup(cnn, "recompute-all")
    run_both(planned, opt, base, base_opt, batches(), loss_fn, seed=0)
    run_both(planned, opt, base, base_opt, batches(), loss_fn, seed=1)
    assert planned.steady_steps == 1
    bigger = (torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,)))
    with pytest.raises(PlanError, match="another input shape"):
        planned.step(bigger, loss_fn, opt)
    assert planned.steady_steps == 1
    run_both(planned, opt, base, base_opt, batches(), loss_fn, seed=2)
    assert planned.steady_steps == 2


def test_a_steady_step_that_takes_another_path_keeps_what_it_saves_and_hands_over():
    """A flag the model reads changes the shapes forward saves: the steady step notices it at the
    first pack of another shape, keeps everything from there, gives the plain step's values, and
    warns; the next step is recorded and stops at the first op that is not the captured one; with
    the flag back, the steps are recorded once, then steady again."""
    planned, opt, base, base_opt, batches, loss_fn = planned_setup(cnn, "recompute-all")
    for i in range(2):
        run_both(planned, opt, base, base_opt, batches(), loss_fn, seed=i)
    planned.model.pool = base.pool = True
    with pytest.warns(SteadyPathWarning, match="another path than the recorded one"):
        run_both(planned, opt, base, base_opt, batches(), loss_fn, seed=2)
    assert planned.stats["steady"]
    # its saved tensors are not the recorded ones from there on: no peak is measured
    assert planned.stats["peak_saved_bytes"] is None and planned.stats["peak_host_bytes"] is None
    with pytest.raises(PlanError, match="the step's code differs"):
        planned.step(batches(), loss_fn, opt)
    planned.model.pool = base.pool = False
    base, base_opt = copy.deepcopy((planned.model, opt))  # the refused step ran part of forward
    recorded = planned.recorded_steps
    for i in range(3, 6):
        run_both(planned, opt, base, base_opt, batches(), loss_fn, seed=i)
    assert planned.recorded_steps == recorded + 1 and planned.stats["steady"]


def test_another_loss_function_or_training_mode_records_the_step():
    planned, opt, base, base_opt, batches, loss_fn = planned_setup(cnn, "recompute-all")
    run_both(planned, opt, base, base_opt, batches(), loss_fn, seed=0)
    run_both(planned, opt, base, base_opt, batches(), lambda o, t: F.cross_entropy(o, t), seed=1)
    assert not planned.stats["steady"]
    planned.model.eval()
    base.eval()
    with pytest.raises(PlanError):  # batch norm in eval mode runs other ops
        planned.step(batches(), loss_fn, opt)
    assert not planned.stats["steady"] and planned.steady_steps == 0


def value_reading_model():
    """An MLP whose forward reads a tensor's value into Python (a branch on the data)."""
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 10)

        def forward(self, x):
            h = torch.tanh(self.a(x))
            if h.sum() > -1e9:
                h = h * 2
            return self.b(torch.tanh(h))
    torch.manual_seed(0)
    return Branchy(), lambda: (torch.randn(4, 8), torch.randint(0, 10, (4,))), F.cross_entropy


def encode_plan(trace):
    maps = memplan_trace(trace).feature_maps()
    plan = policy_plan(trace, "in-core")
    plan["maps"] = [{"tensor": t, "action": "encode:fp16"} for t in maps
                    if trace["tensors"][t].get("dtype") == "float32"]
    return plan


def host_plan(trace):
    """Every map kept, the batch's input on the host between its forward and backward uses."""
    plan = policy_plan(trace, "in-core")
    plan["tensors"] = [{"tensor": t["id"], "placement": "host"} for t in trace["tensors"]
                       if t["name"] == "batch.0"]
    return plan


def forward_prefetch_plan(trace):
    """swap-all with the second convolution's output brought back before the head's `t` (a
    forward op after its last forward use, where no saved tensor is packed or let go)."""
    plan = policy_plan(trace, "swap-all")
    for entry in plan["maps"]:
        if entry["tensor"] == "b.0.convolution.out0":
            entry["prefetch_before"] = "head.t"
            return plan
    pytest.fail("no map b.0.convolution.out0")


def per_use_plan(trace):
    """Every map recomputed per use (SuperNeurons' memory-centric mode)."""
    plan = policy_plan(trace, "recompute-all")
    for entry in plan["maps"]:
        entry["per_use"] = entry["action"] == "recompute"
    return plan


@pytest.mark.parametrize("case,reason", [
    ("dropout", "recomputes random op"),
    ("per use", "recomputes maps per use"),
    ("forward prefetch", "before forward op 'head.t'"),
    ("value read", "reads a tensor's value into Python"),
    ("encode", "encodes maps"),
    ("host", "places tensors on the host"),
])
def test_plans_the_steady_path_does_not_carry_out_record_every_step(case, reason):
    """Their steps run on the recorded path, bitwise the plain step's, and say why."""
    make, policy = {"dropout": (lambda: gpt(dropout=0.1), "recompute-all"),
                    "value read": (value_reading_model, "recompute-all"),
                    "encode": (cnn, encode_plan), "host": (cnn, host_plan),
                    "per use": (cnn, per_use_plan),
                    "forward prefetch": (cnn, forward_prefetch_plan)}[case]
    model, batches, loss_fn = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    captured = capture(model, batches(), loss_fn, opt)
    plan = policy_plan(captured.trace, policy) if isinstance(policy, str) else \
        policy(captured.trace)
    planned = apply(model, plan, captured)
    base, base_opt = copy.deepcopy((model, opt))
    watched = Watched(loss_fn)
    for i in range(3):
        torch.manual_seed(i)
        batch = batches()
        torch.manual_seed(100 + i)
        base_loss = run_step(base, batch, loss_fn, base_opt)
        torch.manual_seed(100 + i)
        loss = planned.step(batch, watched, opt)
        planned.restore()  # host-placed weights back in their tensors
        if case != "encode":  # fp16 is lossy
            assert_same(base, model, base_loss, loss)
        assert torch.isfinite(loss)
    assert watched.modes == [True] * 3
    assert planned.recorded_steps == 3 and planned.steady_steps == 0
    assert reason in planned.steady_reason
    assert not planned.stats["steady"]


def test_steady_can_be_turned_off():
    planned, opt, base, base_opt, batches, loss_fn = planned_setup(cnn, "recompute-all")
    planned.steady = False
    for i in range(3):
        run_both(planned, opt, base, base_opt, batches(), loss_fn, seed=i)
    assert planned.recorded_steps == 3 and planned.steady_steps == 0
    assert planned.steady_reason is None


@pytest.mark.skipif(not hasattr(torch, "compile"),
                    reason=f"torch {torch.__version__} has no torch.compile")
@pytest.mark.parametrize("policy", ["swap-all", "recompute-all"])
def test_a_compiled_models_steady_steps_are_its_recorded_steps(policy):
    """A torch.compile'd model's plan runs on its AOTAutograd split (memplan.torch.compiled): its
    steady steps give what its recorded steps give, bit for bit (two copies of the model, one
    with `steady = False`)."""
    runs = []
    for steady in (True, False):
        model, batches, loss_fn = cnn()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        compiled = torch.compile(model, backend="aot_eager")
        captured = capture(compiled, batches(), loss_fn, opt)
        planned = apply(compiled, policy_plan(captured.trace, policy), captured)
        planned.steady = steady
        torch.manual_seed(1)
        losses = [planned.step(batches(), loss_fn, opt) for _ in range(3)]
        runs.append((planned, model, losses))
    (steady, a, a_losses), (recorded, b, b_losses) = runs
    assert (steady.steady_steps, recorded.steady_steps) == (2, 0)
    assert all(torch.equal(x, y) for x, y in zip(a_losses, b_losses))
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name
    for (name, x), y in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(x.grad, y.grad), name


def accumulate2(model, batch, loss_fn, optimizer):
    """Gradient accumulation: two micro-batches, each its forward and backward pass, then one
    update."""
    optimizer.zero_grad()
    total = 0
    for inputs, target in zip(batch[0].chunk(2), batch[1].chunk(2)):
        loss = loss_fn(model(inputs), target) / 2
        loss.backward()
        total = total + loss.detach()
    optimizer.step()
    return total


@pytest.mark.parametrize("policy", ["swap-all", "recompute-all"])
def test_steady_steps_of_an_accumulating_step_are_bitwise(policy):
    """The steady path follows the packs and unpacks of every micro-batch as the recorded step
    made them: each step gives the plain accumulating step's values, bit for bit."""
    model, batches, loss_fn = cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    captured = capture(model, batches(), loss_fn, opt, step=accumulate2)
    planned = apply(model, policy_plan(captured.trace, policy), captured, step=accumulate2)
    base, base_opt = copy.deepcopy((model, opt))
    for i in range(STEPS):
        batch = batches()
        base_loss = run_step(base, batch, loss_fn, base_opt, step=accumulate2)
        assert_same(base, planned.model, base_loss, planned.step(batch, loss_fn, opt))
        assert planned.stats["steady"] == (i > 0)
    assert planned.steady_reason is None
