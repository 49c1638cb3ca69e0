"""`validate`: run a plan in PyTorch and check it against the baseline step and the prediction.

What: `validate(model, batch, loss_fn, optimizer, plan, captured, step=None, seed=0, force=False,
**what_if)` predicts the plan on the machine `what_if` describes, copies the model and optimizer
twice as they are (same weights; the optimizer's parameter groups, options and state), runs the
baseline step on one copy and the planned step (memplan.torch.apply) on the other, both from the
same seed, each step made bitwise repeatable (`repeatable`: on a GPU PyTorch's deterministic
algorithms), and returns a `Validation`. The step is the captured one: `step`, the user's own (capture's), or the
default. State the user's step keeps of its own (a GradScaler it closes over) is not copied: both
steps use it, one after the other. The checks:
- `loss_equal`, `gradients_equal`, `weights_equal`: bitwise (torch.equal; a parameter with no
  gradient, frozen or unused by the step, only equal to one with none) — what a lossless plan
  (keep, swap, recompute, encode:binarize, encode:sparse) must give; `differing_weights`: the
  state_dict's keys (weights, buffers such as batch-norm statistics) that are not;
- `measured_saved_peak_bytes`: the saved-bytes peak (memplan.torch.saved_bytes) of the planned
  step as it ran; `measured_host_peak_bytes`: the host slots held at once at most (swap copies
  and host-placed tensors, an update on the host's temporaries: memplan.torch.apply's stats);
  `sparse_spilled_bytes`: the bytes of
  sparse encodings beyond their planned buffers, held in host memory (not in either peak);
- `predicted_saved_peak_bytes` / `predicted_host_peak_bytes`: the simulator's peaks of the same
  buffers: the plan simulated on a copy of the captured trace in which every tensor but the
  feature maps (and the buffers they are written over), the tensors the plan places on the host
  and an update on the host's temporaries has 0 bytes and no op has workspace, with unbounded memory, on `_ORDER_MACHINE` (these
  peaks depend on the order of allocations and copies alone, not on the machine);
  `peaks_match` when both pairs are equal;
- `gradient_relative_error` (||planned - baseline||_2 / ||baseline||_2 over all gradients) and,
  `comparison` "tolerance" for a plan that narrows `narrowed_maps` maps (encode:fp16, fp10, fp8),
  `gradient_tolerance` and `unit_roundoff` from the simulator's tolerance of the plan (Note
  [Validation tolerance] in runtime/validation.hpp: min(4 L u, 0.5)); `within_tolerance`: bitwise
  for a plan compared "bitwise" (binarize and sparse are lossless), else the error within that
  bound;
- the prediction on the machine: the trace's device with `what_if` applied (memory, link, h2d,
  d2h, latency, host_memory, allocator: as memplan.simulate takes them), in `machine`;
  `predicted_feasible`, `predicted_oom` (why not, when it does not fit), `predicted_seconds` (the
  step alone, one step from an idle device; None when it does not fit) against
  `measured_seconds` (the planned step's wall time, recorder included). A plan the simulator says does not fit raises DoesNotFit before
  anything runs, unless `force`;
- on a GPU, the device memory each step adds to what was allocated before it (its parameters,
  optimizer state and batch are resident already): `measured_cuda_step_peak_bytes` (planned step)
  and `baseline_cuda_step_peak_bytes` (baseline step), torch.cuda.max_memory_allocated less
  torch.cuda.memory_allocated before the step, against `predicted_step_peak_bytes`, the
  simulator's whole peak of the plan on the machine less the pre-existing tensors' bytes.
  Reported, not required equal: the CUDA caching allocator rounds blocks, and cuBLAS/cuDNN
  workspaces and autograd's own buffers are not in a captured trace. None on the CPU.
The model and optimizer given are not changed; the planned copy's host-placed tensors are brought
back (`PlannedModel.restore`) before they are compared.

Why this way: every question to the simulator (the prediction, the plan read against the trace,
the feature maps, the tolerance) is asked of memplan._core in this process, so the rules are the
C++ ones and the what-if values act as they act in `memplan simulate`.
"""

