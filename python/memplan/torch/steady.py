"""The steady path: a plan carried out on every step of a training loop after the first, through
autograd's saved-tensor hooks alone, without the recorder's per-op dispatch mode (issue 36).

What: `PlannedModel.step` (memplan.torch.apply) records its first step as it always has (the
recorder's TorchDispatchMode gives every tensor its captured id, checks each op against the
capture and carries out the plan). `SteadyPath` watches that step (`ObservingRecorder`) and
learns, in the order autograd calls the hooks, what the plan does there: the n-th pack's trace
tensor, its shape and dtype, and whether the plan keeps, swaps or recomputes it; which held
tensors (kept maps, parameters, the batch) the recomputations read; and the op count at each
point of the step the hooks see: after each pack, before and after each unpack of a map the plan
does not keep, and where autograd lets go of what a pack returned (the engine lets go of a node's
saved tensors as soon as the node has run). Each of the plan's drops (`drop_after`) and
prefetches (`prefetch_before`) is put at one of those points (`_Program.place`). The steps after
it run without a dispatch mode:
- a plan that keeps every map and places nothing on the host (in-core) runs the plain step, no
  hooks at all;
- otherwise the step runs under `torch.autograd.graph.saved_tensors_hooks`. A pack checks that
  the tensor has the learnt shape and dtype, then: keep hands the tensor back (and holds it when a
  recomputation reads it); swap copies its whole storage to host memory (once a map; pinned, on a
  side stream, on a GPU: memplan.torch.apply's `_Copies`) and holds nothing on the device;
  recompute holds nothing. Where a pack's release is a point of the plan, the pack returns a
  small object (`_Released`) that makes the point's drops and prefetches when autograd lets go of
  it. An unpack returns the map: a swapped map's copy brought back, a recomputed map regenerated
  from the recipes the first step recorded (the producing aten op and its arguments as trace
  ids), recursively, in the saved tensor's own geometry: the copies and recomputations are the
  recorded path's own code (memplan.torch.apply's `_MovedMaps`), which a steady step runs with
  its own state and log.
So a steady step computes what the recorded step computes, bit for bit, at a cost of a few
microseconds a pack and unpack of a map the plan moves.

Where the plan acts. A drop after op `d` goes at the first point after op `d`: the recorder
counts the saved tensors a node unpacked as read by its last op, so `d`, the last op reading a
copy, is the last op of the last node that unpacks it, and what that node saved is let go right
after `d` (before the engine adds the node's gradients into the next ones' inputs), on torch 1.13
and 2 alike. A prefetch before op `p` goes at the first point just before `p` (an unpack at the
start of the node that runs `p`, or the release after the node before it); where there is none
(`p` inside a node, as the simulator's default, the op before the first backward reader, often
is), at the last point before `p`: from its unpacks to its last op a node's ops hold the same maps
(none is written there or read for the last time before the node's last op), so the copy is
counted beside what it would be counted beside at `p` (in device memory it is held beside the
temporaries of the node's ops before `p` too, which the saved-bytes peak does not count).
Autograd's Node hooks would give the same points, but a steady step's nodes are new objects:
reaching the node that runs op `d` would take a walk of the graph every step (or torch 2's
`_current_autograd_node`, which 1.13 lacks), where a release is seen at the cost of one small
object per pack whose release is a point. A step that keeps its graph
(`backward(retain_graph=True)`) lets go of nothing during backward: its drops are made at the
next point or at the end of the step, and measured there.

Measured. Each steady step logs what it does (saved_bytes.StepLog: each copy brought in, each
recomputation's reads and writes, each swapped buffer released at its copy back, each drop), each
entry at the op count of its point, and `_Program.measure` puts the entries among the recorded
step's ops and its swapped buffers' releases at their release points (after their last forward
readers, or the plan's `release_before`: buffers no hook holds, the step's own code lets them go;
a release at a copy back is the steady step's own) and walks that log as the recorded step's
is walked (saved_bytes.peak): the same definition of the saved-bytes peak, to the byte. The walk
is made again only when the entries differ from the last walked step's (compared entry by
entry), so an unchanged plan's steady steps walk it once. The host peak is counted as the
recorded step counts it (a swapped map's copy from its copy-out to the end of its copy-in). An
in-core step's log is its ops alone, the recorded step's, and so are its peaks. `stats` then
holds the step's own peaks and `last_step` its log; a step that left the learnt path (below)
measures none (`None`).

Which steps are steady (the rule; `PlannedModel.steady_reason` says why not, `steady_steps` and
`recorded_steps` count them, `stats["steady"]` says which the last one was): the step after a
recorded one that matched the capture, with the same loss function and optimizer objects, batch
tensors of the recorded shapes and dtypes, the same modules in training mode and the same grad
mode. Recorded instead, every step: a plan that places tensors on the host, encodes maps or
recomputes them per use (their points are op by op, which only the recorder sees), one that
prefetches a map before a forward op where the hooks see no point (the last point before it
comes before forward ops that write buffers beside the copy: its peak would not be the
simulator's), one that recomputes a random op (dropout's
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
to step."""

