"""`apply`: carry out a memplan plan in a PyTorch training step, through autograd's pack/unpack hooks.

What: `apply(model, plan, captured)` checks that the plan was made on `captured`'s trace (its
workload fingerprint) and that `model` is the captured model (parameter names and shapes), and
returns a `PlannedModel` whose `step(batch, loss_fn, optimizer)` runs one training step with the
plan's decisions carried out on every feature map autograd saves:
- keep: the saved tensor is held as autograd would hold it;
- swap: the pack hook copies the map's whole storage to host memory (pinned, for a CUDA tensor)
  and holds no reference to the device tensor; the unpack copies it back and returns it in the
  saved tensor's own geometry (sizes, strides, offset), so backward computes bit for bit what it
  computes on the original. On the CPU "host" and "device" are the same memory: the copy is
  accounted as host bytes. The copies are synchronous, at pack and at unpack: this version does
  not yet copy on a side stream nor prefetch at the plan's `prefetch_before` op (its stats say so).
- recompute: the pack hook keeps only a reference to a recipe: the producing aten op and its
  arguments as trace tensor ids, recorded during the step; the unpack re-runs it, recursively for
  inputs that are neither held nor swapped (an in-place ReLU's overwritten input, another
  recomputed map), under the RNG state (CPU, and CUDA for CUDA tensors) the op first ran with, on
  clones of the arguments it writes and of parameters and buffers (so a batch-norm's running
  statistics are not updated twice).
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


def _rng_state(cuda):
    """The CPU generator's state, and the current CUDA device's when `cuda`."""
    return (torch.get_rng_state(), torch.cuda.get_rng_state() if cuda else None)


def _set_rng_state(state):
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda)


def _geometry(t):
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset())


def _whole_storage(t):
    """A tensor over all of `t`'s storage (`t` itself when it is a 0-dim tensor over all of it:
    torch 1.13's dispatch mode turns a wrapped number into a Python number, which has no view)."""
    if t.dim() == 0 and t.storage_offset() == 0 and t.storage().size() == 1:
        return t
    return t.as_strided((t.storage().size(),), (1,), 0)


def _written_refs(func, args, kwargs):
    """ids of the _Ref objects in the arguments the op's schema marks as written."""
    refs = set()
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, _Ref):
                refs.add(id(v))
    return refs


class _Ref:
    """A tensor argument of a recorded op: the trace id of its storage and its geometry."""

    def __init__(self, tid, t):
        self.tid, self.geometry = tid, _geometry(t)


