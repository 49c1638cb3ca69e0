"""`apply`: carry out a memplan plan in a PyTorch training step, through autograd's pack/unpack hooks.

What: `apply(model, plan, captured)` checks that the plan was made on `captured`'s trace (its
workload fingerprint) and that `model` is the captured model (parameter names and shapes), and
returns a `PlannedModel` whose `step(batch, loss_fn, optimizer)` runs one training step with the
plan's decisions carried out on every feature map autograd saves:
- keep: the saved tensor is held as autograd would hold it;
- swap: the pack hook copies the map's whole storage to host memory and holds no reference to the
  device tensor; the unpack returns the copy, in the saved tensor's own geometry (sizes, strides,
  offset), so backward computes bit for bit what it computes on the original. On the CPU "host"
  and "device" are the same memory: the copy is accounted as host bytes. (On a GPU the copy would
  go to pinned memory on a side stream, and the prefetch at the plan's `prefetch_before` op; this
  version copies synchronously at pack and unpack, and says so in its stats.)
- recompute: the pack hook keeps only a reference to a recipe: the producing aten op and its
  arguments as trace tensor ids, recorded during the step; the unpack re-runs it, recursively for
  inputs that are neither held nor swapped (an in-place ReLU's overwritten input, another
  recomputed map), under the RNG state the op first ran with, on clones of the arguments it
  writes (so a batch-norm's running statistics are not updated twice).
- encode: refused (one line): this version does not carry out encodings.
A step whose ops differ from the captured trace's (another model, another input shape) stops at
the first differing op with one line (PlanError).

How the plan's tensor ids meet live tensors: the step runs under the same recorder as `capture`
(memplan.torch.recorder), which gives every tensor the id the captured trace gave it.

Stats: the hooks track the bytes they hold: device bytes (kept maps, recomputed maps) from the
first pack of a map's storage to its last unpack, host bytes (swap copies) likewise.
"""

import time

import torch

from memplan.torch.capture import run_step
from memplan.torch.recorder import StepRecorder, flat_tensors, storage_key, written_arguments

_KINDS = ["activation", "parameter", "gradient", "optimizer_state", "workspace", "input"]
_PHASES = ["forward", "backward", "update"]
_RANDOM_OPS = {"aten::bernoulli_", "aten::bernoulli", "aten::native_dropout", "aten::rand_like",
               "aten::randn_like", "aten::uniform_", "aten::normal_", "aten::randint_like",
               "aten::rand", "aten::randn", "aten::randperm", "aten::exponential_"}


class PlanError(ValueError):
    """A plan that cannot be applied to this model and batch (one line)."""


class _Fnv:
    """sim/plan.cpp's FNV-1a over the trace (workload_fingerprint)."""

    def __init__(self):
        self.hash = 14695981039346656037

    def bytes(self, data):
        h = self.hash
        for b in data:
            h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
        self.hash = h

    def integer(self, v):
        self.bytes(int(v).to_bytes(8, "little", signed=True))

    def text(self, s):
        data = s.encode("utf-8")
        self.integer(len(data))
        self.bytes(data)


def trace_fingerprint(trace):
    """The workload fingerprint memplan writes in plans made on `trace` (16 hex digits)."""
    f = _Fnv()
    f.integer(len(trace["tensors"]))
    for t in trace["tensors"]:
        f.text(t["name"])
        f.integer(t["bytes"])
        f.integer(_KINDS.index(t["kind"]))
        f.integer(-1 if t["producer"] is None else t["producer"])
        f.integer(t.get("in_place_of", -1))
    f.integer(len(trace["ops"]))
    for op in trace["ops"]:
        f.text(op["name"])
        f.text(op["layer"])
        f.integer(_PHASES.index(op["phase"]))
        for key in ("inputs", "outputs"):
            f.integer(len(op[key]))
            for t in op[key]:
                f.integer(t)
        f.integer(op["workspace_bytes"])
    return f"{f.hash:016x}"


def plan_decisions(plan, trace):
    """{tensor id: action} of a plan (a dict in plan format v1) made on `trace`."""
    if plan.get("format") != "memplan-plan" or plan.get("version") != 1:
        raise PlanError("not a memplan plan of format version 1")
    fingerprint = plan.get("workload", {}).get("fingerprint")
    if fingerprint != trace_fingerprint(trace):
        raise PlanError(f"the plan was made for another workload (fingerprint {fingerprint}, the "
                        f"captured trace has {trace_fingerprint(trace)})")
    by_name = {}
    for t in trace["tensors"]:
        by_name.setdefault(t["name"], []).append(t["id"])
    decisions = {}
    for entry in plan.get("maps", []):
        ref = entry["tensor"]
        tid = ref if isinstance(ref, int) else by_name.get(ref, [None])[0]
        if tid is None:
            raise PlanError(f"the plan names tensor '{ref}', which the captured trace lacks")
        action = entry["action"]
        if action.startswith("encode"):
            raise PlanError(f"tensor '{ref}': {action} is not carried out by memplan.torch.apply")
        decisions[tid] = action
    return decisions


def check_model(model, trace):
    """Refuses (PlanError) a model whose parameters differ from the captured trace's."""
    captured = {t["name"]: t.get("shape") for t in trace["tensors"] if t["kind"] == "parameter"}
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if name not in captured:
            raise PlanError(f"the model has '{name}', which the captured trace lacks: another model")
        if captured[name] is not None and captured[name] != list(p.shape):
            raise PlanError(f"'{name}' is {list(p.shape)} here and {captured[name]} in the captured "
                            "trace: another model")


def check_batch(batch, trace):
    for i, t in enumerate(flat_tensors(batch, [])):
        captured = next((c for c in trace["tensors"] if c["name"] == f"batch.{i}"), None)
        if captured is None or captured.get("shape", list(t.shape)) != list(t.shape):
            want = captured.get("shape") if captured else "nothing"
            raise PlanError(f"batch tensor {i} is {list(t.shape)}; the captured trace has {want}: "
                            "another input shape")


def _geometry(t):
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset())


def _whole_storage(t):
    """A 1-D tensor over all of `t`'s storage."""
    return t.as_strided((t.storage().size(),), (1,), 0)


class _Ref:
    """A tensor argument of a recorded op: the trace id of its storage and its geometry."""

    def __init__(self, tid, t):
        self.tid, self.geometry = tid, _geometry(t)