import bisect
import collections
import time
import warnings

import torch

from memplan.torch.apply import (_VALUE_READS, _Copies, _geometry, _MovedMaps, _PlanRecorder,
                                 _Ref, _whole_storage)
from memplan.torch.capture import run_step
from memplan.torch.recorder import flat_tensors, op_schema
from memplan.torch.saved_bytes import StepLog, peak

__all__ = ["ObservingRecorder", "SteadyPath", "SteadyPathWarning"]

# What a pack does on the steady path (`_Program.packs`).
_KEEP, _HOLD, _SWAP, _RECOMPUTE = range(4)

# The points of a step the saved-tensor hooks see (`ObservingRecorder.points`): after the n-th
# pack, before and after the k-th unpack of a map the plan moves, and when autograd lets go of
# what the n-th pack returned (a node's saved tensors go as soon as it has run).
_PACK, _UNPACK, _UNPACKED, _RELEASE = range(4)


class SteadyPathWarning(UserWarning):
    """A steady step took another path than the recorded one: the next step is recorded."""


class _Observed:
    """What a recorded step's pack returns, noting in `points` the op count when autograd lets
    go of it (it refers to the recorder's lists, not to the recorder)."""

    __slots__ = ("payload", "n", "points", "ops")

    def __init__(self, payload, n, points, ops):
        self.payload, self.n, self.points, self.ops = payload, n, points, ops

    def __del__(self):
        self.points.append((_RELEASE, self.n, len(self.ops)))