class _PlanRecorder(StepRecorder):
    """The capture recorder, checking each op against the captured trace and acting on packs."""

    def __init__(self, model, optimizer, batch, trace, decisions, cuda=False):
        self.expected = trace
        self.decisions = decisions
        self.recipes = {}  # op id -> (func, args, kwargs with _Ref, rng state or None)
        self.held = {}  # tensor id -> tensor over its whole storage (kept, persistent, batch)
        self.kept_by_pack = set()  # held because autograd saved them (not pre-existing)
        self.host = {}  # tensor id -> host copy of its whole storage (swap)
        self.recomputed = {}  # tensor id -> recomputed storage, until its last unpack
        self.outstanding = {}  # tensor id -> packs not unpacked yet
        self.device_bytes = self.host_bytes = 0
        self.peak_device_bytes = self.peak_host_bytes = 0
        self.recompute_ops = 0
        self.output_slot = {}  # tensor id -> ("written" | "result", index) in its op's call
        super().__init__(model, optimizer, batch, cuda)

    def _pre_existing(self, t, name, kind, persistent):
        self.held_device = t.device
        tid = super()._pre_existing(t, name, kind, persistent)
        if tid not in self.held:
            self.paused += 1
            self.held[tid] = _whole_storage(t)
            self.paused -= 1
        return tid

    # ---- ops: record a recipe, compare with the captured trace ------------------------------
    def dispatch(self, func, args, kwargs):
        if self.paused or self.phase != "forward":
            return super().dispatch(func, args, kwargs)
        op_id = len(self.ops)
        rng = None
        if func._schema.name in _RANDOM_OPS:
            self.paused += 1
            rng = _rng_state(self.clock.cuda)
            self.paused -= 1
        recipe = (func, self._refs(args), self._refs(kwargs), rng)
        result = super().dispatch(func, args, kwargs)
        self.recipes[op_id] = recipe
        return result

    def _refs(self, value):
        if isinstance(value, torch.Tensor):
            return _Ref(self.tensor_id(value), value)
        if isinstance(value, (list, tuple)):
            return type(value)(self._refs(v) for v in value)
        if isinstance(value, dict):
            return {k: self._refs(v) for k, v in value.items()}
        return value

    def _record(self, func, args, input_ids, input_keys, written, outputs):
        op = super()._record(func, args, input_ids, input_keys, written, outputs)
        for tid in op["outputs"]:
            for where, tensors in (("written", written), ("result", outputs)):
                index = next((i for i, t in enumerate(tensors)
                              if self.current.get(storage_key(t)) == tid), None)
                if index is not None:
                    self.output_slot[tid] = (where, index)
                    break
        ops = self.expected["ops"]
        want = ops[op["id"]] if op["id"] < len(ops) else None
        if want is None or (want["layer"], want["phase"], want["outputs"]) != \
                (op["layer"], op["phase"], op["outputs"]):
            what = f"'{want['name']}' ({want['layer']})" if want else "no more ops"
            raise PlanError(f"op {op['id']} is '{op['name']}' ({op['layer']}) here and {what} in "
                            "the captured trace: another model or input shape")
        return op

    # ---- packs and unpacks ------------------------------------------------------------------
    def _account(self, delta_device=0, delta_host=0):
        self.device_bytes += delta_device
        self.host_bytes += delta_host
        self.peak_device_bytes = max(self.peak_device_bytes, self.device_bytes)
        self.peak_host_bytes = max(self.peak_host_bytes, self.host_bytes)

    def on_pack(self, t, tid):
        self.paused += 1
        try:
            return self._pack_as_planned(t, tid)
        finally:
            self.paused -= 1

    def _pack_as_planned(self, t, tid):
        action = self.decisions.get(tid, "keep")
        if tid in self.persistent or self.tensors[tid]["kind"] != "activation":
            action = "keep"
        first = self.outstanding.get(tid, 0) == 0
        self.outstanding[tid] = self.outstanding.get(tid, 0) + 1
        nbytes = self.tensors[tid]["bytes"]
        if action == "swap":
            if first:
                copy = _whole_storage(t).to("cpu", copy=True)
                self.host[tid] = copy.pin_memory() if t.is_cuda else copy
                self._account(delta_host=nbytes)
            return ("swap", (t.device, _geometry(t)))
        if action == "recompute":
            return ("recompute", _geometry(t))
        if first and tid not in self.held:
            self.held[tid] = _whole_storage(t)
            self.kept_by_pack.add(tid)
            self._account(delta_device=nbytes)
        return ("keep", t)

    def on_unpack(self, payload, tid):
        how, value = payload
        self.paused += 1
        try:
            if how == "keep":
                result = value
            elif how == "swap":
                device, geometry = value
                result = self.host[tid].to(device, copy=True).as_strided(*geometry)
            else:
                result = self._materialize(tid).as_strided(*value)
            if how != "keep":  # a copy stands for the saved storage: the same trace tensor
                self.current[storage_key(result)] = tid
        finally:
            self.paused -= 1
        self.outstanding[tid] -= 1
        if self.outstanding[tid] == 0:
            self._release(tid, how)
        return result

    def _release(self, tid, how):
        nbytes = self.tensors[tid]["bytes"]
        if how == "swap":
            del self.host[tid]
            self._account(delta_host=-nbytes)
        elif how == "recompute":
            self.recomputed.pop(tid, None)
            self._account(delta_device=-nbytes)
        elif tid in self.kept_by_pack:
            self.kept_by_pack.discard(tid)
            del self.held[tid]
            self._account(delta_device=-nbytes)

    def _materialize(self, tid):
        """A tensor over the whole storage of `tid`, recomputing its producer when needed."""
        for store in (self.held, self.recomputed):
            if tid in store:
                return store[tid]
        if tid in self.host:  # a swapped map a recomputation reads: back to the op's device
            return self.host[tid].to(self.held_device, copy=True)
        tensor = self.tensors[tid]
        func, args, kwargs, rng = self.recipes[tensor["producer"]]
        written = _written_refs(func, args, kwargs)
        real_args = self._resolve(args, written)
        real_kwargs = self._resolve(kwargs, written)
        saved_rng = None
        if rng is not None:
            saved_rng = _rng_state(self.clock.cuda)
            _set_rng_state(rng)
        try:
            result = func(*real_args, **real_kwargs)
        finally:
            if saved_rng is not None:
                _set_rng_state(saved_rng)
        self.recompute_ops += 1
        where, index = self.output_slot[tid]
        if where == "written":
            out = _whole_storage(written_arguments(func, real_args, real_kwargs)[index])
        else:
            out = _whole_storage(flat_tensors(result, [])[index])
        if self.decisions.get(tid) == "recompute" and self.outstanding.get(tid, 0) > 0:
            self.recomputed[tid] = out
            self._account(delta_device=tensor["bytes"])
        return out

    def _resolve(self, value, written):
        if isinstance(value, _Ref):
            base = self._materialize(value.tid).as_strided(*value.geometry)
            # Clone what the op writes, and persistent state: native_batch_norm updates its
            # running statistics without marking them written in its schema.
            return base.clone() if id(value) in written or value.tid in self.persistent else base
        if isinstance(value, (list, tuple)):
            return type(value)(self._resolve(v, written) for v in value)
        if isinstance(value, dict):
            return {k: self._resolve(v, written) for k, v in value.items()}
        return value


class PlannedModel:
    """`apply`'s result: `step(batch, loss_fn, optimizer)` runs one training step under the plan
    and returns its loss; `stats` holds what the last step's hooks measured."""

    def __init__(self, model, trace, decisions):
        self.model, self.trace, self.decisions = model, trace, decisions
        self.stats = {}

    def step(self, batch, loss_fn, optimizer):
        batch = tuple(batch)
        check_batch(batch, self.trace)
        cuda = any(p.is_cuda for p in self.model.parameters())
        recorder = _PlanRecorder(self.model, optimizer, batch, self.trace, self.decisions, cuda)
        started = time.perf_counter()
        loss = run_step(self.model, batch, loss_fn, optimizer, recorder)
        seconds = time.perf_counter() - started
        self.stats = {"peak_device_saved_bytes": recorder.peak_device_bytes,
                      "peak_host_bytes": recorder.peak_host_bytes,
                      "recomputed_ops": recorder.recompute_ops, "step_seconds": seconds,
                      "swap": "synchronous copies at pack and unpack"}
        return loss


def apply(model, plan, captured):
    """Checks `plan` (a dict in plan format v1) against `captured` (a Capture or its trace dict)
    and `model`, and returns a PlannedModel; PlanError (one line) when they do not belong together.
    """
    trace = captured.trace if hasattr(captured, "trace") else captured
    decisions = plan_decisions(plan, trace)
    check_model(model, trace)
    return PlannedModel(model, trace, decisions)