import contextlib
import copy
import json

import torch

import memplan
from memplan import _validation
from memplan.torch.apply import apply
from memplan.torch.capture import memplan_trace, run_step, step_module, step_part
from memplan.torch.compiled import compiled_backend
from memplan.torch.schedule import PlanError, host_tensors, read_plan

# Device memory for the saved-bytes prediction: more than any step holds (2^50 bytes).
_UNBOUNDED_MEMORY = "1048576GiB"

# The machine the saved-bytes and host peaks are predicted on. The device peak depends on the
# order of the compute stream's allocations alone; the host peak is timed (a host slot is taken
# when its copy-out starts and let go when its copy-in ends: Engine::run), and the planned step's
# timing is not the simulator's. So the prediction runs on a machine where that order is the
# program's: every op 1 ns (saved_only), copies out 1 ns (1 EB/s) and copies in slow (1 B/s, no
# latency), so that a copy-in ends only once the compute stream waits for it, or for one issued
# after it (one H2D stream), long after everything before that wait and before anything after
# it. apply counts the step's host slots by the same rule: taken at a copy-out, let go at the
# first use of the copy brought in (or of one issued after it). The step's time saturates only
# past 4.6 GB copied in.
_ORDER_MACHINE = {"memory": _UNBOUNDED_MEMORY, "h2d": 1.0, "d2h": 1e18, "latency": 0}


class DoesNotFit(PlanError):
    """The simulator says the plan does not fit the machine it is predicted on: `oom` is why."""

    def __init__(self, oom):
        super().__init__(f"the simulator says the plan does not fit (force=True runs it): {oom}")
        self.oom = oom


class Validation(dict):
    """The checks and figures of one validation (a dict; see the module's docstring)."""

    @property
    def lossless_ok(self):
        return self["loss_equal"] and self["gradients_equal"] and self["weights_equal"]

    @property
    def within_tolerance(self):
        """Bitwise for a plan compared bitwise; else the gradients within `gradient_tolerance`
        (Note [Validation tolerance], runtime/validation.hpp)."""
        if self["comparison"] == "bitwise":
            return self.lossless_ok
        return self["gradient_relative_error"] <= self["gradient_tolerance"]

    @property
    def peaks_match(self):
        """The measured saved-bytes and host peaks are the predicted ones, to the byte."""
        return (self["measured_saved_peak_bytes"] == self["predicted_saved_peak_bytes"] and
                self["measured_host_peak_bytes"] == self["predicted_host_peak_bytes"])


def _copy(model, optimizer):
    """The model and its optimizer copied as they are, together: the copied optimizer has the
    same parameter groups and options, over the copy's parameters (one deep copy maps each
    parameter once), with state of its own. Not rebuilt from `optimizer.defaults`: that loses the
    groups and the parameters left out, and a constructor need not take its own defaults back
    (torch 2.15's AdamW does not take `decoupled_weight_decay`)."""
    return copy.deepcopy((model, optimizer))


