"""`validate`: run a plan in PyTorch and check it against the baseline step and the prediction.

What: `validate(model, batch, loss_fn, optimizer, plan, captured)` copies the model and optimizer
twice (same weights, same optimizer state), runs the baseline step on one copy and the planned step
(memplan.torch.apply) on the other, both from the same seed, and returns a `Validation`:
- `loss_equal`, `gradients_equal`, `weights_equal`: bitwise (torch.equal) — what a lossless plan
  (keep, swap, recompute, encode:binarize, encode:sparse) must give; `differing_weights`: the
  state_dict's keys (weights, buffers such as batch-norm statistics) that are not;
- `measured_saved_peak_bytes`: the saved-bytes peak (memplan.torch.saved_bytes) of the planned
  step as it ran; `measured_host_peak_bytes`: the swap copies held on the host at most, each from
  its copy-out to its copy-in (memplan.torch.apply's stats); `sparse_spilled_bytes`: the bytes of
  sparse encodings beyond their planned buffers, held in host memory (not in either peak);
- `predicted_saved_peak_bytes` / `predicted_host_peak_bytes`: the simulator's peaks of the same
  buffers: `memplan simulate` of the plan on a copy of the captured trace in which every tensor but
  the feature maps (and the buffers they are written over) has 0 bytes and no op has workspace;
  `peaks_match` when both pairs are equal;
- `gradient_relative_error` (||planned - baseline||_2 / ||baseline||_2 over all gradients) and, for
  a plan that narrows `narrowed_maps` maps (encode:fp16, fp10, fp8), `gradient_tolerance` =
  min(4 L u, 0.5) with u the unit roundoff of its coarsest format (`unit_roundoff`: fp16 2^-11,
  fp10 2^-5, fp8 2^-4; Note [Validation tolerance] in runtime/validation.hpp); `within_tolerance`:
  bitwise for a plan that narrows nothing (binarize and sparse are lossless), else the error
  within that bound;
- `predicted_seconds` (the simulator's iteration time of the plan on the captured trace) and
  `measured_seconds` (the planned step's wall time, recorder included);
- on a GPU, the device memory each step adds to what was allocated before it (its parameters,
  optimizer state and batch are resident already): `measured_cuda_step_peak_bytes` (planned step)
  and `baseline_cuda_step_peak_bytes` (baseline step), torch.cuda.max_memory_allocated less
  torch.cuda.memory_allocated before the step, against `predicted_step_peak_bytes`, the
  simulator's whole peak of the plan less the pre-existing tensors' bytes. Reported, not required
  equal: the CUDA caching allocator rounds blocks, and cuBLAS/cuDNN workspaces and autograd's own
  buffers are not in a captured trace. None on the CPU.
The model and optimizer given are not changed.
"""

import copy
import json
import os
import subprocess
import tempfile

import torch

from memplan.torch.apply import apply, trace_fingerprint
from memplan.torch.capture import run_step, storage_roots, write_trace
from memplan.torch.saved_bytes import feature_maps


class Validation(dict):
    """The checks and figures of one validation (a dict; see the module's docstring)."""

    @property
    def lossless_ok(self):
        return self["loss_equal"] and self["gradients_equal"] and self["weights_equal"]

    @property
    def within_tolerance(self):
        """Bitwise for a plan that narrows no map; else the gradients within
        `gradient_tolerance` (Note [Validation tolerance], runtime/validation.hpp)."""
        if self["narrowed_maps"] == 0:
            return self.lossless_ok
        return self["gradient_relative_error"] <= self["gradient_tolerance"]

    @property
    def peaks_match(self):
        """The measured saved-bytes and host peaks are the predicted ones, to the byte."""
        return (self["measured_saved_peak_bytes"] == self["predicted_saved_peak_bytes"] and
                self["measured_host_peak_bytes"] == self["predicted_host_peak_bytes"])


def _copy(model, optimizer):
    model2 = copy.deepcopy(model)
    optimizer2 = type(optimizer)(model2.parameters(), **optimizer.defaults)
    # PyTorch 2's load_state_dict keeps the tensors it is given (1.13 copied them): without the
    # deep copy, both copies would update the original's momentum buffers in place.
    optimizer2.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    return model2, optimizer2


def saved_only(trace, plan):
    """The trace with every tensor but the feature maps and their buffers' roots at 0 bytes, and
    the plan re-addressed to it (its fingerprint)."""
    maps = set(feature_maps(trace))
    roots = storage_roots(trace)
    sized = maps | {roots[t] for t in maps}
    derived = copy.deepcopy(trace)
    for t in derived["tensors"]:
        if t["id"] not in sized:
            t["bytes"] = 0
            t.pop("shape", None)
    for t in derived["tensors"]:  # an in-place version is no larger than what it overwrites
        base = t.get("in_place_of")
        if base is not None and t["bytes"] > derived["tensors"][base]["bytes"]:
            derived["tensors"][base]["bytes"] = t["bytes"]
            derived["tensors"][base].pop("shape", None)
    for op in derived["ops"]:
        op["workspace_bytes"] = 0
    derived_plan = copy.deepcopy(plan)
    derived_plan["workload"]["fingerprint"] = trace_fingerprint(derived)
    return derived, derived_plan


