"""`apply`: carry out a memplan plan in a PyTorch training step, through autograd's pack/unpack hooks.

What: `apply(model, plan, captured)` checks that the plan was made on `captured`'s trace (its
workload fingerprint) and that `model` is the captured model (parameter names and shapes), and
returns a `PlannedModel` whose `step(batch, loss_fn, optimizer)` runs one training step with the
plan's decisions carried out on every feature map autograd saves:
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
  (`release_before`, Note [Release point] in sim/plan.hpp) or a copy back, whichever is first.
- recompute: the pack hook keeps only the map's id; the unpack re-runs the producing aten op from
  its arguments recorded as trace tensor ids, recursively for inputs that are neither held nor
  brought back, under the RNG state (CPU, and CUDA for CUDA tensors) the op first ran with, on
  clones of parameters and buffers and of arguments it writes that are held for another use (a
  regenerated input written over in place becomes the output, as the lowering's buffer does).
- every copy brought back or regenerated is held until the op after which the captured trace no
  longer reads it (the simulator's drop point); a regenerated intermediate nothing reads again in
  the trace stays for later recomputations, as the lowering keeps it.
- encode (Gist's encodings, in host_backend/encodings.cpp's formats and sim::encoded_bytes's
  sizes): the map is held until its last forward reader has run, then encoded on the device and
  the float32 buffer let go (the lowering's forward drop, after the swapped buffers and encodes
  of the maps before it); the first unpack decodes it into a float32 buffer, held to the drop
  point. binarize keeps 1 bit a value and decodes to 1.0 / 0.0, refused (one line) for a map a
  backward op other than ReLU's and max-pool's reads (their CPU and CUDA kernels read the sign and
  the geometry); sparse keeps every value but +0.0 with its position, in a buffer sized for half of
  them (a denser map spills the rest to host memory, as host_backend does: `sparse_spilled_bytes`);
  fp16, fp10 and fp8 keep packed codes of 16, 10 and 8 bits, rounded as host_backend rounds
  (nearest, ties to even, subnormals, saturating). A binarized or narrowed map that a forward op
  re-run by a recomputation reads is refused (one line), as the simulator refuses it.
A step whose ops differ from the captured trace's (another model, another input shape) stops at
the first differing op with one line (PlanError).

How the plan's tensor ids meet live tensors: the step runs under the same recorder as `capture`
(memplan.torch.recorder), which gives every tensor the id the captured trace gave it.

Stats: `peak_saved_bytes`, the saved-bytes peak of the step as it ran (memplan.torch.saved_bytes:
apply logs every op, recomputation and copy brought back); `peak_host_bytes`, the most bytes of swap copies
on the host, each counted from its copy-out to its copy-in as the simulator counts a host slot
(the copy itself is let go at the map's drop point). A recomputed map is held from its
regeneration to its drop point; a plan with `per_use` recomputation (regenerate for every backward
use, SuperNeurons' memory-centric mode) is refused with one line, since its peak would not be the
simulator's.
"""

import math
import time

import torch

from memplan.torch.capture import run_step
from memplan.torch.recorder import StepRecorder, flat_tensors, storage_key, written_arguments
from memplan.torch.saved_bytes import StepLog, peak

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

# ---- Gist's encodings (host_backend/encodings.cpp's formats and sizes, sim::encoded_bytes) -------
# Each encoder takes a float32 map as a flat tensor over its whole storage and returns what the
# device holds instead (`_Encoded`); `decode()` gives the flat float32 map back. Scratch tensors an
# encoder or decoder makes while it runs are not held (as the simulator, which sizes the encoded
# buffer only).

_NARROW_FORMATS = {"fp16": (5, 10), "fp10": (5, 4), "fp8": (4, 3)}  # sim::NarrowFormat
_SPARSE_BLOCK = 256  # sim::kSparseBlockValues
_SPARSE_DENSITY = 0.5  # sim::kDefaultSparseDensity
_ENCODINGS = ("binarize", "sparse", "fp16", "fp10", "fp8")


