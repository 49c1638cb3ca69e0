"""The saved-bytes peak: one quantity that `apply` measures and the simulator predicts.

What: the most bytes held at once on the device by the step's feature-map buffers (the storages of
the activations autograd saved, with the versions written over them in place) and by the copies a
plan makes of them (a swapped map brought back, a map or an intermediate recomputed, a map's
encoded copy in sim::encoded_bytes's size and the map decoded from it), and by the device copies
of the tensors a plan places on the host (Note [Host placement]: a parameter's, optimizer state's
or batch tensor's copy for a group of its uses, a gradient from its op to its drop point and its
copy brought back for an update on the device). A buffer is
held from the op that writes it, or from the copy that brings it back, to the last op that reads
it; ops run one after another, and an op holds its inputs and its outputs at once.

Why this way: it is the simulator's device timeline restricted to these buffers. The lowering
(sim/lowering.cpp) allocates a buffer before the op that writes it (a prefetch before the op the
plan names, a recomputation before the backward op that needs it), frees it after its last
reference, and keeps a swapped buffer until its copy-out is done and its last forward reader has
run; the engine applies the compute stream's allocations and frees in order, so the peak depends on
that order only, not on durations. `memplan.torch.validate` predicts it by simulating the plan in
process (memplan._core) on the captured trace with every other tensor at 0 bytes (the host-placed
ones keep theirs). Which tensors
are feature maps, and which tensor allocates each one's buffer, is the simulator's answer too
(`memplan.Trace.feature_maps`, `storage_roots`), so both sides count the same buffers.

How (measured): `apply` logs the step as it runs it: every op the recorder sees ("op", its id;
"host_op" for one an update on the host runs on host copies, which reads no device buffer), every
op a recomputation re-runs ("recompute", what it read and wrote), every buffer it holds until a
point and then lets go ("release": a swapped map's device buffer, a host-placed tensor's device
copy), every copy it brings to the device ("copy_in", before which op) and every copy it lets go
of ("drop"). `peak(...)` walks that log once the step is over (the backward ops' inputs are
complete only when their autograd node has finished): each entry but a copy_in and a drop is one
position; a buffer lives from the position that writes it to the last position that reads it, or
to the position of its drop when that comes later. A steady step (memplan.torch.steady) logs its
copies, recomputations and drops at the points its hooks see, and its log is walked the same way
among the recorded step's ops.
"""

from memplan.torch.capture import memplan_trace


def feature_maps(trace):
    """Ids of the feature maps of `trace` (a Capture or a trace dict): activations written in
    forward and read in backward (sim::find_feature_maps)."""
    return memplan_trace(trace).feature_maps()


def feature_map_buffers(trace):
    """The feature maps of `trace`, and the ids of the tensors that allocate their buffers: the
    roots of the maps' in-place chains (a map written over an earlier version lives in that
    version's buffer)."""
    parsed = memplan_trace(trace)
    maps, roots = parsed.feature_maps(), parsed.storage_roots()
    return set(maps), {roots[t] for t in maps}


class StepLog:
    """What a planned step ran, in order (see the module's docstring)."""

    def __init__(self):
        self.entries = []

    def _add(self, entry):
        self.entries.append(entry)

    def op(self, op_id):
        self._add(("op", op_id))

    def recompute(self, reads, writes):
        """`reads`: tensor ids; `writes`: (tensor id, storage bytes, in_place_of or None, held:
        whether the step keeps what it wrote as the tensor's copy, else it is a temporary)."""
        self._add(("recompute", list(reads), list(writes)))

    def release(self, tensor_id):
        """A buffer the step holds until here, then lets go (a swapped map's device buffer once
        its copy-out has read it, a host-placed tensor's device copy): one position reading it."""
        self._add(("release", tensor_id))

    def drop(self, tensor_id):
        """The step lets go of its copy of `tensor_id` here (a map brought back or regenerated,
        a kept map held for recomputations): its buffer is held at least to the last position so
        far. No position of its own: where the drop follows the last read, as the lowering's
        does, it changes nothing; a later one holds the buffer longer."""
        self._add(("drop", tensor_id))

    def copy_in(self, tensor_id, nbytes):
        self._add(("copy_in", tensor_id, nbytes))

    def host_op(self, op_id):
        """An op run on the host's copies (an update on the host): one position, reading and
        writing no device buffer."""
        self._add(("host_op", op_id))


def peak(log, trace, known=None):
    """The saved-bytes peak of the step `log` recorded; `trace` is the step's own trace (a trace
    dict: its ops with their final inputs, its tensors' bytes). `known`: feature_map_buffers of
    the trace when the caller has it (a planned step's are its capture's: the step runs the
    captured ops on the captured tensors), which spares parsing the trace every step."""
    return max(curve(log, trace, known), default=0)


def curve(log, trace, known=None):
    """The bytes held at each position of `log` (see peak)."""
    maps, buffers = known or feature_map_buffers(trace)
    tensors, ops = trace["tensors"], trace["ops"]
    first, last, size = [], [], []
    loc = {}  # tensor id -> the buffer holding it now (None: a buffer of 0 bytes)
    position = -1

    def new_buffer(nbytes, at):
        first.append(at)
        last.append(at)
        size.append(nbytes)
        return len(size) - 1

    for entry in log.entries:
        kind = entry[0]
        if kind == "copy_in":  # held from the next position on
            loc[entry[1]] = new_buffer(entry[2], position + 1)
            continue
        if kind == "drop":
            b = loc.get(entry[1])
            if b is not None and position > last[b]:
                last[b] = position
            continue
        position += 1
        if kind == "host_op":
            continue
        if kind == "op":
            op = ops[entry[1]]
            reads = op["inputs"]
            writes = [(o, tensors[o]["bytes"], tensors[o].get("in_place_of"), True)
                      for o in op["outputs"]]
        elif kind == "release":
            reads, writes = (entry[1],), ()
        else:
            reads, writes = entry[1], entry[2]
        for t in reads:
            if loc.get(t) is not None:
                last[loc[t]] = position
        for t, nbytes, base, held in writes:
            if base is not None:  # written over its base: the base's buffer
                b = loc.pop(base, None)
            else:
                # a map's buffer, a map decoded into a buffer of its own, an encoded copy
                sized = t in buffers or t in maps or isinstance(t, tuple)
                b = new_buffer(nbytes, position) if sized else None
            if b is not None:
                last[b] = position
            if held:
                loc[t] = b
    change = [0] * (position + 2)
    for f, l, n in zip(first, last, size):
        change[f] += n
        change[l + 1] -= n
    held, result = 0, []
    for delta in change[:-1]:
        held += delta
        result.append(held)
    return result
