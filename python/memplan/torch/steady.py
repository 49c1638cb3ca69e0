"""The steady path: a plan carried out on every step of a training loop after the first, through
autograd's saved-tensor hooks alone, without the recorder's per-op dispatch mode (issue 36).

What: `PlannedModel.step` (memplan.torch.apply) records its first step as it always has (the
recorder's TorchDispatchMode gives every tensor its captured id, checks each op against the
capture and carries out the plan). `SteadyPath` watches that step (`ObservingRecorder`) and
learns, in the order autograd calls the hooks, what the plan does there: the n-th pack's trace
tensor, its shape and dtype, and whether the plan keeps, swaps or recomputes it; which held
tensors (kept maps, parameters, the batch) the recomputations read; and, for each unpack of a map
the plan does not keep, which copies brought back or regenerated the trace no longer reads by then
(they go) and which swapped maps the plan brings back by then. The steps after it run without a
dispatch mode:
- a plan that keeps every map and places nothing on the host (in-core) runs the plain step, no
  hooks at all;
- otherwise the step runs under `torch.autograd.graph.saved_tensors_hooks`. A pack checks that
  the tensor has the learnt shape and dtype, then: keep hands the tensor back (and holds it when a
  recomputation reads it); swap copies its whole storage to host memory (once a map; pinned, on a
  side stream, on a GPU: memplan.torch.apply's `_Copies`) and holds nothing on the device;
  recompute holds nothing. An unpack first lets go of the copies the trace no longer reads and
  brings back the swapped maps due by then, then returns the map: a swapped map's copy brought
  back, a recomputed map regenerated from the recipes the first step recorded (the producing aten
  op and its arguments as trace ids), recursively, as the recorded path regenerates it
  (apply.py's `_regenerate`, `_rerun`, `_resolve`), in the saved tensor's own geometry.
So a steady step computes what the recorded step computes, bit for bit, at a cost of a few
microseconds a pack and unpack of a map the plan moves.

Which steps are steady (the rule; `PlannedModel.steady_reason` says why not, `steady_steps` and
`recorded_steps` count them, `stats["steady"]` says which the last one was): the step after a
recorded one that matched the capture, with the same loss function and optimizer objects, batch
tensors of the recorded shapes and dtypes, the same modules in training mode and the same grad
mode. Recorded instead, every step: a plan that places tensors on the host or encodes maps (their
points are op by op, which only the recorder sees), one that recomputes a random op (dropout's
mask comes from the RNG state the op ran with, which only the recorder catches), one whose
recomputations read a tensor the hooks do not reach (a constant the step makes, a checkpoint
block's input torch 1.13 holds outside the saved tensors), a saved tensor forward writes over
through a view autograd does not see (the LSTM's gates), and a recomputing plan whose forward
reads a tensor's value into Python (`.item()`, `if tensor:`: a branch on the data could take
another path, which a pack's shape need not show). `PlannedModel.steady = False` records every
step.

A steady step that meets a pack of another shape or dtype, or another number of packs, than the
learnt ones (the step's code took another path) keeps every tensor it packs from there on, warns
once (`SteadyPathWarning`, one line), and the next step is recorded: checked against the capture,
it goes on under the plan or stops with PlanError naming the cause. What the steady path cannot
see is a change that saves tensors of the same shapes in the same order (a module edited between
steps, a flag the model reads): the recorded path would stop at the differing op, the steady one
would regenerate the recorded recipe. Set `steady = False` for a model whose code changes from step
to step.

Not measured on a steady step: the saved-bytes and host peaks (they need the recorder's log);
`stats` carries the last recorded step's. A steady step holds the same maps, but lets a copy go
and brings a swapped map back at the next unpack of a moved map after the lowering's op rather
than at that op, so its device peak may be higher (the copies whose drop points fall between two
such unpacks are held until the second); docs/torch.md, "What a planned step costs"."""

