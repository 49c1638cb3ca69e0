"""`apply`: carry out a memplan plan in a PyTorch training step through autograd's saved-tensor
hooks (pack/unpack).

What: `apply(model, plan, captured)` reads the plan against `captured`'s trace with memplan's plan
reader and lays it out on the step (memplan.torch.schedule: the workload fingerprint, the actions
each map may take, the simulator's prefetch, release and drop points), checks that `model` is the
captured model (parameter names and shapes), and returns a `PlannedModel` whose `step(batch,
loss_fn, optimizer)` runs one training step with the plan's decisions carried out on every feature
map autograd saves:
- keep: the saved tensor is held as autograd would hold it;
- swap: the pack hook copies the map's whole storage to host memory (on a GPU: pinned memory, on a
  side stream) and holds no reference to the device tensor. The copy back is issued at the plan's
  prefetch point (`prefetch_before`, else the simulator's default: the op before the map's first
  backward reader when that comes after its last forward one): before that op runs, or before an
  autograd node unpacks what it saved if that comes first, so that it follows the previous op's
  copy-outs and precedes the recomputations for that op, as in sim/lowering.cpp. The unpack
  returns the copy in the saved tensor's own geometry (sizes, strides, offset), waiting for it on
  a GPU, so backward computes bit for bit what it computes on the original; on the CPU "host" and
  "device" are the same memory and the copies are synchronous. The device buffer counts as held
  until its copy-out is done: after its last forward reader, or until the plan's release point
  (`release_before`, Note [Release point] in core/plan.hpp) or a copy back, whichever is first.
- recompute: the pack hook keeps only the map's id; the unpack re-runs the producing aten op from
  its arguments recorded as trace tensor ids, recursively for inputs that are neither held nor
  brought back, under the RNG state (CPU, and CUDA for CUDA tensors) the op first ran with, on
  clones of parameters and buffers and of arguments it writes that are held for another use (a
  regenerated input written over in place becomes the output, as the lowering's buffer does).
- every copy brought back or regenerated is held until the op after which the captured trace no
  longer reads it (the simulator's drop point); a regenerated intermediate nothing reads again in
  the trace stays for later recomputations, as the lowering keeps it.
- encode (Gist's encodings, memplan.torch.encodings: host_backend/encodings.cpp's formats in
  sim::encoded_bytes's sizes): the map is held until its last forward reader has run, then
  encoded on the device and the float32 buffer let go (the lowering's forward drop, after the
  swapped buffers and encodes of the maps before it); the first unpack decodes it into a float32
  buffer, held to the drop point. binarize keeps 1 bit a value and decodes to 1.0 / 0.0, refused
  (one line) for a map a backward op other than ReLU's and max-pool's reads (their CPU and CUDA
  kernels read the sign and the geometry); sparse keeps every value but +0.0 with its position,
  in a buffer sized for half of them (a denser map spills the rest to host memory, as
  host_backend does: `sparse_spilled_bytes`); fp16, fp10 and fp8 keep packed codes of 16, 10 and
  8 bits, rounded as host_backend rounds (nearest, ties to even, subnormals, saturating). A
  binarized or narrowed map that a forward op re-run by a recomputation reads is refused (one
  line): the simulator's plan reader refuses it.
- host placement (Note [Host placement] in core/plan.hpp; the points from
  memplan.torch.schedule): a parameter, buffer, optimizer state or batch tensor the plan places
  on the host lives in a host slot (pinned memory on a GPU), its tensor kept with an empty storage
  (resized to 0 bytes: autograd's metadata, the optimizer's references and the recorder's identity
  stay), so it holds no device memory; before each group of its uses (at the plan's prefetch
  point, else the simulator's default) the storage is filled again from the slot (on the side
  stream, waited for at the first use), and after the group's last use it is emptied (copied back
  first after an update on the device, and for batch norm's buffers, which forward writes). The
  batch's host-placed tensors are placeholders on the model's device (the user's batch is left
  as it is). A host-placed gradient is copied to its slot as soon as its op has written it and
  its storage emptied after its last use before the update (at the earliest one op later); an
  update on the device brings it back for its update uses. With the update on the host, every
  update op runs on the host's copies: the slots of the gradients and optimizer state (which the
  plan must place there) and of host-placed parameters, and a master copy of each other
  parameter, copied back to the device after each op that reads it (ZeRO-Offload's flow).
  What update ops write (Adam's sqrt and denominator, the _foreach_ variants' lists) are host
  tensors, made by their op on the host's copies and let go after the last update op that reads
  them (the update's temporaries). Parameters and optimizer state stay on the host from step to
  step (`PlannedModel.restore()` brings them back). A host-placed tensor the step makes during
  the step (a constant the loss closes over, a GradScaler's state) is carried out in the
  accounting only.
A step whose parameters, batch shapes or optimizer state are not the captured ones is refused
before it runs, and one whose ops differ from the captured trace's stops at the first differing
op, with one line (PlanError) naming the likely cause: the optimizer's options for an update op, a
branch on data after a value was read into Python (`.item()`, `if tensor:`), else the code of the
model or its loss. A plan that moves a map the step holds for backward outside autograd's saved
tensors (StepRecorder.held: torch 1.13's checkpoint inputs), which the hooks cannot reach, is
refused with one line when backward starts.

Why this module: it is the part only PyTorch can do, holding, copying, regenerating and encoding
live tensors as autograd saves and unpacks them. What the plan says and where the simulator acts
on each map come from memplan.torch.schedule (memplan._core's answers), the encoders from
memplan.torch.encodings. How the plan's tensor ids meet live tensors: the step runs under the same
recorder as `capture` (memplan.torch.recorder), which gives every tensor the id the captured trace
gave it.

Stats: `peak_saved_bytes`, the saved-bytes peak of the step as it ran (memplan.torch.saved_bytes:
apply logs every op, recomputation and copy brought back, the device copies of host-placed tensors
among them); `peak_host_bytes`, the most bytes of host slots at once: those of host-placed
parameters, buffers, optimizer state and batch tensors for the whole step, a swapped map's and a
host-placed gradient's from its copy-out to the end of its copy-in, which is taken as the first
use of that copy or of one issued after it (one H2D stream: memplan.torch.validate predicts this
order, `_ORDER_MACHINE`), and an update on the host's temporaries, each from the update op that
makes it to the end of the last one that reads it (or a version written over it); the copy itself
is let go at the map's drop point. A recomputed map is held from its regeneration to its drop
point; one the plan recomputes `per_use` (SuperNeurons' memory-centric mode), with the
intermediates regenerated to make it, only to the end of the backward node that regenerated it
(the lowering's `forget_per_use`: autograd holds what a node unpacked until the node returns), so
the next node that unpacks it regenerates it. A
steady step (memplan.torch.steady) measures both peaks as well, from its own log; the copies,
recomputations, releases and drops of both paths are one class's (`_MovedMaps`).
"""

import collections
import time

import torch

from memplan.torch.capture import run_step, step_module
from memplan.torch.encodings import decode_map, encode_map
from memplan.torch.recorder import (_METADATA_READERS, StepRecorder, _call, flat_tensors,
                                    op_schema, storage_bytes, untyped_storage, written_arguments)