def sparse_format_bytes(values, stored):
    """sim::sparse_format_bytes: a 16-bit count per block of 256 values, an 8-bit index and the
    32-bit value per stored value."""
    return -(-values // _SPARSE_BLOCK) * 2 + stored * 5


def encoded_bytes(scheme, values):
    """sim::encoded_bytes of a float32 map of `values` values under `scheme` (at least 1 byte):
    the bytes the simulator's encoded buffer has, and the bytes apply's encoded copy holds."""
    if scheme == "binarize":
        size = (values + 7) // 8
    elif scheme == "sparse":
        size = sparse_format_bytes(values, math.ceil(_SPARSE_DENSITY * values))
    else:
        exponent, mantissa = _NARROW_FORMATS[scheme]
        size = (values * (1 + exponent + mantissa) + 7) // 8
    return max(1, size)


def narrow_codes(x, scheme):
    """The codes (int32, low 1 + exponent + mantissa bits) of float32 `x` in a narrow float, as
    host_backend's narrow_encode_value writes them: round to nearest, ties to even, with
    subnormals; saturating at the largest finite value; infinities kept, NaN a quiet NaN."""
    exponent_bits, m = _NARROW_FORMATS[scheme]
    bias = (1 << (exponent_bits - 1)) - 1
    exp_all_ones = (1 << exponent_bits) - 1
    width = 1 + exponent_bits + m
    min_exponent = 1 - bias
    bits = x.contiguous().view(torch.int32)
    magnitude = bits & 0x7FFFFFFF
    shift = 23 - m
    # The target's normal range: round float32's 23-bit mantissa to m bits (ties to even); a carry
    # moves into the exponent. Codes are the float32 exponent re-biased, then the mantissa.
    lsb = (magnitude >> shift) & 1
    rounded = (magnitude + ((1 << (shift - 1)) - 1) + lsb) >> shift
    code = rounded - ((127 - bias) << m)
    code = torch.clamp(code, max=((2 * bias) << m) | ((1 << m) - 1))  # saturate
    # Below its smallest normal value: multiples of 2^(min_exponent - m) (exact scalings); a value
    # that rounds up to the smallest normal one gets its code, 2^m, as well.
    tiny = magnitude < ((min_exponent + 127) << 23)
    small = torch.abs(x).clamp(max=2.0 ** min_exponent)  # (the others are not used)
    scaled = torch.round(small * 2.0 ** (m - min_exponent)).to(torch.int32)
    code = torch.where(tiny, scaled, code)
    code = torch.where(magnitude == 0x7F800000, torch.full_like(code, exp_all_ones << m), code)
    code = code | ((bits < 0).to(torch.int32) << (width - 1))
    nan = magnitude > 0x7F800000
    return torch.where(nan, torch.full_like(code, (exp_all_ones << m) | 1), code)


def narrow_values(code, scheme):
    """float32 values of narrow-float codes (int32), as narrow_decode_value reads them."""
    exponent_bits, m = _NARROW_FORMATS[scheme]
    bias = (1 << (exponent_bits - 1)) - 1
    exp_all_ones = (1 << exponent_bits) - 1
    width = 1 + exponent_bits + m
    field = (code >> m) & exp_all_ones
    mantissa = code & ((1 << m) - 1)
    normal = (((field - bias + 127) << 23) | (mantissa << (23 - m))).view(torch.float32)
    subnormal = mantissa.to(torch.float32) * 2.0 ** (1 - bias - m)
    value = torch.where(field == 0, subnormal, normal)
    value = torch.where(field == exp_all_ones,
                        torch.where(mantissa == 0, torch.full_like(value, math.inf),
                                    torch.full_like(value, math.nan)), value)
    return torch.where(((code >> (width - 1)) & 1) == 1, -value, value)


def _pack_bits(codes, width):
    """`codes` (int32, `width` bits each) as host_backend's bit stream: value i in bits
    width*i .. width*i + width - 1, bit b in byte b / 8 at b % 8 (uint8, ceil(n * width / 8))."""
    n = codes.numel()
    per_group = 8 // math.gcd(width, 8)  # values per whole number of bytes
    group_bytes = per_group * width // 8
    padded = torch.zeros(-(-n // per_group) * per_group, dtype=torch.int64, device=codes.device)
    padded[:n] = codes
    shifts = torch.arange(per_group, device=codes.device) * width
    words = (padded.view(-1, per_group) << shifts).sum(1)
    stream = (words[:, None] >> (torch.arange(group_bytes, device=codes.device) * 8)) & 0xFF
    return stream.to(torch.uint8).flatten()[:(n * width + 7) // 8].clone()


def _unpack_bits(stream, width, n):
    per_group = 8 // math.gcd(width, 8)
    group_bytes = per_group * width // 8
    groups = -(-n // per_group)
    padded = torch.zeros(groups * group_bytes, dtype=torch.int64, device=stream.device)
    padded[:stream.numel()] = stream
    words = (padded.view(-1, group_bytes) << (torch.arange(group_bytes, device=stream.device)
                                               * 8)).sum(1)
    codes = (words[:, None] >> (torch.arange(per_group, device=stream.device) * width)) \
        & ((1 << width) - 1)
    return codes.flatten()[:n].to(torch.int32)


class _Encoded:
    """A map's encoded copy: `held` (the device tensors it consists of, `nbytes` in all: the
    simulator's encoded buffer), `spilled` (a sparse encoding's bytes beyond its planned buffer,
    in host memory as host_backend spills them), and what decoding needs."""

    def __init__(self, scheme, values, device, held, spilled=None, meta=None):
        self.scheme, self.values, self.device = scheme, values, device
        self.held, self.spilled, self.meta = held, spilled, meta or {}
        self.nbytes = sum(t.numel() * t.element_size() for t in held)


def encode_map(flat, scheme):
    """Encodes float32 `flat` (1-D, a map's whole storage) under `scheme`."""
    n, device = flat.numel(), flat.device
    if scheme == "binarize":  # the sign only: 1 bit, 1.0 / 0.0 on decode (Gist binarize)
        return _Encoded(scheme, n, device, [_pack_bits((flat > 0).to(torch.int32), 1)])
    if scheme == "sparse":
        # Note [Sparse format]'s sizes: per block of 256 values a 16-bit count, per stored value
        # (all but +0.0, so -0.0 comes back) an 8-bit index in its block and the float32 value;
        # laid out here as the counts, then the indices, then the values. The planned buffer holds
        # its first sparse_format_bytes(n, ceil(0.5 n)) bytes; a denser map's rest spills to the
        # host, as host_backend's sparse_encode_spilling does.
        stored = (flat.view(torch.int32) != 0)
        blocks = -(-n // _SPARSE_BLOCK)
        mask = torch.zeros(blocks * _SPARSE_BLOCK, dtype=torch.bool, device=device)
        mask[:n] = stored
        counts = mask.view(blocks, _SPARSE_BLOCK).sum(1).to(torch.int16)
        where = stored.nonzero().flatten()
        stream = torch.cat([counts.view(torch.uint8), (where % _SPARSE_BLOCK).to(torch.uint8),
                            flat[where].view(torch.uint8)])
        capacity = encoded_bytes("sparse", n)
        buffer = torch.zeros(capacity, dtype=torch.uint8, device=device)
        kept = min(capacity, stream.numel())
        buffer[:kept] = stream[:kept]
        spilled = stream[capacity:].to("cpu", copy=True) if stream.numel() > capacity else None
        return _Encoded(scheme, n, device, [buffer], spilled,
                        {"blocks": blocks, "stored": where.numel(), "total": stream.numel()})
    exponent, mantissa = _NARROW_FORMATS[scheme]
    codes = narrow_codes(flat, scheme)
    width = 1 + exponent + mantissa
    packed = codes.to(torch.uint8) if width == 8 else _pack_bits(codes, width)
    return _Encoded(scheme, n, device, [packed])


def decode_map(encoded):
    """The flat float32 map `encoded` stands for."""
    n, device = encoded.values, encoded.device
    if encoded.scheme == "binarize":
        return _unpack_bits(encoded.held[0], 1, n).to(torch.float32)
    if encoded.scheme == "sparse":
        meta = encoded.meta
        stream = encoded.held[0][:meta["total"]]
        if encoded.spilled is not None:
            stream = torch.cat([stream, encoded.spilled.to(device)])
        blocks, stored = meta["blocks"], meta["stored"]
        counts = stream[:2 * blocks].clone().view(torch.int16).to(torch.int64)
        index = stream[2 * blocks:2 * blocks + stored].to(torch.int64)
        values = stream[2 * blocks + stored:].clone().view(torch.float32)
        block = torch.repeat_interleave(torch.arange(blocks, device=device), counts)
        flat = torch.zeros(n, dtype=torch.float32, device=device)
        flat[block * _SPARSE_BLOCK + index] = values
        return flat
    exponent, mantissa = _NARROW_FORMATS[encoded.scheme]
    width = 1 + exponent + mantissa
    packed = encoded.held[0]
    codes = packed.to(torch.int32) if width == 8 else _unpack_bits(packed, width, n)
    return narrow_values(codes, encoded.scheme)



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
    """{tensor id: plan entry} of a plan (a dict in plan format v1) made on `trace`."""
    if plan.get("format") != "memplan-plan" or plan.get("version") != 1:
        raise PlanError("not a memplan plan of format version 1")
    fingerprint = plan.get("workload", {}).get("fingerprint")
    if fingerprint != trace_fingerprint(trace):
        raise PlanError(f"the plan was made for another workload (fingerprint {fingerprint}, the "
                        f"captured trace has {trace_fingerprint(trace)})")
    placed = [e["tensor"] for e in plan.get("tensors", []) if e.get("placement") == "host"]
    if placed or plan.get("update") == "host":
        what = f"places '{placed[0]}' on the host" if placed else "runs the update on the host"
        raise PlanError(f"the plan {what}: memplan.torch.apply carries out plans of feature maps "
                        "only (make it with `memplan search --maps-only`)")
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
        if entry.get("per_use"):
            raise PlanError(f"tensor '{ref}': per_use recomputation (regenerated for every backward "
                            "use) is not carried out by memplan.torch.apply; make the plan without "
                            "it (every policy but superneurons' memory-centric segments does)")
        if action.startswith("encode"):
            scheme = action.partition(":")[2]
            if scheme not in _ENCODINGS:
                raise PlanError(f"tensor '{ref}': {action} is not an encoding memplan.torch.apply "
                                f"carries out (encode:{', encode:'.join(_ENCODINGS)})")
            dtype = trace["tensors"][tid].get("dtype", "float32")
            if dtype != "float32":
                raise PlanError(f"tensor '{ref}': {action} encodes float32 maps only, this one is "
                                f"{dtype}")
            if scheme == "binarize":
                _check_binarizable(trace, tid, ref)
        decisions[tid] = entry
    _check_lossy_maps_are_not_rerun(trace, decisions)
    return decisions


# Backward ops that read a binarized map for its sign, or for its geometry only: ReLU's backward
# (threshold_backward: result <= 0 ? 0 : grad) and a max-pool's backward, whose CPU and CUDA
# kernels read the input's sizes and memory format and take the positions from the saved indices.
_SIGN_READERS = {"relu": (".threshold_backward",),
                 "max_pool2d": (".max_pool2d_with_indices_backward",)}
_GEOMETRY_READERS = {"aten::detach", "aten::view", "aten::_reshape_alias", "aten::alias",
                     "aten::as_strided", "aten::t", "aten::transpose", "aten::permute",
                     "aten::expand", "aten::unsqueeze", "aten::squeeze"}


def _check_binarizable(trace, tid, ref):
    """Refuses (PlanError) binarizing a map a backward op reads for more than its sign: binarize
    keeps one bit, and decodes to 1.0 / 0.0, which gives backward the same bits only where every
    backward reader is a ReLU's or a max-pool's backward (Gist's pattern)."""
    for op in trace["ops"]:
        if op["phase"] != "backward" or tid not in op["inputs"]:
            continue
        if op["layer"] in _GEOMETRY_READERS or op["name"].endswith(
                _SIGN_READERS.get(op["layer"], ())):
            continue
        raise PlanError(f"tensor '{ref}': encode:binarize keeps the map's sign only, and backward "
                        f"op '{op['name']}' ({op['layer']}) reads its values (binarize is for a "
                        "map only ReLU's and max-pool's backward read)")


def _check_lossy_maps_are_not_rerun(trace, decisions):
    """Refuses a binarized or narrowed map that a forward op re-run by a recomputation reads
    (the rerun would compute on the decoded values; sim::validate_plan's rule)."""
    ops, tensors = trace["ops"], trace["tensors"]
    rerun, stack = set(), [tensors[t]["producer"] for t, e in decisions.items()
                           if e["action"] == "recompute"]
    while stack:
        op = stack.pop()
        if op is None or op in rerun:
            continue
        rerun.add(op)
        for t in ops[op]["inputs"]:
            if tensors[t]["producer"] is None or tensors[t]["kind"] != "activation":
                continue
            if t not in decisions or decisions[t]["action"] == "recompute":
                stack.append(tensors[t]["producer"])
    for op in sorted(rerun):
        for t in ops[op]["inputs"]:
            action = decisions.get(t, {}).get("action", "")
            if action.startswith("encode:") and action != "encode:sparse":
                raise PlanError(f"tensor '{tensors[t]['name']}': {action} is decoded lossily, and "
                                f"op '{ops[op]['name']}', which a recomputation re-runs, reads it")


class Schedule:
    """A plan's decisions on the captured trace, as the step carries them out: `actions` (tensor
    id -> keep | swap | recompute), `prefetch_before` (op id -> swapped maps brought back before
    it: the plan's `prefetch_before`, else the simulator's default, the op before the map's first
    backward reader when that comes after its last forward one) and `drop_after` (op id -> tensors
    the trace reads last there: a copy brought back or regenerated is let go after it)."""

    def __init__(self, trace, decisions):
        ops = trace["ops"]
        op_ids = {}
        for op in ops:
            op_ids.setdefault(op["name"], []).append(op["id"])
        forward, backward, last = {}, {}, {}
        for op in ops:
            for t in op["inputs"]:
                if op["phase"] in ("forward", "backward"):
                    uses = forward if op["phase"] == "forward" else backward
                    uses.setdefault(t, []).append(op["id"])
                last[t] = op["id"]
        self.actions = {tid: entry["action"] for tid, entry in decisions.items()}
        self.prefetch_before = {}
        self.release_before = {}  # op id -> swapped maps whose buffers go before it
        self.released_late = set()  # the swapped maps that have a release point
        for tid, entry in decisions.items():
            if entry["action"] != "swap" or tid not in backward:
                continue

            def op_named(key):
                when = entry.get(key)
                if isinstance(when, str):
                    when = op_ids.get(when, [None])[0]
                    if when is None:
                        raise PlanError(f"tensor {tid}: {key} names op '{entry[key]}', which the "
                                        f"trace lacks")
                return when
            release = op_named("release_before")
            if release is not None:
                self.release_before.setdefault(release, []).append(tid)
                self.released_late.add(tid)
            when = op_named("prefetch_before")
            if when is None:
                producer = trace["tensors"][tid]["producer"]
                dropped = max([producer] + forward.get(tid, []))
                first_backward = min(backward[tid])
                when = first_backward - 1 if first_backward - 1 > dropped else first_backward
            self.prefetch_before.setdefault(when, []).append(tid)
        # The lowering's forward drops: after a map's last forward reader (or its producer), a
        # swapped map's buffer goes once its copy-out has read it and an encoded map is encoded
        # and its buffer goes, map by map in the plan's (tensor id) order.
        self.forward_drops = {}  # op id -> [(map, action)] dropped after it, in that order
        self.encode_at = {}  # encoded map -> its forward drop op
        for tid in sorted(decisions):
            action = decisions[tid]["action"]
            if action == "swap" or action.startswith("encode:"):
                producer = trace["tensors"][tid]["producer"]
                at = max([producer] + forward.get(tid, []))
                self.forward_drops.setdefault(at, []).append((tid, action))
                if action.startswith("encode:"):
                    self.encode_at[tid] = at
        self.drop_after = {}
        for t, op in last.items():
            self.drop_after.setdefault(op, []).append(t)


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

    def copy_out(self, t):
        if not t.is_cuda:
            return t.to("cpu", copy=True)
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            host.copy_(t, non_blocking=True)
        t.record_stream(self.stream)
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


class _Ref:
    """A tensor argument of a recorded op: the trace id of its storage and its geometry."""

    def __init__(self, tid, t):
        self.tid, self.geometry = tid, _geometry(t)


class _PlanRecorder(StepRecorder):
    """The capture recorder, checking each op against the captured trace and acting on packs."""

    def __init__(self, model, optimizer, batch, trace, plan, cuda=False):
        self.expected = trace
        self.plan = plan
        self.recipes = {}  # op id -> (func, args, kwargs with _Ref, rng state or None)
        # tensor id -> a device tensor over its whole storage: pre-existing tensors, kept maps (from
        # their pack), copies brought back and regenerated tensors (until the op after which the
        # captured trace no longer reads them, as the simulator's lowering drops them).
        self.device = {}
        self.regenerated = set()  # ids in self.device that a recomputation wrote
        self.host = {}  # tensor id -> host copy of its whole storage (swap)
        self.encoded = {}  # tensor id -> its encoded copy on the device (encode:*, _Encoded)
        self.spilled_bytes = 0  # sparse encodings' bytes beyond their planned buffers (host)
        self.host_held = set()  # swap copies not brought back yet (the simulator's host slots)
        self.releasing = set()  # swapped maps whose device buffers wait for their release point
        self.host_bytes = self.peak_host_bytes = 0
        self.copies = _Copies(cuda)
        self.log = StepLog()
        self.recompute_ops = 0
        self.prefetched_through = -1  # prefetches issued for the ops up to this one
        self.output_slot = {}  # tensor id -> ("written" | "result", index) in its op's call
        super().__init__(model, optimizer, batch, cuda)

    def _pre_existing(self, t, name, kind, persistent):
        self.held_device = t.device
        tid = super()._pre_existing(t, name, kind, persistent)
        if tid not in self.device:
            self.paused += 1
            self.device[tid] = _whole_storage(t)
            self.paused -= 1
        return tid

    # ---- ops: record a recipe, compare with the captured trace ------------------------------
    def dispatch(self, func, args, kwargs):
        if self.paused or self.phase is None:
            return super().dispatch(func, args, kwargs)
        op_id = len(self.ops)
        rng = None
        if self.phase == "forward" and func._schema.name in _RANDOM_OPS:
            self.paused += 1
            rng = _rng_state(self.clock.cuda)
            self.paused -= 1
        recipe = (func, self._refs(args), self._refs(kwargs), rng) if self.phase == "forward" \
            else None
        self.paused += 1
        try:
            self._prefetch_through(op_id)
        finally:
            self.paused -= 1
        result = super().dispatch(func, args, kwargs)
        if recipe is not None:
            self.recipes[op_id] = recipe
        if op_id in self.plan.forward_drops:
            self.paused += 1
            try:
                self._forward_drops(op_id, (args, kwargs, result))
            finally:
                self.paused -= 1
        for tid in self.plan.drop_after.get(op_id, ()):  # the trace reads them no more
            if tid not in self.persistent and self.tensors[tid]["kind"] == "activation":
                self.device.pop(tid, None)
                self.regenerated.discard(tid)
                self.host.pop(tid, None)
                self.encoded.pop(tid, None)
        return result

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
                found = next((t for t in flat_tensors(tensors, [])
                              if self.current.get(storage_key(t)) == tid), None)
                if found is not None:
                    self.device[tid] = _whole_storage(found)
            if tid in self.device:
                self._encode(tid)

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
        self.log.op(op["id"])
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
    def on_pack(self, t, tid):
        self.paused += 1
        try:
            return self._pack_as_planned(t, tid)
        finally:
            self.paused -= 1

    def _pack_as_planned(self, t, tid):
        action = self.plan.actions.get(tid, "keep")
        if tid in self.persistent or self.tensors[tid]["kind"] != "activation":
            action = "keep"
        if action == "swap":
            if tid not in self.host and tid not in self.device:
                self.host[tid] = self.copies.copy_out(_whole_storage(t))
                self.host_held.add(tid)
                self._account_host(self.tensors[tid]["bytes"])
            return ("swap", _geometry(t))
        if action == "recompute":
            return ("recompute", _geometry(t))
        if action.startswith("encode:"):  # held until its last forward reader, then encoded
            if tid not in self.device and tid not in self.encoded:
                self.device[tid] = _whole_storage(t)
                if len(self.ops) - 1 >= self.plan.encode_at[tid]:  # packed after its last reader
                    self._encode(tid)  # (an output autograd saves once its op has returned)
            return ("encode", _geometry(t))
        if tid not in self.device:
            self.device[tid] = _whole_storage(t)
        return ("keep", t)

    def _account_host(self, delta):
        self.host_bytes += delta
        self.peak_host_bytes = max(self.peak_host_bytes, self.host_bytes)

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
            self.current[storage_key(result)] = tid
        finally:
            self.paused -= 1
        return result

    def _release(self, tid):
        """A swapped map's device buffer goes, once its copy-out has read it (logged as a read:
        the simulator holds it until it has waited for the copy there)."""
        if tid in self.releasing:
            self.releasing.discard(tid)
            self.log.recompute([tid], [])

    def _copy_in(self, tid):
        """Brings a swapped map back (at its prefetch point, or when first needed)."""
        self._release(tid)  # the lowering frees the copied-out buffer before the copy back
        copy = self.copies.copy_in(self.host[tid], self.held_device)
        self.device[tid] = copy
        self.log.copy_in(tid, copy.storage().nbytes())
        if tid in self.host_held:  # the simulator's host slot ends with its copy-in
            self.host_held.discard(tid)
            self._account_host(-self.tensors[tid]["bytes"])
        return copy

    def _materialize(self, tid):
        """A device tensor over the whole storage of `tid`: held, brought back or regenerated."""
        if tid in self.device:
            return self.device[tid]
        if tid in self.host:
            return self._copy_in(tid)
        if tid in self.encoded:
            return self._decode(tid)
        return self._regenerate(tid)

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
        self.log.recompute([("encoded", tid)], [(tid, full.storage().nbytes(), None, True)])
        return full

    def _regenerate(self, tid):
        """Re-runs the producer of `tid` (recursively for inputs that are gone)."""
        tensor = self.tensors[tid]
        producer = tensor["producer"]
        func, args, kwargs, rng = self.recipes[producer]
        written = _written_refs(func, args, kwargs)
        reads = []
        real_args = self._resolve(args, written, reads)
        real_kwargs = self._resolve(kwargs, written, reads)
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
        writes = []
        for out in self.ops[producer]["outputs"]:
            where, index = self.output_slot[out]
            if where == "written":
                value = written_arguments(func, real_args, real_kwargs)[index]
            else:
                value = flat_tensors(result, [])[index]
            value = _whole_storage(value)
            held = out not in self.device  # else a temporary copy: the one held stays
            writes.append((out, value.storage().nbytes(), self.tensors[out].get("in_place_of"),
                           held))
            if held:
                self.device[out] = value
                self.regenerated.add(out)
        self.log.recompute(reads, writes)
        return self.device[tid]

    def _resolve(self, value, written, reads):
        if isinstance(value, _Ref):
            reads.append(value.tid)
            whole = self._materialize(value.tid)
            if id(value) in written and value.tid in self.regenerated:
                # written over in place: the regenerated tensor becomes the op's output
                del self.device[value.tid]
                self.regenerated.discard(value.tid)
                return whole.as_strided(*value.geometry)
            base = whole.as_strided(*value.geometry)
            # Clone what the op writes that is held for another use, and persistent state:
            # native_batch_norm updates its running statistics without marking them written.
            return base.clone() if id(value) in written or value.tid in self.persistent else base
        if isinstance(value, (list, tuple)):
            return type(value)(self._resolve(v, written, reads) for v in value)
        if isinstance(value, dict):
            return {k: self._resolve(v, written, reads) for k, v in value.items()}
        return value


class PlannedModel:
    """`apply`'s result: `step(batch, loss_fn, optimizer)` runs one training step under the plan
    and returns its loss; `stats` holds what the last step's hooks measured."""

    def __init__(self, model, trace, schedule):
        self.model, self.trace, self.schedule = model, trace, schedule
        self.stats = {}

    def step(self, batch, loss_fn, optimizer):
        batch = tuple(batch)
        check_batch(batch, self.trace)
        cuda = any(p.is_cuda for p in self.model.parameters())
        recorder = _PlanRecorder(self.model, optimizer, batch, self.trace, self.schedule, cuda)
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        loss = run_step(self.model, batch, loss_fn, optimizer, recorder)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        step_trace = {"tensors": recorder.tensors, "ops": recorder.ops}
        self.last_step = (recorder.log, step_trace)  # what the step ran, for saved_bytes.curve
        self.stats = {"peak_saved_bytes": peak(recorder.log, step_trace),
                      "peak_host_bytes": recorder.peak_host_bytes,
                      "recomputed_ops": recorder.recompute_ops, "step_seconds": seconds,
                      "sparse_spilled_bytes": recorder.spilled_bytes}
        return loss


def apply(model, plan, captured):
    """Checks `plan` (a dict in plan format v1) against `captured` (a Capture or its trace dict)
    and `model`, and returns a PlannedModel; PlanError (one line) when they do not belong together.
    """
    trace = captured.trace if hasattr(captured, "trace") else captured
    schedule = Schedule(trace, plan_decisions(plan, trace))
    check_model(model, trace)
    return PlannedModel(model, trace, schedule)