def saved_only(trace, plan):
    """`trace` (a memplan.Trace) with every tensor but the feature maps, their buffers' roots,
    the tensors the plan places on the host and an update on the host's temporaries at 0 bytes,
    no workspace and every op taking 1 ns, and `plan` (a memplan.Plan of it) re-addressed to that
    trace."""
    maps, roots = trace.feature_maps(), trace.storage_roots()
    derived = trace.to_dict()
    placed = host_tensors(plan)
    sized = set(maps) | {roots[t] for t in maps} | set(placed)
    if plan.to_dict().get("update") == "host":  # the update's temporaries, in host memory
        sized |= {t for op in derived["ops"] if op["phase"] == "update" for t in op["outputs"]}
    for t in derived["tensors"]:
        if t["id"] not in sized:
            t["bytes"] = 0
            t.pop("shape", None)
    # An in-place version is no larger than what it overwrites: newest first, so that a map's size
    # reaches its root through the versions between (an LSTM cell's four gates).
    for t in reversed(derived["tensors"]):
        base = t.get("in_place_of")
        if base is not None and t["bytes"] > derived["tensors"][base]["bytes"]:
            derived["tensors"][base]["bytes"] = t["bytes"]
            derived["tensors"][base].pop("shape", None)
    for op in derived["ops"]:
        op["workspace_bytes"] = 0
        op["duration_ns"] = 1  # _ORDER_MACHINE: the host peak follows the order of the copies
    saved = memplan.parse_trace(json.dumps(derived), "the captured trace's feature maps")
    readdressed = plan.to_dict()
    readdressed["workload"]["fingerprint"] = saved.fingerprint
    return saved, memplan.parse_plan(json.dumps(readdressed), saved, "the plan on the feature maps")


def _gradients_equal(pairs):
    """Every gradient bitwise equal, a parameter with none (frozen, or in a branch the step did
    not use) only to none."""
    return all((a.grad is None and b.grad is None) or
               (a.grad is not None and b.grad is not None and torch.equal(a.grad, b.grad))
               for a, b in pairs)


def _relative_error(pairs):
    """||planned - baseline||_2 / ||baseline||_2 over the gradients of (baseline, planned)
    parameter pairs taken as one vector (Note [Validation tolerance] in
    runtime/validation.hpp); a gradient one side has and the other has not counts as zeros."""
    base, plan = [], []
    for a, b in pairs:
        if a.grad is None and b.grad is None:
            continue
        base.append((a.grad if a.grad is not None else torch.zeros_like(b.grad)).flatten())
        plan.append((b.grad if b.grad is not None else torch.zeros_like(a.grad)).flatten())
    if not base:
        return 0.0
    base = torch.cat(base).double()
    plan = torch.cat(plan).double()
    norm = torch.linalg.vector_norm(base).item()
    diff = torch.linalg.vector_norm(plan - base).item()
    return diff / norm if norm > 0 else diff


@contextlib.contextmanager
def repeatable(device, model):
    """Each step bitwise repeatable for what runs inside, so that bitwise equality of two steps is
    a test of the plan; the settings before are restored after.
    - On a GPU, PyTorch's deterministic algorithms (an op that has none warns), cuDNN's
      deterministic convolutions, no benchmark mode.
    - A torch.compile'd model's split (memplan.torch.compiled) keeps the setting it was captured
      under: AOTAutograd refuses to run a backward graph traced without deterministic algorithms
      under them, and inductor's decompositions depend on the setting, so a split traced anew
      under it would not be the captured step. On the CPU it runs on one intra-op thread
      instead: its decompositions accumulate with `index_put_` (an embedding's backward), which
      on several threads adds in the order they finish. On a GPU it is not made repeatable.
    - Eager steps on the CPU: nothing changes; their kernels are repeatable."""
    compiled = compiled_backend(model) is not None
    threads = torch.get_num_threads()
    before = (torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    if device.type == "cuda" and not compiled:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    elif device.type != "cuda" and compiled:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2:]


def _cuda_step_peak(device, step):
    """Runs `step()`; returns (its result, the bytes it allocated at most above what was allocated
    before it on the CUDA `device`, or None elsewhere)."""
    if device.type != "cuda":
        return step(), None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = step()
    torch.cuda.synchronize(device)
    return result, torch.cuda.max_memory_allocated(device) - before