from memplan.torch.saved_bytes import StepLog, feature_map_buffers, peak
from memplan.torch.schedule import (PlanError, check_batch, check_model,
                                    check_optimizer_state, plan_schedule)

__all__ = ["PlanError", "PlannedModel", "apply"]

# Ops whose eager implementation draws from the random number generator without the
# `nondeterministic_seeded` tag that marks every random aten op (inductor's random prims, which a
# compiled model's split holds: memplan.torch.compiled; their eager forms call torch.rand and
# torch.randint).
_UNTAGGED_RANDOM_OPS = {"prims::inductor_random", "prims::inductor_randint"}


def _is_random(func):
    """Whether `func` draws from the random number generator (a recomputation must run it under
    the state it first ran with)."""
    return torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()) or \
        op_schema(func).name in _UNTAGGED_RANDOM_OPS


# Ops that hand a tensor's value to Python, where a branch may depend on it.
_VALUE_READS = {"aten::_local_scalar_dense", "aten::is_nonzero", "aten::equal", "aten::allclose"}


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
    elements = storage_bytes(t) // t.element_size()
    if t.dim() == 0 and t.storage_offset() == 0 and elements == 1:
        return t
    return t.as_strided((elements,), (1,), 0)


def _written_refs(func, args, kwargs):
    """ids of the _Ref objects in the arguments the op's schema marks as written."""
    refs = set()
    for i, name in op_schema(func).written:
        value = args[i] if i < len(args) else kwargs.get(name)
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, _Ref):
                refs.add(id(v))
    return refs