import time
import warnings

import torch

from memplan.torch.apply import (_VALUE_READS, _Copies, _geometry, _PlanRecorder,
                                 _Ref, _whole_storage, _written_refs, regenerate)
from memplan.torch.capture import run_step
from memplan.torch.recorder import _call, flat_tensors, op_schema, written_arguments

__all__ = ["ObservingRecorder", "SteadyPath", "SteadyPathWarning"]

# What a pack does on the steady path (`Program.packs`).
_KEEP, _HOLD, _SWAP, _RECOMPUTE = range(4)


class SteadyPathWarning(UserWarning):
    """A steady step took another path than the recorded one: the next step is recorded."""


class ObservingRecorder(_PlanRecorder):
    """The recorded path's recorder, noting what the steady path needs: each pack's trace id,
    shape, dtype and action in the order autograd packs; the op count at each unpack of a map the
    plan does not keep; the producers the recomputations re-ran and every tensor they read that was
    not regenerated or brought back (`sources`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pack_log = []  # (tensor id, shape, dtype, how, written later)
        self.unpack_ops = []  # len(self.ops) at each unpack of a map not kept
        self.reran = set()  # producer op ids re-run
        self.sources = set()  # tensor ids the recomputations read as held
        self.forward_value_read = None  # a forward op that read a tensor's value into Python

    def on_pack(self, t, tid):
        later = tid >= len(self.tensors) or (self.current.get(self.storage_key(t)) != tid)
        payload = super().on_pack(t, tid)
        self.pack_log.append((tid, t.shape, t.dtype, payload[0], later))
        return payload

    def on_unpack(self, payload, tid):
        if payload[0] != "keep":
            self.unpack_ops.append(len(self.ops))
        return super().on_unpack(payload, tid)

    def _record(self, func, *args, **kwargs):
        op = super()._record(func, *args, **kwargs)
        if self.phase == "forward" and op_schema(func).name in _VALUE_READS:
            self.forward_value_read = op
        return op

    def _rerun(self, tid):
        self.reran.add(self.tensors[tid]["producer"])
        return super()._rerun(tid)

    def _resolve(self, value, *args, **kwargs):
        if isinstance(value, _Ref) and value.tid not in self.regenerated and \
                value.tid not in self.host:
            self.sources.add(value.tid)
        return super()._resolve(value, *args, **kwargs)


class _Program:
    """What one recorded step taught the steady path (see the module's docstring)."""

    def __init__(self, recorder, trace, model, batch, loss_fn, optimizer):
        self.loss_fn, self.optimizer = loss_fn, optimizer
        self.batch = [(t.shape, t.dtype) for t in flat_tensors(batch, [])]
        # the modules' training flags (batch norm and dropout run other ops in eval mode), read
        # from a list made once: walking the module tree at every step was ~0.2 ms of ResNet-18's
        self.modules = list(model.modules())
        self.modes = [m.training for m in self.modules]
        self.grad_enabled = torch.is_grad_enabled()
        self.peaks = None  # the recorded step's peaks (SteadyPath.learn)
        self.reason = None  # why the steady path cannot run this plan, or None
        plan = recorder.plan
        self.in_core = all(a == "keep" for a in plan.actions.values())
        tensors = trace["tensors"]
        # the recipes, read through `tensors` (producers) and `outputs_of`, for what is re-run
        self.recipes = recorder.recipes
        self.producer = {t["id"]: t["producer"] for t in recorder.tensors}
        self.outputs_of = {op: recorder.ops[op]["outputs"] for op in self.recipes}
        self.output_slot = recorder.output_slot
        self.persistent, self.weights = recorder.persistent, recorder.weights
        if self.in_core:
            return
        if any(a.startswith("encode:") for a in plan.actions.values()):
            self.reason = "the plan encodes maps (their points are op by op)"
            return
        for op in sorted(recorder.reran):
            if self.recipes[op][3] is not None:
                self.reason = (f"the plan recomputes random op '{recorder.ops[op]['name']}', "
                               "whose RNG state only the recorder catches")
                return
        if recorder.reran and recorder.forward_value_read is not None:
            self.reason = (f"forward op '{recorder.forward_value_read['name']}' reads a tensor's "
                           "value into Python and the plan recomputes (a branch on the data "
                           "could take another path)")
            return
        packed = {}
        for tid, _, _, how, later in recorder.pack_log:
            if later and (how != "keep" or tid in recorder.sources):
                self.reason = (f"tensor '{tensors[tid]['name']}' is written after autograd saved "
                               "it, through a view autograd does not see")
                return
            packed.setdefault(tid, how)
        # what the recomputations read held: parameters and buffers, the batch, packed maps
        names = dict(model.named_parameters())
        names.update(model.named_buffers())
        batch_index = {f"batch.{i}": i for i in range(len(self.batch))}
        self.objects, self.batch_sources, hold = {}, [], set()
        for tid in sorted(recorder.sources):
            name = tensors[tid]["name"]
            if tid in self.persistent and name in names:
                self.objects[tid] = names[name]
            elif tensors[tid]["producer"] is None and name in batch_index:
                self.batch_sources.append((batch_index[name], tid))
            elif packed.get(tid) == "keep":
                hold.add(tid)
            else:
                self.reason = (f"a recomputation reads tensor '{name}', which the saved-tensor "
                               "hooks do not reach")
                return
        how_code = {"keep": _KEEP, "swap": _SWAP, "recompute": _RECOMPUTE}
        self.packs = [(tid, shape, dtype, _HOLD if how == "keep" and tid in hold
                       else how_code[how]) for tid, shape, dtype, how, _ in recorder.pack_log]
        # at each unpack of a moved map: the copies to let go (the trace reads them no more) and
        # the swapped maps to bring back first, as the recorded step had done by then
        at = recorder.unpack_ops
        self.drops = [[] for _ in at]
        self.prefetches = [[] for _ in at]
        schedule = recorder.plan
        for op, tids in schedule.drop_after.items():
            k = _first(at, lambda c: c > op)
            if k is not None:
                self.drops[k].extend(t for t in tids if t not in self.persistent and
                                     tensors[t]["kind"] == "activation")
        for op, tids in schedule.prefetch_before.items():
            k = _first(at, lambda c: c >= op)
            if k is not None:
                self.prefetches[k].extend(tids)


def _first(values, predicate):
    """The index of the first of ascending `values` that satisfies `predicate`, or None."""
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate(values[mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo if lo < len(values) else None


class _Step:
    """One steady step's hooks and what they hold (see the module's docstring)."""

    def __init__(self, program, batch, cuda):
        self.program = program
        self.packs, self.count = program.packs, len(program.packs)
        self.n = 0  # packs so far
        self.k = 0  # unpacks of moved maps so far
        self.off = None  # why the step left the learnt path, once it has
        self.device = {}  # tensor id -> a tensor over its whole storage on the device
        self.regenerated = set()  # ids in self.device a recomputation wrote
        self.host = {}  # tensor id -> host copy of a swapped map's whole storage
        self.home = {}  # tensor id -> the device a swapped map was packed on
        self.copies = _Copies(cuda)
        self.cuda = cuda
        self.recompute_ops = 0
        self.swapped_maps = 0  # maps copied out to host memory
        if program.batch_sources:
            flat = flat_tensors(batch, [])
            for i, tid in program.batch_sources:
                self.device[tid] = _whole_storage(flat[i])

    def pack(self, t):
        n = self.n
        self.n = n + 1
        if n >= self.count or self.off is not None:
            return self._leave(t, n)
        tid, shape, dtype, how = self.packs[n]
        if t.shape != shape or t.dtype != dtype:
            return self._leave(t, n)
        if how == _KEEP:
            return t
        if how == _HOLD:
            self.device[tid] = _whole_storage(t)
            return t
        if how == _SWAP and tid not in self.host:
            self.host[tid] = self.copies.copy_out(_whole_storage(t))
            self.home[tid] = t.device
            self.swapped_maps += 1
        return (tid, _geometry(t))

    def _leave(self, t, n):
        """A pack off the learnt path: kept from here on (as autograd keeps it)."""
        if self.off is None:
            if n >= self.count:
                self.off = f"it packed more than the recorded step's {self.count} saved tensors"
            else:
                _, shape, dtype, _ = self.packs[n]
                self.off = (f"its saved tensor #{n} is {list(t.shape)} {t.dtype} where the "
                            f"recorded step's was {list(shape)} {dtype}")
        return t

    def unpack(self, packed):
        if not isinstance(packed, tuple):
            return packed
        tid, geometry = packed
        k = self.k
        self.k = k + 1
        program = self.program
        if self.off is None and k < len(program.drops):
            for gone in program.drops[k]:
                self.device.pop(gone, None)
                self.regenerated.discard(gone)
                self.host.pop(gone, None)
            for due in program.prefetches[k]:
                if due not in self.device and due in self.host:
                    self.device[due] = self.copies.copy_in(self.host[due], self.home[due])
        whole = self._materialize(tid)
        self.copies.wait(whole)
        return whole.as_strided(*geometry)

    # ---- regeneration: apply.py's _regenerate, _rerun and _resolve without the step's log ----
    def _materialize(self, tid):
        t = self.device.get(tid)
        if t is not None:
            self.copies.wait(t)  # a copy brought back: its first use waits for it
            return t
        if tid in self.host:
            t = self.device[tid] = self.copies.copy_in(self.host[tid], self.home[tid])
            self.copies.wait(t)
            return t
        obj = self.program.objects.get(tid)
        if obj is not None:
            t = self.device[tid] = _whole_storage(obj)
            return t
        return self._regenerate(tid)

    def _at_hand(self, tid):
        if tid in self.device or tid in self.program.objects:
            return True
        if tid in self.host:
            self._materialize(tid)
            return True
        return False

    def _inputs_of(self, tid):
        _, args, kwargs, _, _ = self.program.recipes[self.program.producer[tid]]
        refs = []
        for value in (args, kwargs):
            _collect(value, refs)
        return iter(refs)

    def _regenerate(self, tid):
        regenerate(tid, self._inputs_of, self._at_hand, self._rerun)
        return self.device[tid]

    def _rerun(self, tid):
        program = self.program
        producer = program.producer[tid]
        func, args, kwargs, _, grad_enabled = program.recipes[producer]
        written = _written_refs(func, args, kwargs)
        real_args = self._resolve(args, written)
        real_kwargs = self._resolve(kwargs, written)
        with torch.set_grad_enabled(grad_enabled):
            result = _call(func, real_args, real_kwargs)
        self.recompute_ops += 1
        for out in program.outputs_of[producer]:
            if out in self.device:
                continue  # a temporary copy: the one held stays
            where, index = program.output_slot[out]
            if where == "written":
                value = written_arguments(func, real_args, real_kwargs)[index]
            else:
                value = flat_tensors(result, [])[index]
            self.device[out] = _whole_storage(value)
            self.regenerated.add(out)

    def _resolve(self, value, written):
        if isinstance(value, _Ref):
            whole = self._materialize(value.tid).detach()
            if id(value) in written and value.tid in self.regenerated:
                del self.device[value.tid]
                self.regenerated.discard(value.tid)
                return whole.as_strided(*value.geometry)
            base = whole.as_strided(*value.geometry)
            unmarked = value.tid in self.program.persistent and \
                value.tid not in self.program.weights
            return base.clone() if id(value) in written or unmarked else base
        if isinstance(value, (list, tuple)):
            return type(value)(self._resolve(v, written) for v in value)
        if isinstance(value, dict):
            return {k: self._resolve(v, written) for k, v in value.items()}
        return value

    def finish(self):
        if self.off is None and self.n != self.count:
            self.off = (f"it packed {self.n} saved tensors where the recorded step packed "
                        f"{self.count}")
        self.copies.end_of_step()
        self.device.clear()
        self.host.clear()


def _collect(value, out):
    """The trace ids of a recipe's (nested) _Ref arguments, in order."""
    if isinstance(value, _Ref):
        out.append(value.tid)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _collect(v, out)


class SteadyPath:
    """A PlannedModel's steady path: `recorder_type` for a recorded step, `learn` after one,
    `step` for the steps after it (None when a step must be recorded)."""

    def __init__(self, planned):
        self.planned = planned
        self.program = None
        schedule = planned.schedule
        self.static_reason = None
        if schedule.host_tensors:
            self.static_reason = ("the plan places tensors on the host (their copies are op by "
                                  "op)")
        elif any(a.startswith("encode:") for a in schedule.actions.values()):
            self.static_reason = "the plan encodes maps (their points are op by op)"

    @property
    def reason(self):
        if self.static_reason:
            return self.static_reason
        if self.program is not None:
            return self.program.reason
        return None

    def recorder_type(self):
        return _PlanRecorder if self.static_reason else ObservingRecorder

    def learn(self, recorder, batch, loss_fn, optimizer):
        """After a recorded step that matched the capture: what the next steps repeat."""
        if not isinstance(recorder, ObservingRecorder):
            self.program = None
            return
        self.program = _Program(recorder, self.planned.trace, self.planned.model, batch,
                                loss_fn, optimizer)
        self.program.peaks = {key: self.planned.stats[key] for key in (
            "peak_saved_bytes", "peak_host_bytes", "sparse_spilled_bytes")}

    def forget(self):
        self.program = None

    def _matches(self, batch, loss_fn, optimizer):
        program = self.program
        if program is None or program.reason is not None or loss_fn is not program.loss_fn or \
                optimizer is not program.optimizer or \
                torch.is_grad_enabled() != program.grad_enabled:
            return False
        flat = flat_tensors(batch, [])
        if len(flat) != len(program.batch) or any(
                t.shape != shape or t.dtype != dtype
                for t, (shape, dtype) in zip(flat, program.batch)):
            return False
        return [m.training for m in program.modules] == program.modes

    def step(self, batch, loss_fn, optimizer, training_step):
        """Runs a steady step and returns (True, loss), or (False, None) when this step must be
        recorded (see the module's docstring)."""
        if not self._matches(batch, loss_fn, optimizer):
            return False, None
        program = self.program
        model = self.planned.model
        cuda = any(p.is_cuda for p in model.parameters())
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        if program.in_core:
            loss = run_step(model, batch, loss_fn, optimizer, None, training_step)
            recomputed, swapped, off = 0, 0, None
        else:
            hooks = _Step(program, batch, cuda)
            try:
                with torch.autograd.graph.saved_tensors_hooks(hooks.pack, hooks.unpack):
                    loss = run_step(model, batch, loss_fn, optimizer, None, training_step)
            finally:
                hooks.finish()
            recomputed, swapped, off = hooks.recompute_ops, hooks.swapped_maps, hooks.off
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        stats = dict(program.peaks or {})
        stats.update({"steady": True, "recomputed_ops": recomputed, "swapped_maps": swapped,
                      "step_seconds": seconds})
        self.planned.stats = stats
        if off is not None:
            self.program = None  # the next step is recorded, and checked against the capture
            warnings.warn(f"memplan.torch: a steady step took another path than the recorded "
                          f"one ({off}): it kept what it saved from there on, and the next step "
                          "is recorded", SteadyPathWarning, stacklevel=3)
        return True, loss