def predict(plan, captured, **what_if):
    """The simulator's figures of `plan` (a dict or a memplan.Plan) on `captured` (a Capture or its
    trace dict): the prediction on the machine `what_if` describes, and the saved-bytes and host
    peaks (see the module's docstring). PlanError for a plan not made for this trace."""
    data = captured.trace if hasattr(captured, "trace") else captured
    trace = memplan_trace(data)
    plan = read_plan(plan, trace)
    whole = memplan.simulate(trace, plan=plan, **what_if)
    saved = memplan.simulate(*saved_only(trace, plan), **_ORDER_MACHINE)
    placed = host_tensors(plan)
    resident = sum(t["bytes"] for t in data["tensors"]
                   if t.get("producer") is None and t["id"] not in placed)
    tolerance = _validation.tolerance(plan)
    return plan, {
        "comparison": "bitwise" if tolerance is None else "tolerance",
        "narrowed_maps": tolerance["narrowed_maps"] if tolerance else 0,
        "unit_roundoff": tolerance["unit_roundoff"] if tolerance else 0.0,
        "gradient_tolerance": tolerance["relative"] if tolerance else 0.0,
        "machine": whole.summary["machine"],
        "predicted_feasible": whole.feasible, "predicted_oom": whole.oom,
        "predicted_seconds": whole.step_alone_s,
        "predicted_step_peak_bytes": whole.peak_bytes - resident,
        "predicted_saved_peak_bytes": saved.peak_bytes,
        "predicted_host_peak_bytes": saved.peak_host_bytes}


def validate(model, batch, loss_fn, optimizer, plan, captured, *, step=None, seed=0, force=False,
             **what_if):
    """See the module's docstring. `plan`: a dict in plan format v1 or a memplan.Plan;
    `captured`: a Capture or its trace dict; `step`: the user's own training step that `captured`
    recorded (capture's `step`); `what_if`: the machine the plan is predicted on."""
    plan, predicted = predict(plan, captured, **what_if)
    if not predicted["predicted_feasible"] and not force:
        raise DoesNotFit(predicted["predicted_oom"])
    trace = captured.trace if hasattr(captured, "trace") else captured
    batch = tuple(batch)
    model = step_module(model)  # a compiled model runs its AOTAutograd split (capture)
    base_model, base_opt = _copy(model, optimizer)
    plan_model, plan_opt = _copy(model, optimizer)
    planned = apply(plan_model, plan, trace, step=step)
    device = next(model.parameters()).device
    with repeatable(device, model):
        torch.manual_seed(seed)
        with step_part("the baseline step", "step_run"):
            base_loss, base_cuda = _cuda_step_peak(
                device, lambda: run_step(base_model, batch, loss_fn, base_opt, step=step))
        torch.manual_seed(seed)
        with step_part("the planned step", "step_run"):
            plan_loss, plan_cuda = _cuda_step_peak(
                device, lambda: planned.step(batch, loss_fn, plan_opt))
    planned.restore()  # host-placed parameters, state and gradients back in their tensors
    pairs = list(zip(base_model.parameters(), plan_model.parameters()))
    base_state, plan_state = base_model.state_dict(), plan_model.state_dict()
    differing_weights = [k for k in base_state if not torch.equal(base_state[k], plan_state[k])]
    return Validation(
        predicted,
        # a step of the user's that returns no loss leaves the gradients and weights to compare
        loss_equal=(base_loss is None and plan_loss is None) or (
            base_loss is not None and plan_loss is not None and torch.equal(base_loss, plan_loss)),
        gradients_equal=_gradients_equal(pairs),
        gradient_relative_error=_relative_error(pairs),
        weights_equal=not differing_weights,
        differing_weights=differing_weights,
        measured_saved_peak_bytes=planned.stats["peak_saved_bytes"],
        measured_host_peak_bytes=planned.stats["peak_host_bytes"],
        sparse_spilled_bytes=planned.stats["sparse_spilled_bytes"],
        measured_seconds=planned.stats["step_seconds"],
        recomputed_ops=planned.stats["recomputed_ops"],
        regenerated_left_bytes=planned.stats["regenerated_left_bytes"],
        baseline_cuda_step_peak_bytes=base_cuda,
        measured_cuda_step_peak_bytes=plan_cuda)