class _Copies:
    """The plan's copies between device and host memory. On the CPU they are synchronous. With
    CUDA tensors: into pinned host memory and back on a side stream that first waits for the
    compute stream; the device tensor copied out is recorded on the side stream (the caching
    allocator reuses its block only once the copy has read it), and a tensor copied in carries an
    event the compute stream waits for before it is read (`wait`)."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.stream = torch.cuda.Stream() if cuda else None
        self.ready = {}  # data pointer of a tensor copied in -> its copy's CUDA event
        self.host_written = {}  # data pointer of a host slot -> the CUDA event of a copy into it
        self.pending_to_device = False  # a master's copy to the device may be running

    def copy_out(self, t):
        if not t.is_cuda:
            return t.to("cpu", copy=True)
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            host.copy_(t, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        t.record_stream(self.stream)
        self.host_written[host.data_ptr()] = event
        return host

    def copy_in(self, host, device):
        if device.type != "cuda":
            return host.to(device, copy=True)
        t = torch.empty(host.shape, dtype=host.dtype, device=device)  # on the compute stream
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            t.copy_(host, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        self.ready[t.data_ptr()] = event
        return t

    def wait(self, t):
        event = self.ready.pop(t.data_ptr(), None) if t.is_cuda else None
        if event is not None:
            torch.cuda.current_stream().wait_event(event)

    # ---- host placement: a tensor's home is a host slot, its device storage is filled and
    # emptied around its uses (the tensor object, and so autograd's metadata, stays)
    def slot_of(self, t):
        """A host slot holding `t` (a tensor over a whole storage, on any device), written now
        (before the step: nothing runs beside it)."""
        if not t.is_cuda:
            return t.detach().to("cpu", copy=True)
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        host.copy_(t)
        return host

    def refill(self, t, nbytes, slot):
        """Gives `t`'s emptied storage `nbytes` again (on the compute stream, as the lowering
        allocates) and copies its slot into it (on the side stream: `wait` before a use)."""
        untyped_storage(t).resize_(nbytes)
        whole = _whole_storage(t).detach()
        if not whole.is_cuda:
            whole.copy_(slot)
            return whole
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            whole.copy_(slot, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        self.ready[whole.data_ptr()] = event
        return whole

    def write_back(self, slot, whole):
        """Copies a device copy into its slot (an update on the device wrote it), before its
        storage is emptied; the host reads the slot only after `host_ready`."""
        if not whole.is_cuda:
            slot.copy_(whole)
            return
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            slot.copy_(whole, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        whole.record_stream(self.stream)  # its block is reused once the copy has read it
        self.host_written[slot.data_ptr()] = event

    def host_ready(self, slot):
        """Waits until the copies into host slot `slot` are done (before the host reads it)."""
        event = self.host_written.pop(slot.data_ptr(), None)
        if event is not None:
            event.synchronize()

    def copy_to_device(self, whole, master):
        """An update on the host wrote `master`: its device parameter gets it (the lowering's
        copy-in after a host update op). The compute stream waits for it at the end of the step."""
        whole = whole.detach()
        if not whole.is_cuda:
            whole.copy_(master)
            return
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            whole.copy_(master, non_blocking=True)
        self.pending_to_device = True

    def before_host_op(self):
        """A host op may write a master an earlier copy to the device still reads."""
        if self.cuda and self.pending_to_device:
            self.stream.synchronize()
            self.pending_to_device = False

    def end_of_step(self):
        if self.cuda:
            torch.cuda.current_stream().wait_stream(self.stream)
            self.pending_to_device = False


class _Ref:
    """A tensor argument of a recorded op: the trace id of its storage and its geometry."""

    def __init__(self, tid, t):
        self.tid, self.geometry = tid, _geometry(t)


def _collect_refs(value, out):
    """Appends the _Ref objects of a recorded op's (nested) arguments to `out`, in order."""
    if isinstance(value, _Ref):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect_refs(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _collect_refs(v, out)


def host_temporaries(trace):
    """The host memory an update on the host's temporaries take (Note [Host placement] in
    core/plan.hpp: what update ops write, a version written over one in its slot), as the simulator
    holds their slots (HostSlot in core/program.hpp): {op id: bytes of the temporaries it makes,
    taken as it starts} and {op id: bytes of those it is the last to make or read, let go when it
    ends}. A slot has the most bytes of its versions, as validate's `saved_only` sizes it."""
    tensors = trace["tensors"]
    slot, size, last = {}, {}, {}  # tensor -> its slot's first tensor; per slot: bytes, last op
    for op in trace["ops"]:
        if op["phase"] != "update":
            continue
        for t in op["inputs"]:
            if t in slot:
                last[slot[t]] = op["id"]
        for t in op["outputs"]:
            base = tensors[t].get("in_place_of")
            first = t if base is None else slot[base]  # a base the update made: the plan reader
            slot[t] = first
            size[first] = max(size.get(first, 0), tensors[t]["bytes"])
            last[first] = op["id"]
    made, done = {}, {}
    for first, nbytes in size.items():
        producer = tensors[first]["producer"]
        made[producer] = made.get(producer, 0) + nbytes
        done[last[first]] = done.get(last[first], 0) + nbytes
    return made, done


def regenerate(tid, inputs_of, at_hand, rerun):
    """Re-runs the producer of `tid` (`rerun(tid)`), first regenerating each of its inputs
    (`inputs_of(tid)`, ids) that is not `at_hand`, in argument order and depth first, as a
    recursion would, but on a stack of its own: a chain of recomputations may be as long as the
    network (Python's recursion limit stopped a 100-layer MLP's, issue 36)."""
    stack = [(tid, inputs_of(tid))]
    while stack:
        top, inputs = stack[-1]
        gone = next((i for i in inputs if not at_hand(i)), None)
        if gone is None:
            stack.pop()
            rerun(top)
        else:
            stack.append((gone, inputs_of(gone)))


class _MovedMaps:
    """The device and host copies of the maps a plan moves, made and let go of as the simulator's
    lowering makes them; the part of carrying out a plan that the recorded step (`_PlanRecorder`)
    and the steady one (memplan.torch.steady) share.

    What: a swapped map's whole storage is copied to host memory once (`_copy_out`) and brought
    back at its prefetch point or at its first use (`_copy_in`); a recomputed map, and each input
    of its producer that is neither held nor brought back, is regenerated from the recorded step's
    recipes (`_regenerate`: the producing aten op and its arguments as trace ids, `_rerun`,
    `_resolve`); a copy is let go at its drop point (`_let_go`), and a copy a recomputation makes
    that no op of the step reads after the re-run that reads or writes it last (`_rerun`), where
    the lowering frees it, without a drop logged (the log counts it to that re-run). The step's log
    (saved_bytes.StepLog) gets each copy brought in, each recomputation's reads and writes, each
    swapped buffer's release and each drop, and the host bytes are counted from a copy-out to the
    end of its copy-in (the first use of that copy or of one issued after it: one H2D stream).

    Why one class: a copy made or let go at another point, or a recomputation that re-ran other
    ops, would give the two paths other saved-bytes peaks; here they cannot differ.

    How: a subclass sets, before the step, `device` (tensor id -> a device tensor over its whole
    storage: what is held), `regenerated` (ids in `device` a recomputation wrote),
    `node_regenerated` (None, or for a plan with per_use recomputation the list `_rerun` adds what
    it regenerates to, for the recorded step's `_forget_per_use`), `host` (id ->
    host copy), `home` (id -> the device a swapped map came from), `host_held` (copies out not
    brought back yet), `releasing` (swapped maps whose device buffer is counted until its release
    or copy back), `h2d_queue` (a deque) and `h2d_queued` (`_queue_copy_in`), `host_bytes`,
    `peak_host_bytes`, `recompute_ops`, `reruns` (op id -> its re-runs so far), `copies`
    (`_Copies`), `log`; `regenerated_frees` (`Schedule.regenerated_frees`); and, from the recorded step,
    `tensors` and `ops` (their records: producer, in_place_of, bytes; outputs), `recipes` (op id
    -> (func, args, kwargs with _Ref, RNG state or None, grad mode)), `output_slot`, `persistent`
    and `weights`."""

    # ---- host copies of swapped maps ------------------------------------------------------
    def _copy_out(self, tid, storage):
        self.host[tid] = self.copies.copy_out(storage)
        self.home[tid] = storage.device
        self.host_held.add(tid)
        self.host_bytes += self.tensors[tid]["bytes"]
        if self.host_bytes > self.peak_host_bytes:
            self.peak_host_bytes = self.host_bytes

    def _account_host(self, delta):
        self.host_bytes += delta
        self.peak_host_bytes = max(self.peak_host_bytes, self.host_bytes)

    def _release(self, tid):
        """A swapped map's device buffer goes, once its copy-out has read it (logged as a read:
        the simulator holds it until it has waited for the copy there)."""
        if tid in self.releasing:
            self.releasing.discard(tid)
            self.log.release(tid)

    def _copy_in(self, tid):
        """Brings a swapped map back (at its prefetch point, or when first needed)."""
        if tid in self.releasing:  # the lowering frees the copied-out buffer before the copy back
            self._release(tid)
        copy = self.copies.copy_in(self.host[tid], self.home[tid])
        self.device[tid] = copy
        self.log.copy_in(tid, storage_bytes(copy))
        release = 0
        if tid in self.host_held:  # the simulator's host slot ends with its copy-in's end
            self.host_held.discard(tid)
            release = self.tensors[tid]["bytes"]
        self._queue_copy_in(tid, release)
        return copy

    def _queue_copy_in(self, tid, release):
        """A copy brought in was issued (the H2D stream's queue): its end lets `release` host
        bytes go."""
        self.h2d_queue.append((tid, release))
        self.h2d_queued[tid] = self.h2d_queued.get(tid, 0) + 1

    def _wait_copy_in(self, tid):
        """The first use of a copy brought in waits for its copy's end, and so for the end of
        every copy issued before it (one H2D stream): the host slots those copies end are let go
        here, as the simulator lets them go when the copy ends (Engine: a copy-in's end)."""
        if tid not in self.h2d_queued:
            return
        while True:
            done, release = self.h2d_queue.popleft()
            left = self.h2d_queued.pop(done) - 1
            if left:
                self.h2d_queued[done] = left
            self._account_host(-release)
            if done == tid:
                return

    def _let_go(self, tid):
        """The drop point of `tid`: its copy on the device (brought back, regenerated, or a kept
        map held for recomputations) and its host copy go."""
        if self.device.pop(tid, None) is not None:
            self.log.drop(tid)
        self.regenerated.discard(tid)
        self.host.pop(tid, None)

    def _forget(self, tid):
        """A regenerated copy of `tid` goes where the lowering frees its buffer after its last
        read, so no drop is logged (the log counts it to that read)."""
        self.device.pop(tid, None)
        self.regenerated.discard(tid)

    def regenerated_left_bytes(self):
        """Bytes of the copies recomputations wrote that the step still holds (at its end: 0,
        each let go where the lowering frees it)."""
        return sum(storage_bytes(self.device[t]) for t in self.regenerated if t in self.device)

    # ---- a device tensor over a map's whole storage ---------------------------------------
    def _materialize(self, tid):
        """A device tensor over the whole storage of `tid`: held, brought back or regenerated
        (a copy brought back waited for: its first use, an unpack's or a recomputation's)."""
        t = self.device.get(tid)
        if t is not None:
            if tid in self.h2d_queued:
                self._wait_copy_in(tid)
            if self.copies.cuda:
                self.copies.wait(t)
            return t
        if tid in self.host:
            copy = self._copy_in(tid)
            self._wait_copy_in(tid)
            self.copies.wait(copy)
            return copy
        return self._regenerate(tid)

    def _at_hand(self, tid):
        """Whether `tid` is on the device, bringing it back if it can be (as `_materialize`
        would, at the same point); False when it must be regenerated."""
        if tid in self.host and tid not in self.device:
            self._copy_in(tid)
        if tid in self.device:
            self._wait_copy_in(tid)
            return True
        return False

    def _regenerate(self, tid):
        """Regenerates `tid` (`regenerate`), an input gone when it is not `_at_hand`."""
        regenerate(tid, self._inputs_of, self._at_hand, self._rerun)
        return self.device[tid]

    def _inputs_of(self, tid):
        """The ids the producer of `tid` reads, in the order `_resolve` reads them."""
        _, args, kwargs, _, _ = self.recipes[self.tensors[tid]["producer"]]
        refs = []
        for value in (args, kwargs):
            _collect_refs(value, refs)
        return iter([ref.tid for ref in refs])

    def _rerun(self, tid):
        """Re-runs the producer of `tid` on its inputs, which are at hand (`_regenerate`), in the
        grad mode it first ran in (a kernel may look at it: torch 2's CPU LSTM layer,
        `mkldnn_rnn_layer`, returns the workspace backward needs only with grad enabled) on
        arguments detached from the graph (`_resolve`), so that it builds none; a random op under
        the RNG state it first ran with."""
        producer = self.tensors[tid]["producer"]
        func, args, kwargs, rng, grad_enabled = self.recipes[producer]
        written = _written_refs(func, args, kwargs)
        reads = []
        real_args = self._resolve(args, written, reads)
        real_kwargs = self._resolve(kwargs, written, reads)
        saved_rng = None
        if rng is not None:
            saved_rng = _rng_state(self.copies.cuda)
            _set_rng_state(rng)
        try:
            with torch.set_grad_enabled(grad_enabled):
                result = _call(func, real_args, real_kwargs)
        finally:
            if saved_rng is not None:
                _set_rng_state(saved_rng)
        self.recompute_ops += 1
        writes = []
        for out in self.ops[producer]["outputs"]:
            where, index = self.output_slot[out]
            if where == "written":
                value = written_arguments(func, real_args, real_kwargs)[index]
            else:
                value = flat_tensors(result, [])[index]
            value = _whole_storage(value)
            held = out not in self.device  # else a temporary copy: the one held stays
            writes.append((out, storage_bytes(value), self.tensors[out].get("in_place_of"),
                           held))
            if held:
                self.device[out] = value
                self.regenerated.add(out)
                if self.node_regenerated is not None:
                    self.node_regenerated.append(out)
        self.log.recompute(reads, writes)
        occurrence = self.reruns.get(producer, 0)
        self.reruns[producer] = occurrence + 1
        for tid in self.regenerated_frees.get((producer, occurrence), ()):
            if tid in self.regenerated:  # the lowering frees its copy after this re-run
                self._forget(tid)

    def _resolve(self, value, written, reads):
        if isinstance(value, _Ref):
            reads.append(value.tid)
            whole = self._materialize(value.tid).detach()
            if id(value) in written and value.tid in self.regenerated:
                # written over in place: the regenerated tensor becomes the op's output
                del self.device[value.tid]
                self.regenerated.discard(value.tid)
                return whole.as_strided(*value.geometry)
            base = whole.as_strided(*value.geometry)
            # Clone what the op writes that is held for another use, and persistent state but the
            # weights: native_batch_norm updates its running statistics (buffers) without marking
            # them written; no op writes a weight unmarked, and a clone of each at every re-run
            # was a good part of a recomputing step's overhead (issue 36).
            unmarked = value.tid in self.persistent and value.tid not in self.weights
            return base.clone() if id(value) in written or unmarked else base
        if isinstance(value, (list, tuple)):
            return type(value)(self._resolve(v, written, reads) for v in value)
        if isinstance(value, dict):
            return {k: self._resolve(v, written, reads) for k, v in value.items()}
        return value


class _PlanRecorder(_MovedMaps, StepRecorder):
    """The capture recorder, checking each op against the captured trace and acting on packs
    (the copies of the maps the plan moves: `_MovedMaps`)."""

    def __init__(self, model, optimizer, batch, trace, plan, cuda=False, host_state=None):
        self.expected = trace
        self.plan = plan
        # Host placement (Note [Host placement] in core/plan.hpp): the tensor objects of the
        # host-placed tensors (parameters, buffers, optimizer state, the batch's placeholders,
        # gradients once written), their host slots (`host_state`: kept from step to step for
        # parameters and optimizer state; a gradient's and the batch's for this step), the master
        # copies a host update keeps of the parameters that stay on the device, which of them have
        # a device copy now, and the copies brought in that no use has waited for yet (in issue
        # order: the H2D stream's queue).
        self.host_state = host_state if host_state is not None else HostState()
        self.objects = {}  # tensor id -> a tensor over its storage (host-placed, known)
        self.real_placed = set()  # host-placed tensors whose storage the step empties and fills
        self.resident_placed = set()  # host-placed tensors with a device copy now
        self.h2d_queue = collections.deque()  # (tensor id, host bytes its copy's end releases)
        self.h2d_queued = {}  # tensor id -> how many times it is in it
        self.host_op_ids = set()  # ops run on the host's copies
        self.recorder_bytes = {}  # host-placed pre-existing tensor id -> its captured bytes
        # op id -> (func, args, kwargs with _Ref, rng state or None, grad mode), for each forward
        # op of a plan that recomputes (the only one that re-runs ops)
        self.recipes = {}
        self.recomputes = "recompute" in plan.actions.values()
        # tensor id -> a device tensor over its whole storage: pre-existing tensors, kept maps (from
        # their pack), copies brought back and regenerated tensors (until the op after which the
        # captured trace no longer reads them, as the simulator's lowering drops them).
        self.device = {}
        self.regenerated = set()  # ids in self.device that a recomputation wrote
        # per_use: what recomputations regenerated since the last backward node ended
        self.node_regenerated = [] if plan.per_use else None
        self.host = {}  # tensor id -> host copy of its whole storage (swap)
        self.home = {}  # tensor id -> the device its swapped storage was copied out from
        self.encoded = {}  # tensor id -> its encoded copy on the device (encode:*, Encoded)
        self.spilled_bytes = 0  # sparse encodings' bytes beyond their planned buffers (host)
        self.host_held = set()  # swap copies not brought back yet (the simulator's host slots)
        self.releasing = set()  # swapped maps whose device buffers wait for their release point
        self.host_bytes = self.peak_host_bytes = 0
        self.copies = _Copies(cuda)
        self.log = StepLog()
        self.recompute_ops = 0
        self.reruns = {}
        self.regenerated_frees = plan.regenerated_frees
        self.prefetched_through = -1  # prefetches issued for the ops up to this one
        self.output_slot = {}  # tensor id -> ("written" | "result", index) in its op's call
        # version -> the version forward writes over it next, in the captured trace
        self.written_over = {t["in_place_of"]: t["id"] for t in trace["tensors"]
                             if t.get("in_place_of") is not None and
                             trace["ops"][t["producer"]]["phase"] == "forward"}
        self.unwritten = {}  # swapped map -> its storage, packed before forward has written it
        self.packed = set()  # maps autograd packed in forward
        self.value_read = None  # the last op that read a tensor's value into Python
        super().__init__(model, optimizer, batch, cuda)
        # the model's parameters, less any storage a buffer shares: no op writes them without its
        # schema saying so (`_resolve`)
        self.weights = {self.tensor_id(p) for p in model.parameters()} - \
            {self.tensor_id(b) for b in model.buffers()}
        # Host slots of the plan's pre-existing host-placed tensors, which the step finds there:
        # held for the whole step, as the simulator counts them (Engine::run: resident slots).
        resident = sum(trace["tensors"][t]["bytes"] for t in self.plan.host_tensors
                       if trace["tensors"][t]["producer"] is None)
        self.host_bytes = self.peak_host_bytes = resident
        # op id -> host bytes of the update's temporaries it makes, and that go after it
        self.temporaries_made, self.temporaries_done = \
            host_temporaries(trace) if plan.host_update else ({}, {})

    def _new_tensor(self, t, name, kind, producer, in_place_of=None):
        tid = super()._new_tensor(t, name, kind, producer, in_place_of)
        if tid in self.plan.host_tensors and producer is None and tid < len(
                self.expected["tensors"]):
            # its storage may be on the host already (emptied on the device by an earlier step)
            record, captured = self.tensors[tid], self.expected["tensors"][tid]
            record["bytes"] = captured["bytes"]
            if "shape" in captured:
                record["shape"] = captured["shape"]
        return tid

    def _pre_existing(self, t, name, kind, persistent):
        self.held_device = t.device
        tid = super()._pre_existing(t, name, kind, persistent)
        if tid in self.plan.host_tensors and self.phase is None:
            self.objects.setdefault(tid, t)  # its storage goes to the host (offload)
        elif tid not in self.device:
            self.paused += 1
            self.device[tid] = _whole_storage(t)
            self.paused -= 1
        return tid

    # ---- host placement ------------------------------------------------------------------
    def offload(self):
        """Before the step: each host-placed tensor the recorder knows (parameters, buffers,
        optimizer state, the batch) lives in its host slot, its device storage empty (the first
        step moves it there; the slots stay for the next step), and an update on the host has a
        master copy of each parameter it reads that stays on the device. A host-placed tensor
        the step makes before its first use (a constant the loss closes over, a GradScaler's
        state) is carried out in the accounting only: its data stays where PyTorch made it."""
        state = self.host_state
        for tid, t in self.objects.items():
            self.real_placed.add(tid)
            if tid not in state.slots:
                state.slots[tid] = self.copies.slot_of(_whole_storage(t))
                state.objects[tid] = t
            untyped_storage(t).resize_(0)
        if self.plan.host_update:
            for op in self.expected["ops"]:
                if op["phase"] != "update":
                    continue
                for tid in op["inputs"]:
                    if tid in self.plan.host_tensors or tid in state.masters or \
                            self.expected["tensors"][tid]["kind"] != "parameter":
                        continue
                    state.masters[tid] = self.copies.slot_of(self.device[tid])

    def _placed_bytes(self, tid):
        return self.expected["tensors"][tid]["bytes"]

    def _host_copy_in(self, tid):
        """A device copy of host-placed `tid` from its slot (the lowering's issue_prefetch): its
        storage filled again and counted from here, its copy's end waited for at its first use."""
        nbytes = self._placed_bytes(tid)
        if tid in self.real_placed:
            slot = self.host_state.slots.get(tid, self.host_state.gradients.get(tid))
            self.copies.refill(self.objects[tid], nbytes, slot)
        self.resident_placed.add(tid)
        self.log.copy_in(tid, nbytes)
        # a gradient's slot (not one the step starts with) ends with its copy-in
        resident = self.expected["tensors"][tid]["producer"] is None
        self._queue_copy_in(tid, 0 if resident else nbytes)

    def _use_placed(self, tid):
        """Host-placed `tid` read on the device now (an op's input, a recomputation's): brought
        in when it has no device copy (the lowering's on-demand prefetch), its copy waited for."""
        if tid not in self.resident_placed:
            self._host_copy_in(tid)
        self._wait_copy_in(tid)
        if tid in self.real_placed:
            whole = _whole_storage(self.objects[tid])
            self.copies.wait(whole)
            return whole
        return self.device[tid]

    def _host_drop(self, tid, op_id):
        """After the last use of a group of uses of host-placed `tid` (the lowering's host_drop):
        an update on the device wrote a parameter or optimizer state, and batch norm writes its
        buffers in forward without its schema saying so: they are copied back into their slot;
        then the device storage is emptied. A gradient's device copy is held until here (logged
        as a read: the lowering waits for its copy-out here)."""
        if tid not in self.resident_placed:
            return
        self.resident_placed.discard(tid)
        record = self.expected["tensors"][tid]
        if record["producer"] is not None:
            self.log.release(tid)
        if tid not in self.real_placed:
            return
        t = self.objects[tid]
        phase = self.plan.host_group_phase.get((tid, op_id))
        if record["producer"] is None and (phase == "update" or tid in self.host_state.buffers):
            self.copies.write_back(self.host_state.slots[tid], _whole_storage(t))
        untyped_storage(t).resize_(0)

    def _copy_out_gradient(self, tid, tensors):
        """A host-placed gradient goes to its slot as soon as its op has written it."""
        found = next((t for t in flat_tensors(tensors, [])
                      if self.current.get(self.storage_key(t)) == tid), None)
        if found is None:
            raise PlanError(f"tensor '{self.expected['tensors'][tid]['name']}': the plan places "
                            "it on the host, and its op gave no tensor of its storage")
        # Another tensor over its storage, not the op's result itself: autograd's AccumulateGrad
        # takes a gradient as the parameter's .grad only when nothing else holds it (else it
        # clones it: another op than the captured step's).
        whole = _whole_storage(found)
        self.objects[tid] = whole
        self.real_placed.add(tid)
        self.resident_placed.add(tid)
        self.host_state.gradients[tid] = self.copies.copy_out(whole)
        self.host_state.objects[tid] = whole
        self._account_host(self._placed_bytes(tid))

    def _check_placed_inputs(self, func, args, kwargs):
        """Before an op on the device: each host-placed tensor it reads has a device copy (the
        plan's prefetch, or one made now as the lowering makes one on demand), waited for."""
        if op_schema(func).name in _METADATA_READERS:
            return
        for t in flat_tensors(args, flat_tensors(kwargs, [])):
            tid = self.current.get(self.storage_key(t))
            if tid is None or tid not in self.plan.host_tensors:
                continue
            self._use_placed(tid)

    def run_op(self, func, args, kwargs):
        """An update op of a plan that runs the update on the host runs on the host's copies:
        each host-placed tensor's slot (its gradient's, optimizer state's, parameter's) and each
        other parameter's master copy, in the argument's own geometry; a result that is one of
        them (an in-place op returns its argument) is given back as the argument it stands for.
        After it, each parameter that stays on the device gets its master copied back."""
        if not (self.plan.host_update and self.phase == "update" and not self.paused):
            return super().run_op(func, args, kwargs)
        self.paused += 1
        try:
            self.copies.before_host_op()
            stands_for = {}
            masters = []

            def host(value):
                if isinstance(value, torch.Tensor):
                    tid = self.current.get(self.storage_key(value))
                    slot = self._host_slot(tid)
                    if slot is None:
                        return value
                    self.copies.host_ready(slot)
                    if tid in self.host_state.masters:
                        masters.append(tid)
                    view = slot.as_strided(value.shape, value.stride(), value.storage_offset())
                    stands_for[id(view)] = value
                    return view
                if isinstance(value, (list, tuple)):
                    return type(value)(host(v) for v in value)
                if isinstance(value, dict):
                    return {k: host(v) for k, v in value.items()}
                return value

            result = super().run_op(func, host(args), host(kwargs))

            def back(value):
                if isinstance(value, torch.Tensor):
                    return stands_for.get(id(value), value)
                if isinstance(value, (list, tuple)):
                    return type(value)(back(v) for v in value)
                return value

            for tid in dict.fromkeys(masters):
                self.copies.copy_to_device(self.device[tid], self.host_state.masters[tid])
            return back(result)
        finally:
            self.paused -= 1

    def _host_slot(self, tid):
        """The host copy an update on the host reads for `tid`, or None (not a host copy)."""
        if tid is None:
            return None
        if tid in self.real_placed:
            return self.host_state.slots.get(tid, self.host_state.gradients.get(tid))
        return self.host_state.masters.get(tid)

    # ---- ops: record a recipe, compare with the captured trace ------------------------------
    def dispatch(self, func, args, kwargs):
        if self.paused or self.phase is None:
            return super().dispatch(func, args, kwargs)
        op_id = len(self.ops)
        recipe = None
        if self.phase == "forward" and self.recomputes:
            rng = None
            if _is_random(func):
                self.paused += 1
                rng = _rng_state(self.clock.cuda)
                self.paused -= 1
            recipe = (func, self._refs(args), self._refs(kwargs), rng, torch.is_grad_enabled())
        host_op = self.plan.host_update and self.phase == "update"
        self.paused += 1
        try:
            self._prefetch_through(op_id)
            if self.plan.host_tensors and not host_op:
                self._check_placed_inputs(func, args, kwargs)
        finally:
            self.paused -= 1
        if host_op:  # on the host's copies; its temporaries are host memory while it runs
            self.host_op_ids.add(op_id)
            self._account_host(self.temporaries_made.get(op_id, 0))
        result = super().dispatch(func, args, kwargs)
        if host_op:
            self._account_host(-self.temporaries_done.get(op_id, 0))
        if recipe is not None:
            self.recipes[op_id] = recipe
        forward = self.phase == "forward"
        kept, copied = [], []
        for t in self.ops[op_id]["outputs"]:
            action = self.plan.actions.get(t)
            if forward and action == "keep" and t not in self.device:
                kept.append(t)
            # the lowering's copy-outs after the op: swapped maps (once forward has written them)
            # and host-placed gradients, in output order
            if t not in self.host and (t in self.unwritten or t in self.plan.host_tensors or
                                       (forward and action == "swap")):
                copied.append(t)
        if copied or kept or op_id in self.plan.forward_drops or \
                op_id in self.plan.host_drop_after:
            self.paused += 1
            try:
                tensors = (args, kwargs, result)
                for tid in copied:
                    if tid in self.unwritten:  # now it is the map the plan swaps
                        self._copy_out(tid, self.unwritten.pop(tid))
                    elif tid in self.plan.host_tensors:
                        self._copy_out_gradient(tid, tensors)
                    else:
                        self._copy_out_written(tid, tensors)
                for tid in kept:  # at hand for recomputations, packed or held by the step
                    self._hold(tid, tensors)
                if op_id in self.plan.forward_drops:
                    self._forward_drops(op_id, tensors)
                for tid in self.plan.host_drop_after.get(op_id, ()):
                    self._host_drop(tid, op_id)
            finally:
                self.paused -= 1
        for tid in self.plan.drop_after.get(op_id, ()):  # the trace reads them no more
            if tid not in self.persistent and self.tensors[tid]["kind"] == "activation":
                self._let_go(tid)
        if self.node_regenerated is not None and op_id in self.plan.node_ends:
            self._forget_per_use()
        return result

    def _forget_per_use(self):
        """After a backward node's last op (Lowerer::forget_per_use): when the node regenerated a
        map the plan recomputes per use, that map and the intermediates regenerated to make it
        are let go (autograd lets go of the node's unpacked copy as the node returns), so the
        next node that reads it regenerates it; maps recomputed once stay. No drop is logged:
        each buffer counts to its last read, as the lowering frees it after its last reference
        (the node's last op reads the map itself; what was regenerated on the way, the
        regeneration that read it last)."""
        regenerated, self.node_regenerated = self.node_regenerated, []
        if any(tid in self.plan.per_use for tid in regenerated):
            for tid in regenerated:
                if tid in self.plan.per_use or tid not in self.plan.actions:
                    self._forget(tid)

    def _forward_drops(self, op_id, tensors):
        """The lowering's forward drops after op `op_id`, in its order: an encoded map (taken
        from the op's arguments or results when autograd has not packed it yet) is encoded and
        let go; a swapped map's buffer is let go once its copy-out has read it (logged as a read:
        it is held until then, as the simulator holds it until it has waited for the copy)."""
        for tid, action in self.plan.forward_drops[op_id]:
            if action == "swap":
                self.releasing.add(tid)
                if tid not in self.plan.released_late:
                    self._release(tid)
                continue
            if tid not in self.device and tid not in self.encoded:
                self._hold(tid, tensors)
            if tid in self.device:
                self._encode(tid)

    def _copy_out_written(self, tid, tensors):
        """A swapped map is copied out as soon as its op has written it (the lowering's copy-out
        after its producer), whenever autograd packs it."""
        found = next((t for t in flat_tensors(tensors, [])
                      if self.current.get(self.storage_key(t)) == tid), None)
        if found is not None:
            self._copy_out(tid, _whole_storage(found))

    def _hold(self, tid, tensors):
        """Holds the storage of `tid` from among an op's arguments and results (`tensors`), if
        it is there, as a device tensor over all of it."""
        found = next((t for t in flat_tensors(tensors, [])
                      if self.current.get(self.storage_key(t)) == tid), None)
        if found is not None:
            self.device[tid] = _whole_storage(found)

    def _prefetch_through(self, op_id):
        """Issues the copies the plan brings back before ops up to `op_id`: called before op
        `op_id` runs and before an autograd node unpacks what it saved, so a prefetch comes after
        the previous op's copy-outs (its outputs are packed once it has returned) and before the
        recomputations for op `op_id`, as in the simulator."""
        while self.prefetched_through < op_id:
            self.prefetched_through += 1
            for tid in self.plan.release_before.get(self.prefetched_through, ()):
                self._release(tid)
            for tid in self.plan.prefetch_before.get(self.prefetched_through, ()):
                if tid not in self.device and tid in self.host:
                    self._copy_in(tid)
            for tid in self.plan.host_prefetch_before.get(self.prefetched_through, ()):
                if tid not in self.resident_placed:
                    self._host_copy_in(tid)

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
        if op["id"] in self.host_op_ids:
            self.log.host_op(op["id"])  # on the host's copies: no device buffer
        else:
            self.log.op(op["id"])
        if op["outputs"]:  # where the op gave each output: its first tensor of that storage
            made = set(op["outputs"])
            for where, tensors in (("written", written), ("result", outputs)):
                for index, (_, key) in enumerate(tensors):
                    tid = self.current.get(key)
                    if tid in made:
                        self.output_slot[tid] = (where, index)
                        made.discard(tid)
        ops = self.expected["ops"]
        want = ops[op["id"]] if op["id"] < len(ops) else None
        if want is None or (want["layer"], want["phase"], want["outputs"]) != \
                (op["layer"], op["phase"], op["outputs"]):
            what = f"'{want['name']}' ({want['layer']})" if want else "no more ops"
            raise PlanError(f"op {op['id']} is '{op['name']}' ({op['layer']}) here and {what} in "
                            f"the captured trace: {self._why_another_step(op, want)}")
        if op_schema(func).name in _VALUE_READS:
            self.value_read = op
        return op

    def finish(self):
        super().finish()
        self.paused += 1
        try:  # a device copy the plan left (one made on demand) goes: the step ends on the host
            for tid in sorted(self.resident_placed & self.real_placed):
                t = self.objects[tid]
                if tid in self.host_state.buffers:
                    self.copies.write_back(self.host_state.slots[tid], _whole_storage(t))
                untyped_storage(t).resize_(0)
            self.resident_placed.clear()
            self.copies.end_of_step()
        finally:
            self.paused -= 1
        ops = self.expected["ops"]
        if len(self.ops) < len(ops):
            want = ops[len(self.ops)]
            raise PlanError(f"the step ended after {len(self.ops)} ops, and the captured trace goes "
                            f"on with op {want['id']} '{want['name']}' ({want['layer']}): "
                            f"{self._why_another_step(None, want)}")

    def _why_another_step(self, op, want):
        """Why the step's ops are not the captured ones, from what else could differ: the model's
        parameters and buffers, the batch's shapes and the optimizer's state are the captured ones
        (checked before the step), so an update op points at the optimizer's options, a value
        read into Python before (`.item()`, `if tensor:`) at a branch on data, and anything else
        at the code of the model or its loss."""
        phases = {want["phase"] if want else None, op["phase"] if op else None}
        if "update" in phases:
            return ("the optimizer step differs from the captured one (another optimizer, or "
                    "other options), or the step ran another number of backward passes "
                    "(micro-batches) before it")
        if self.value_read is not None:
            read = self.value_read
            return (f"the step took another path after op {read['id']} '{read['name']}' read a "
                    "tensor's value into Python (a branch on the data: the plan is for the path "
                    "the captured step took)")
        return ("the step's code differs from the captured one (the model's forward, its loss, or "
                "the training step itself: capture's `step`, `--step`; its parameters, buffers, "
                "batch shapes and optimizer state are the captured ones)")

    # ---- packs and unpacks ------------------------------------------------------------------
    def saved_version(self, tid):
        """A pack in forward of a version that forward writes over later through a view
        autograd does not see (StepRecorder._rewrite_saved) stands for the newest version: the
        map of the captured trace, which the plan acts on."""
        if self.phase == "forward":
            while tid in self.written_over:
                tid = self.written_over[tid]
        return tid

    def on_pack(self, t, tid):
        self.paused += 1
        try:
            return self._pack_as_planned(t, tid)
        finally:
            self.paused -= 1

    def begin_phase(self, phase):
        if phase == "backward":
            self._refuse_what_autograd_did_not_pack()
        super().begin_phase(phase)

    def phase_after_backward(self):
        """The captured trace's phase after this backward pass: the next micro-batch's forward,
        or the update (gradient accumulation: capture._phases)."""
        ops = self.expected["ops"]
        following = ops[len(self.ops)]["phase"] if len(self.ops) < len(ops) else "update"
        return "forward" if following == "forward" else "update"

    def _refuse_what_autograd_did_not_pack(self):
        """A map forward held beside autograd's saved tensors (StepRecorder.held: the inputs of
        torch 1.13's non-reentrant checkpoint, kept in its closure) never reaches the hooks, so
        only keep can be carried out on it: PlanError (one line) for any other action, before
        the backward pass that reads it starts (a later micro-batch's maps are not made yet)."""
        for tid, action in sorted(self.plan.actions.items()):
            if action != "keep" and tid not in self.packed and tid < len(self.tensors):
                name = self.expected["tensors"][tid]["name"]
                raise PlanError(f"tensor '{name}': the plan says {action}, but the step holds it "
                                "for backward outside autograd's saved tensors (a "
                                "torch.utils.checkpoint block's input, torch 1.13), where the "
                                "saved-tensor hooks cannot reach it: only keep can be carried out")

    def _pack_as_planned(self, t, tid):
        if self.phase == "forward":
            self.packed.add(tid)
        action = self.plan.actions.get(tid, "keep")
        if tid in self.persistent or self.expected["tensors"][tid]["kind"] != "activation":
            action = "keep"
        if action == "swap":
            if tid >= len(self.tensors):  # a version forward has yet to write: copied then
                self.unwritten.setdefault(tid, _whole_storage(t))
            elif tid not in self.host and tid not in self.device:
                self._copy_out(tid, _whole_storage(t))
            return ("swap", _geometry(t))
        if action == "recompute":
            return ("recompute", _geometry(t))
        if action.startswith("encode:"):  # held until its last forward reader, then encoded
            if tid not in self.device and tid not in self.encoded:
                self.device[tid] = _whole_storage(t)
                if len(self.ops) - 1 >= self.plan.encode_at[tid]:  # packed after its last reader
                    self._encode(tid)  # (an output autograd saves once its op has returned)
            return ("encode", _geometry(t))
        if tid not in self.device and tid not in self.plan.host_tensors:
            self.device[tid] = _whole_storage(t)
        return ("keep", t)

    def on_unpack(self, payload, tid):
        how, value = payload
        if how == "keep":
            return value
        self.paused += 1
        try:
            self._prefetch_through(len(self.ops))
            result = self._materialize(tid)
            self.copies.wait(result)
            result = result.as_strided(*value)
            # the copy stands for the saved storage: the same trace tensor
            self.current[self.storage_key(result)] = tid
        finally:
            self.paused -= 1
        return result

    def _let_go(self, tid):
        super()._let_go(tid)
        self.encoded.pop(tid, None)

    def _materialize(self, tid):
        """`_MovedMaps._materialize`, for a host-placed tensor its device copy, and for an
        encoded map its decoded copy."""
        if tid in self.plan.host_tensors:
            return self._use_placed(tid)
        if tid in self.encoded and tid not in self.device:
            return self._decode(tid)
        return super()._materialize(tid)

    def _at_hand(self, tid):
        """`_MovedMaps._at_hand`, bringing a host-placed tensor in and decoding an encoded
        map."""
        if tid in self.plan.host_tensors:
            self._use_placed(tid)
            return True
        if tid in self.encoded and tid not in self.host and tid not in self.device:
            self._decode(tid)
        return super()._at_hand(tid)

    def _encode(self, tid):
        """Encodes a map on the device as the plan says and lets the float32 buffer go (the
        lowering's forward drop of an encoded map and its Encode)."""
        full = self.device.pop(tid)
        scheme = self.plan.actions[tid].partition(":")[2]
        encoded = encode_map(full.reshape(-1), scheme)
        self.encoded[tid] = encoded
        if encoded.spilled is not None:
            self.spilled_bytes += encoded.spilled.numel()
        self.log.recompute([tid], [(("encoded", tid), encoded.nbytes, None, True)])

    def _decode(self, tid):
        """Decodes an encoded map into a float32 buffer of its own before its first backward
        reader (the lowering's Decode); it is held to the drop point."""
        full = decode_map(self.encoded[tid])
        self.device[tid] = full
        self.log.recompute([("encoded", tid)], [(tid, storage_bytes(full), None, True)])
        return full

class HostState:
    """What a plan keeps on the host from step to step (Note [Host placement] in core/plan.hpp):
    the host slots of its host-placed parameters, buffers and optimizer state (their device
    storages empty between steps), the master copies an update on the host keeps of the
    parameters that stay on the device, and the last step's host-placed gradients and batch."""

    def __init__(self, buffers=()):
        self.slots = {}  # tensor id -> host slot (a tensor over its whole storage)
        self.objects = {}  # tensor id -> the tensor whose device storage is emptied and filled
        self.masters = {}  # parameter id -> its master copy on the host (an update on the host)
        self.gradients = {}  # gradient id -> its host slot (the last step's)
        self.per_step = set()  # ids of the batch's tensors: slots for one step
        self.buffers = set(buffers)  # ids of the model's buffers (batch norm writes in forward)


def _rebuild(value, tensors):
    """`value` (a nested batch) with its tensors replaced, in flat_tensors order, by `tensors`."""
    if isinstance(value, torch.Tensor):
        return next(tensors)
    if isinstance(value, (list, tuple)):
        return type(value)(_rebuild(v, tensors) for v in value)
    if isinstance(value, dict):
        return {k: _rebuild(v, tensors) for k, v in value.items()}
    return value


class PlannedModel:
    """`apply`'s result: `step(batch, loss_fn, optimizer)` runs one training step under the plan
    (the captured one: `training_step`, the user's own or memplan.torch.capture.default_step) and
    returns its loss; `stats` holds what the last step measured (recorded or steady), and
    `last_step` its saved-bytes log and the trace to walk it on (saved_bytes.curve). The first step
    runs under the recorder; the steps after it run the plan through saved-tensor hooks alone where
    they can (memplan.torch.steady: `steady`, `steady_steps`, `recorded_steps`, `steady_reason`,
    `stats["steady"]`).

    A plan that places parameters, buffers or optimizer state on the host keeps them there from
    step to step: between steps their tensors have empty storages (their values are in host
    slots), and the last step's host-placed gradients are on the host too. `restore()` brings them
    all back to their tensors (before reading the model's weights or gradients, saving a
    checkpoint, or training without the plan); the next step moves them to the host again."""

    def __init__(self, model, trace, schedule, training_step=None):
        from memplan.torch.steady import SteadyPath  # it builds on this module's recorder
        self.model, self.trace, self.schedule = model, trace, schedule
        self.training_step = training_step
        self.stats = {}
        # The steps after a recorded one run on the steady path (memplan.torch.steady) where
        # they can: `steady = False` records every step; `steady_steps` and `recorded_steps`
        # count the steps each way, `steady_reason` says why a plan's steps are all recorded.
        self.steady = True
        self.steady_steps = self.recorded_steps = 0
        self._steady = SteadyPath(self)
        self._feature_map_buffers = None  # the captured trace's, computed at the first step
        buffers = {name for name, _ in model.named_buffers()}
        self.host_state = HostState(t["id"] for t in trace["tensors"]
                                    if t["kind"] == "parameter" and t["name"] in buffers)

    def restore(self):
        """Brings every host-placed tensor's value back into its tensor's device storage (see the
        class's docstring) and lets the host copies go."""
        state = self.host_state
        for slots in (state.slots, state.gradients):
            for tid, slot in slots.items():
                if tid in state.per_step:
                    continue
                t = state.objects[tid]
                if storage_bytes(t) == 0:
                    untyped_storage(t).resize_(self.trace["tensors"][tid]["bytes"])
                    _whole_storage(t).detach().copy_(slot)
            slots.clear()
        state.objects.clear()
        state.masters.clear()
        state.per_step.clear()
        if any(p.is_cuda for p in self.model.parameters()):
            torch.cuda.synchronize()

    def _placed_batch(self, batch, cuda):
        """The batch the planned step runs on: each of its tensors the plan places on the host is
        a view of a placeholder on the model's device whose storage is empty until a group of its
        uses needs it, its values in a host slot (the user's batch is not changed)."""
        placed = self.schedule.host_tensors
        if not placed:
            return batch
        state = self.host_state
        names = {t["name"]: t["id"] for t in self.trace["tensors"] if t["kind"] == "input"}
        device = next((p.device for p in self.model.parameters()), None)
        first, placeholders, tensors = {}, {}, []
        for i, t in enumerate(flat_tensors(batch, [])):
            key = untyped_storage(t)._cdata
            first.setdefault(key, i)
            tid = names.get(f"batch.{first[key]}")
            if tid not in placed:
                tensors.append(t)
                continue
            if key not in placeholders:
                whole = _whole_storage(t)
                placeholders[key] = torch.empty_like(whole, device=device or whole.device)
                state.slots[tid] = (whole.detach().to("cpu", copy=True) if not cuda else
                                    whole.detach().to("cpu").pin_memory())
                state.per_step.add(tid)
            tensors.append(placeholders[key].as_strided(t.shape, t.stride(), t.storage_offset()))
        for placeholder in placeholders.values():
            untyped_storage(placeholder).resize_(0)
        return _rebuild(batch, iter(tensors))

    @property
    def steady_reason(self):
        """Why this plan's steps are all recorded (memplan.torch.steady), or None: known once a
        step has been recorded, but for host placement and encodings."""
        return self._steady.reason

    def step(self, batch, loss_fn, optimizer):
        batch = tuple(batch)
        if self.steady:
            ran, loss = self._steady.step(batch, loss_fn, optimizer, self.training_step)
            if ran:
                self.steady_steps += 1
                return loss
        check_batch(batch, self.trace)
        cuda = any(p.is_cuda for p in self.model.parameters())
        state = self.host_state
        for tid in state.per_step:  # the last step's batch
            state.slots.pop(tid, None)
            state.objects.pop(tid, None)
        state.per_step.clear()
        state.gradients.clear()
        batch = self._placed_batch(batch, cuda)
        recorder = self._steady.recorder_type()(self.model, optimizer, batch, self.trace,
                                                self.schedule, cuda, state)
        check_optimizer_state(recorder.tensors, self.trace)
        recorder.offload()
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        try:
            loss = run_step(self.model, batch, loss_fn, optimizer, recorder, self.training_step)
        except BaseException:
            if self.schedule.host_tensors:
                self.restore()  # the values are in their host slots: none is left empty
            raise
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        step_trace = recorder.trace(self.trace["device"], self.trace["provenance"])
        self.last_step = (recorder.log, step_trace)  # what the step ran, for saved_bytes.curve
        if self._feature_map_buffers is None:
            maps, buffers = feature_map_buffers(self.trace)
            # the device copies of host-placed tensors are counted beside the maps' buffers
            self._feature_map_buffers = maps, buffers | self.schedule.host_tensors
        self.stats = {"peak_saved_bytes": peak(recorder.log, step_trace, self._feature_map_buffers),
                      "peak_host_bytes": recorder.peak_host_bytes,
                      "recomputed_ops": recorder.recompute_ops, "step_seconds": seconds,
                      "regenerated_left_bytes": recorder.regenerated_left_bytes(),
                      "sparse_spilled_bytes": recorder.spilled_bytes, "steady": False}
        self.recorded_steps += 1
        self._steady.learn(recorder, batch, loss_fn, optimizer)
        return loss


def apply(model, plan, captured, *, step=None):
    """Checks `plan` (a dict in plan format v1, or a memplan.Plan) against `captured` (a Capture
    or its trace dict) and `model`, and returns a PlannedModel; PlanError (one line) when they do
    not belong together. `step`: the training step `captured` recorded, when it was the user's
    own (capture's `step`)."""
    trace = captured.trace if hasattr(captured, "trace") else captured
    schedule = plan_schedule(plan, trace)
    model = step_module(model)
    check_model(model, trace)
    return PlannedModel(model, trace, schedule, step)