class ObservingRecorder(_PlanRecorder):
    """The recorded path's recorder, noting what the steady path needs: each pack's trace id,
    shape, dtype and action in the order autograd packs; the points the saved-tensor hooks see,
    each with the op count there (`points`); the producers the recomputations re-ran and every
    tensor they read that was not regenerated or brought back (`sources`); the swapped maps
    whose device buffers were released by their copy back (`released_at_copy_in`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pack_log = []  # (tensor id, shape, dtype, how, written later)
        self.points = []  # (_PACK | _UNPACK | _UNPACKED | _RELEASE, index, op count)
        self.unpacks = 0  # unpacks of a map not kept so far
        self.reran = set()  # producer op ids re-run
        self.sources = set()  # tensor ids the recomputations read as held
        self.released_at_copy_in = set()
        self.forward_value_read = None  # a forward op that read a tensor's value into Python

    def _pack(self, t):
        n = len(self.pack_log)
        payload = super()._pack(t)
        self.points.append((_PACK, n, len(self.ops)))
        return _Observed(payload, n, self.points, self.ops)

    def _unpack(self, packed):
        return super()._unpack(packed.payload)

    def on_pack(self, t, tid):
        later = tid >= len(self.tensors) or (self.current.get(self.storage_key(t)) != tid)
        payload = super().on_pack(t, tid)
        self.pack_log.append((tid, t.shape, t.dtype, payload[0], later))
        return payload

    def on_unpack(self, payload, tid):
        if payload[0] == "keep":
            return super().on_unpack(payload, tid)
        k = self.unpacks
        self.unpacks += 1
        self.points.append((_UNPACK, k, len(self.ops)))
        result = super().on_unpack(payload, tid)
        self.points.append((_UNPACKED, k, len(self.ops)))
        return result

    def _copy_in(self, tid):
        if tid in self.releasing:
            self.released_at_copy_in.add(tid)
        return super()._copy_in(tid)

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
        self.measured = None  # (a steady step's log entries, its log, its peak), the last walked
        self.reason = None  # why the steady path cannot run this plan, or None
        plan = recorder.plan
        self.in_core = all(a == "keep" for a in plan.actions.values())
        tensors = trace["tensors"]
        # what _MovedMaps reads: the recipes and the records of the ops and tensors they make
        self.recipes, self.output_slot = recorder.recipes, recorder.output_slot
        self.tensors, self.ops = recorder.tensors, recorder.ops
        self.persistent, self.weights = recorder.persistent, recorder.weights
        self.regenerated_frees = plan.regenerated_frees
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
        self.released_at_copy_in = frozenset(recorder.released_at_copy_in)
        self.pack_log = [(tid, shape, dtype, _HOLD if how == "keep" and tid in hold else
                          how_code[how]) for tid, shape, dtype, how, _ in recorder.pack_log]
        self.points = list(recorder.points)  # as of its learning: what goes later is no point
        # what a steady step holds on the device, and so may let go: kept maps recomputations
        # read, copies of moved maps, what recomputations regenerated
        holdable = {tid for tid, how in packed.items() if how != "keep"} | hold
        for op in recorder.reran:
            holdable.update(recorder.ops[op]["outputs"])
        # of those, the ones the recorded step let go of at a drop point (a copy a recomputation
        # makes that no op reads goes after its last re-run instead: `_rerun`)
        self.dropped = {entry[1] for entry in recorder.log.entries if entry[0] == "drop"}
        self.drop_after = {op: [t for t in tids if t in holdable and t in self.dropped and
                                t not in self.persistent and tensors[t]["kind"] == "activation"]
                           for op, tids in plan.drop_after.items()}
        self.prefetch_before = {op: [t for t in tids if packed.get(t) == "swap"]
                                for op, tids in plan.prefetch_before.items()}
        # A prefetch before a forward op where the hooks see no point would be made at the last
        # point before it, before forward ops that write buffers beside the copy (that rule is
        # exact within a backward node only: `place`), and so measured above the prediction.
        gaps = {gap for _, _, gap in self.points}
        for op, tids in sorted(self.prefetch_before.items()):
            if tids and op not in gaps and trace["ops"][op]["phase"] == "forward":
                self.reason = (f"the plan prefetches tensor '{tensors[tids[0]]['name']}' before "
                               f"forward op '{trace['ops'][op]['name']}', where the saved-tensor "
                               "hooks see no point")
                return
        self.place()
        # the recorded step's log entries a steady step does not make itself: the ops, and the
        # releases of swapped maps' device buffers at their release points (neither path holds
        # those buffers: the step's own code lets them go), each with its place (`measure`)
        self.fixed, gap = [], 0
        for entry in recorder.log.entries:
            if entry[0] in ("op", "host_op"):
                self.fixed.append(((gap, 2), entry))
                gap += 1
            elif entry[0] == "release" and entry[1] not in self.released_at_copy_in:
                self.fixed.append(((gap, 0), entry))

    def place(self, kinds=(_PACK, _UNPACK, _UNPACKED, _RELEASE), early=True):
        """Puts the plan's drops and prefetches at the points of the step the hooks see where the
        recorded step made them (`packs`, `unpacks`: each point's op count, drops, prefetches).

        A drop after op `d` goes at the first point after op `d` (where autograd lets go of the
        saved tensors of the node whose last op `d` is: a map is let go after the last node that
        unpacks it); a prefetch before op `p` at the first point just before op `p`, else at the
        last point before it (a node's ops hold the same maps from its unpacks to its last op,
        so a copy brought in at its start is counted beside what it would be counted beside at
        op `p`), else at the first after it. `kinds` and `early=False` (prefetches at the first
        point at or after op `p`) give other rules, for comparison: the steady path's first one
        acted at unpacks only, late (`kinds=(_UNPACK,)`, `early=False`)."""
        points = [point for point in self.points if point[0] in kinds]
        gaps = [gap for _, _, gap in points]
        actions = {}

        def at(i, which, tids):
            if i is None or not tids:
                return
            kind, index, gap = points[i]
            entry = actions.setdefault((kind, index), (gap, [], []))
            entry[which].extend(tids)

        for op in sorted(self.drop_after):
            i = bisect.bisect_left(gaps, op + 1)
            if i < len(points):
                at(i, 1, self.drop_after[op])
        for op in sorted(self.prefetch_before):
            i = bisect.bisect_left(gaps, op)
            if early and (i == len(points) or gaps[i] != op) and i > 0:
                i -= 1
            at(i if i < len(points) else None, 2, self.prefetch_before[op])
        self.packs = [(tid, shape, dtype, how, actions.get((_PACK, n)), actions.get((_RELEASE, n)))
                      for n, (tid, shape, dtype, how) in enumerate(self.pack_log)]
        self.unpacks = [(gap, actions.get((_UNPACK, k)), actions.get((_UNPACKED, k)))
                        for kind, k, gap in self.points if kind == _UNPACK]

    def measure(self, entries):
        """A steady step's log (`_AnchoredLog.entries`) and saved-bytes peak: its entries put
        among the recorded step's ops and releases (`fixed`) at their places, walked as the
        recorded step's log is (saved_bytes.peak). The walk is the last step's again when the
        entries are the last step's (checked entry by entry): every step of an unchanged plan."""
        measured = self.measured
        if measured is not None and measured[0] == entries:
            return measured[1], measured[2]
        log = StepLog()
        out, fixed, i = log.entries, self.fixed, 0
        for gap, entry in entries:
            place = (gap, 1)
            while i < len(fixed) and fixed[i][0] < place:
                out.append(fixed[i][1])
                i += 1
            out.append(entry)
        out.extend(entry for _, entry in fixed[i:])
        value = peak(log, self.step_trace, self.buffers)
        self.measured = (entries, log, value)
        return log, value


class _AnchoredLog(StepLog):
    """A steady step's log: each entry with the op count of the point it was made at (`gap`,
    set by the hooks from what the recorded step counted there)."""

    def __init__(self):
        super().__init__()
        self.gap = 0

    def _add(self, entry):
        self.entries.append((self.gap, entry))

    # the entries a steady step makes most, without `_add`'s call
    def drop(self, tensor_id):
        self.entries.append((self.gap, ("drop", tensor_id)))

    def copy_in(self, tensor_id, nbytes):
        self.entries.append((self.gap, ("copy_in", tensor_id, nbytes)))


class _Released:
    """What a steady step's pack returns where the plan acts when autograd lets go of it: the
    payload, and the point's drops and prefetches, made when it goes."""

    __slots__ = ("payload", "step", "point")

    def __init__(self, payload, step, point):
        self.payload, self.step, self.point = payload, step, point

    def __del__(self):
        self.step.released(self.point)


class _Step(_MovedMaps):
    """One steady step's hooks and what they hold (see the module's docstring)."""

    def __init__(self, program, batch, cuda):
        self.program = program
        self.packs, self.count = program.packs, len(program.packs)
        self.unpacks = program.unpacks
        self.n = 0  # packs so far
        self.k = 0  # unpacks of moved maps so far
        self.off = None  # why the step left the learnt path, once it has
        self.done = False
        self.objects = program.objects
        # _MovedMaps's state (see its docstring)
        self.tensors, self.ops = program.tensors, program.ops
        self.recipes, self.output_slot = program.recipes, program.output_slot
        self.persistent, self.weights = program.persistent, program.weights
        self.device = {}
        self.regenerated = set()
        self.node_regenerated = None  # per_use: recorded steps only
        self.host, self.home, self.host_held = {}, {}, set()
        self.releasing = set(program.released_at_copy_in)
        self.h2d_queue, self.h2d_queued = collections.deque(), {}
        self.host_bytes = self.peak_host_bytes = 0
        self.recompute_ops = 0
        self.reruns, self.regenerated_frees = {}, program.regenerated_frees
        self.copies = _Copies(cuda)
        self.log = _AnchoredLog()
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
        tid, shape, dtype, how, at_pack, at_release = self.packs[n]
        if t.shape != shape or t.dtype != dtype:
            return self._leave(t, n)
        if how == _KEEP:
            payload = t
        elif how == _HOLD:
            self.device[tid] = _whole_storage(t)
            payload = t
        else:
            if how == _SWAP and tid not in self.host:
                self._copy_out(tid, _whole_storage(t))
                self.swapped_maps += 1
            payload = (tid, _geometry(t))
        if at_pack is not None:
            self._act(at_pack)
        if at_release is not None:
            return _Released(payload, self, at_release)
        return payload

    def _leave(self, t, n):
        """A pack off the learnt path: kept from here on (as autograd keeps it)."""
        if self.off is None:
            if n >= self.count:
                self.off = f"it packed more than the recorded step's {self.count} saved tensors"
            else:
                shape, dtype = self.packs[n][1:3]
                self.off = (f"its saved tensor #{n} is {list(t.shape)} {t.dtype} where the "
                            f"recorded step's was {list(shape)} {dtype}")
        return t

    def _act(self, point):
        """The plan's drops, then prefetches, at a point (`_Program.place`), logged at its op
        count."""
        self.log.gap, drops, prefetches = point
        for tid in drops:
            self._let_go(tid)
        for tid in prefetches:
            if tid not in self.device and tid in self.host:
                self._copy_in(tid)

    def released(self, point):
        """Autograd let go of a payload whose release is a point of the plan."""
        if self.off is None and not self.done:
            self._act(point)

    def unpack(self, packed):
        if type(packed) is _Released:
            packed = packed.payload
        if not isinstance(packed, tuple):
            return packed
        tid, geometry = packed
        k = self.k
        self.k = k + 1
        if self.off is None and k < len(self.unpacks):
            gap, before, after = self.unpacks[k]
            if before is not None:
                self._act(before)
            self.log.gap = gap
            whole = self._materialize(tid)
            if after is not None:
                self._act(after)
        else:
            whole = self._materialize(tid)
        return whole.as_strided(*geometry)

    # a parameter or buffer a recomputation reads: over its storage from its first read
    def _materialize(self, tid):
        if tid in self.objects and tid not in self.device:
            self.device[tid] = _whole_storage(self.objects[tid])
        return super()._materialize(tid)

    def _at_hand(self, tid):
        if tid in self.objects and tid not in self.device:
            self.device[tid] = _whole_storage(self.objects[tid])
        return super()._at_hand(tid)

    def finish(self):
        if self.off is None and self.n != self.count:
            self.off = (f"it packed {self.n} saved tensors where the recorded step packed "
                        f"{self.count}")
        self.done = True
        if self.off is None:  # a copy the plan lets go of earlier, held to the end (no point came)
            self.log.gap = len(self.ops)
            for tid in sorted(self.program.dropped.intersection(self.device)):
                self.log.drop(tid)
        self.copies.end_of_step()
        self.left_bytes = self.regenerated_left_bytes()
        self.device.clear()
        self.host.clear()


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
        elif schedule.per_use:
            self.static_reason = ("the plan recomputes maps per use (let go after each backward "
                                  "node that reads them: op by op)")

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
        planned = self.planned
        self.program = _Program(recorder, planned.trace, planned.model, batch, loss_fn, optimizer)
        self.program.peaks = {key: planned.stats[key] for key in (
            "peak_saved_bytes", "peak_host_bytes", "sparse_spilled_bytes")}
        self.program.recorded_log, self.program.step_trace = planned.last_step
        self.program.buffers = planned._feature_map_buffers

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
            hooks = None
        else:
            hooks = _Step(program, batch, cuda)
            try:
                with torch.autograd.graph.saved_tensors_hooks(hooks.pack, hooks.unpack):
                    loss = run_step(model, batch, loss_fn, optimizer, None, training_step)
            finally:
                hooks.finish()
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        stats = {"steady": True, "step_seconds": seconds, "sparse_spilled_bytes": 0}
        off = None
        if hooks is None:  # the plain step: its log is the recorded step's ops
            stats.update(peak_saved_bytes=program.peaks["peak_saved_bytes"],
                         peak_host_bytes=program.peaks["peak_host_bytes"],
                         recomputed_ops=0, swapped_maps=0, regenerated_left_bytes=0)
            self.planned.last_step = (program.recorded_log, program.step_trace)
        else:
            off = hooks.off
            stats.update(recomputed_ops=hooks.recompute_ops, swapped_maps=hooks.swapped_maps,
                         regenerated_left_bytes=hooks.left_bytes,
                         peak_saved_bytes=None, peak_host_bytes=None)
            if off is None and hooks.k == len(program.unpacks):
                log, stats["peak_saved_bytes"] = program.measure(hooks.log.entries)
                stats["peak_host_bytes"] = hooks.peak_host_bytes
                self.planned.last_step = (log, program.step_trace)
        self.planned.stats = stats
        if off is not None:
            self.program = None  # the next step is recorded, and checked against the capture
            warnings.warn(f"memplan.torch: a steady step took another path than the recorded "
                          f"one ({off}): it kept what it saved from there on, and the next step "
                          "is recorded", SteadyPathWarning, stacklevel=3)
        return True, loss