def simulate(memplan, trace, plan, *extra):
    """`memplan simulate --json` of `plan` on `trace`; returns its JSON."""
    with tempfile.TemporaryDirectory() as folder:
        trace_path, plan_path = os.path.join(folder, "t.json"), os.path.join(folder, "p.json")
        write_trace(trace, trace_path)
        with open(plan_path, "w") as out:
            json.dump(plan, out)
        run = subprocess.run([memplan, "simulate", trace_path, "--plan", plan_path, "--json",
                              *extra], capture_output=True, text=True)
    if run.returncode not in (0, 1):
        raise RuntimeError(run.stderr.strip())
    return json.loads(run.stdout)


def default_memplan():
    """The memplan binary: $MEMPLAN_BINARY, else the build tree's (beside this source tree, or the
    one this package was built into: build/release/python/memplan/torch -> build/release/bin),
    else `memplan` on the PATH."""
    if os.environ.get("MEMPLAN_BINARY"):
        return os.environ["MEMPLAN_BINARY"]
    here = os.path.dirname(os.path.abspath(__file__))
    for built in (os.path.join(here, "..", "..", "..", "build", "release", "bin", "memplan"),
                  os.path.join(here, "..", "..", "..", "bin", "memplan")):
        if os.path.exists(built):
            return os.path.normpath(built)
    return "memplan"


# Note [Validation tolerance] (runtime/validation.hpp): kToleranceFactor, kMaxRelativeTolerance,
# and each narrow format's unit roundoff 2^-(mantissa bits + 1) (sim::NarrowFormat).
_TOLERANCE_FACTOR = 4.0
_MAX_RELATIVE_TOLERANCE = 0.5
_UNIT_ROUNDOFF = {"encode:fp16": 2.0 ** -11, "encode:fp10": 2.0 ** -5, "encode:fp8": 2.0 ** -4}


def tolerance(plan):
    """(narrowed maps L, unit roundoff u of the coarsest format, min(4 L u, 0.5)) of `plan`, as
    runtime::tolerance_for computes them (0 for a plan that narrows nothing)."""
    narrowed = [m["action"] for m in plan.get("maps", []) if m["action"] in _UNIT_ROUNDOFF]
    u = max((_UNIT_ROUNDOFF[a] for a in narrowed), default=0.0)
    return len(narrowed), u, min(_TOLERANCE_FACTOR * len(narrowed) * u, _MAX_RELATIVE_TOLERANCE)


def _relative_error(baseline, planned):
    """||planned - baseline||_2 / ||baseline||_2 over the tensors taken as one vector (Note
    [Validation tolerance] in runtime/validation.hpp)."""
    base = torch.cat([t.flatten().double() for t in baseline])
    plan = torch.cat([t.flatten().double() for t in planned])
    norm = torch.linalg.vector_norm(base).item()
    diff = torch.linalg.vector_norm(plan - base).item()
    return diff / norm if norm > 0 else diff


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


def validate(model, batch, loss_fn, optimizer, plan, captured, *, memplan=None, seed=0):
    """See the module's docstring. `memplan` is the memplan binary that predicts
    (default_memplan() when not given)."""
    memplan = memplan or default_memplan()
    narrowed, unit_roundoff, bound = tolerance(plan)
    trace = captured.trace if hasattr(captured, "trace") else captured
    batch = tuple(batch)
    base_model, base_opt = _copy(model, optimizer)
    plan_model, plan_opt = _copy(model, optimizer)
    planned = apply(plan_model, plan, trace)
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    base_loss, base_cuda = _cuda_step_peak(
        device, lambda: run_step(base_model, batch, loss_fn, base_opt))
    torch.manual_seed(seed)
    plan_loss, plan_cuda = _cuda_step_peak(
        device, lambda: planned.step(batch, loss_fn, plan_opt))
    pairs = list(zip(base_model.parameters(), plan_model.parameters()))
    base_state, plan_state = base_model.state_dict(), plan_model.state_dict()
    differing_weights = [k for k in base_state if not torch.equal(base_state[k], plan_state[k])]
    result = Validation(
        loss_equal=torch.equal(base_loss, plan_loss),
        gradients_equal=all(torch.equal(a.grad, b.grad) for a, b in pairs),
        gradient_relative_error=_relative_error([a.grad for a, _ in pairs],
                                                [b.grad for _, b in pairs]),
        narrowed_maps=narrowed,
        unit_roundoff=unit_roundoff,
        gradient_tolerance=bound,
        weights_equal=not differing_weights,
        differing_weights=differing_weights,
        measured_saved_peak_bytes=planned.stats["peak_saved_bytes"],
        measured_host_peak_bytes=planned.stats["peak_host_bytes"],
        sparse_spilled_bytes=planned.stats["sparse_spilled_bytes"],
        measured_seconds=planned.stats["step_seconds"],
        recomputed_ops=planned.stats["recomputed_ops"],
        baseline_cuda_step_peak_bytes=base_cuda,
        measured_cuda_step_peak_bytes=plan_cuda)
    memory = ["--memory", "1048576GiB"]
    derived, derived_plan = saved_only(trace, plan)
    saved = simulate(memplan, derived, derived_plan, *memory)
    whole = simulate(memplan, trace, plan, *memory)
    resident = sum(t["bytes"] for t in trace["tensors"] if t.get("producer") is None)
    result.update(predicted_saved_peak_bytes=saved["peak_bytes"],
                  predicted_host_peak_bytes=saved["peak_host_bytes"],
                  predicted_step_peak_bytes=whole["peak_bytes"] - resident,
                  predicted_seconds=whole["iteration_s"])
    return result
