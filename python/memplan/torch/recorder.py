"""The dispatch-level recorder: every aten op of one training step, as memplan trace v1 JSON.

What: `StepRecorder` is a `TorchDispatchMode` plus saved-tensor hooks, module hooks and autograd
node hooks. Between `begin_phase(...)` calls it sees every aten op below autograd, in issue order,
and builds the trace's tensors and ops; `trace()` returns the JSON document (traces/FORMAT.md).

Why this way: the dispatcher is the one place every op of forward, backward and the optimizer
passes through, with its real inputs and outputs, and autograd's saved-tensor hooks are the ground
truth of what backward keeps: memplan's feature maps (activations written in forward and read in
backward) are made to be exactly the tensors autograd saved, and those the step held for backward
beside them (below).

How:
- identity is the storage: a tensor of the trace is one storage at one version. A storage is
  known by its StorageImpl, which the recorder holds a weak reference to (the data is freed as
  usual; the StorageImpl's address is not handed out again while the recorder lives), never by
  its data pointer: the allocator gives a freed buffer's address to the next storage, and a
  scalar made outside the dispatcher (torch 1.13 lifts the `3` of `mask[i] = 3` into a fresh
  0-dim tensor) would take the id of whatever tensor had that address before, which depends on
  the allocator's history, not on the step. A view shares its base's storage and makes no new
  tensor; a write into an existing storage (an in-place op, an `out=` argument, any argument the
  schema marks `(a!)`) makes a new version `in_place_of` the old one, except for a tensor that
  existed before the step (parameters, buffers, optimizer state, the batch, the loop's own state
  such as a GradScaler's scale, which becomes optimizer state), which the trace keeps as one
  pre-existing tensor that ops read and update. A saved version forward writes over through a
  view autograd does not see is the newest version (`_rewrite_saved`).
- storages seen before they are written existed before the step: parameters (and buffers, which
  the trace counts as parameters), optimizer state, the batch's tensors (`input`); anything else
  (a constant the loss closes over) is an `input` too.
- kinds: written in backward -> `gradient` (as the zoo does), otherwise `activation`.
- backward ops read forward tensors through what autograd saved, and through what the step holds
  for backward beside it: a saved tensor an autograd node unpacks is an input of the first op
  recorded after the unpack and of the node's last op (the data is needed from the unpack until
  the node returns), and one no node unpacked is given to the step's last op (it goes with the
  graph, after the update). A backward
  read of a forward tensor autograd did not save is data something else held through forward
  (`held`: the inputs of a torch.utils.checkpoint block, which torch 1.13's non-reentrant
  checkpoint keeps in its closure and re-reads to recompute the block; a custom Function's ctx
  attribute), except a factory that takes only its argument's sizes, dtype and device
  (`ones_like(loss)`), which is left out. So the trace's feature maps and inputs read in
  backward are exactly the hooks' saved storages and the held ones, byte for byte.
- `differentiates`: each forward op's autograd node gets a post-hook; the backward ops recorded
  since the previous node finished belong to the node that just finished.
"""

import time

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from memplan._core import aten_layer

_DTYPES = {
    torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.float64: "float64", torch.int64: "int64", torch.int32: "int32", torch.int16: "int16",
    torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
}

PHASES = ("forward", "backward", "update")

# The name prefix of the training loop's own state (StepRecorder._updated_in_place), which the trace
# keeps as optimizer state beside the optimizer's.
LOOP_STATE = "loop_state."

# Factories that take only their argument's sizes, dtype and device: given a forward tensor in
# backward (the engine's `ones_like(loss)`), they read none of its data.
_METADATA_READERS = frozenset(
    f"aten::{name}" for name in ("ones_like", "zeros_like", "empty_like", "full_like", "rand_like",
                                 "randn_like", "randint_like", "new_empty", "new_empty_strided",
                                 "new_zeros", "new_ones", "new_full"))


class UnsupportedTensor(ValueError):
    """A tensor the recorder cannot identify: one that is not strided, with no storage of its own
    (a sparse gradient). One line, naming the op and the layout."""


class OpSchema:
    """What the recorder reads of an op's schema: its name, the positions and names of the
    arguments it marks written `(a!)`, the positions typed `Tensor`, and whether it returns a
    Tensor. Read once per op (`op_schema`): pybind builds a schema's argument objects anew at each
    access, which was a good part of the recorder's time per op (issue 36)."""

    __slots__ = ("func", "name", "short_name", "written", "tensor_positions", "returns_tensor")

    def __init__(self, func):
        self.func = func  # held, so that its id names no other op (`op_schema`)
        schema = func._schema
        self.name = schema.name
        self.short_name = self.name.split("::")[-1]
        arguments = schema.arguments
        self.written = tuple((i, arg.name) for i, arg in enumerate(arguments)
                             if arg.alias_info is not None and arg.alias_info.is_write)
        self.tensor_positions = tuple(i for i, arg in enumerate(arguments)
                                      if str(arg.type) == "Tensor")
        self.returns_tensor = bool(schema.returns) and str(schema.returns[0].type) == "Tensor"


_SCHEMAS = {}  # id of an op overload -> its OpSchema


def op_schema(func):
    """The OpSchema of an op overload (`torch.ops.aten.add.Tensor`), read at its first call. Keyed
    by id: an OpOverload hashes in Python."""
    schema = _SCHEMAS.get(id(func))
    if schema is None:
        schema = _SCHEMAS[id(func)] = OpSchema(func)
    return schema


def layer_of(func, args):
    """The memplan layer of an aten op call, or its aten name ("aten::mm") when memplan has no
    such layer: a generic op. The table is core/aten_layers.hpp's, which the Kineto importer
    reads too (a convolution's layer by its weight's rank, hardtanh as relu6 between 0 and 6, add
    between two tensors)."""
    name = func._schema.name
    return aten_layer(name, args) or name


def flat_tensors(value, out):
    """Appends every tensor in a (nested) argument or result to `out`."""
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, torch.Tensor):
                out.append(v)
            elif isinstance(v, (list, tuple, dict)):
                flat_tensors(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            flat_tensors(v, out)
    return out


if hasattr(torch.Tensor, "untyped_storage"):
    def untyped_storage(t):
        """`t`'s storage, untyped (sized in bytes): torch 2's `untyped_storage()`, 1.13's
        `_storage()` (torch 2 warns that `Tensor.storage()`, a typed storage, is deprecated)."""
        return t.untyped_storage()
else:
    def untyped_storage(t):
        """`t`'s storage, untyped (sized in bytes): torch 1.13's `_storage()`."""
        return t._storage()


def storage_bytes(t):
    return untyped_storage(t).nbytes()


def written_arguments(func, args, kwargs):
    """The tensors of the arguments the op's schema marks as written, `(a!)`."""
    written = []
    for i, name in op_schema(func).written:
        flat_tensors(args[i] if i < len(args) else kwargs.get(name), written)
    return written


def _number_tensor(value):
    return torch.tensor(value, dtype={bool: torch.bool, int: torch.int64,
                                      float: torch.float64}[type(value)])


def _is_number(value):
    return isinstance(value, (bool, int, float))


def _rewrap_numbers(schema, args):
    """torch 1.13 hands a saved wrapped number (the 0.125 of `scores * 0.125`) to the dispatch mode
    as a Python number: as the argument of autograd's detach of it (non-reentrant checkpoint's
    recomputation does this), and as its result. Both become 0-dim tensors of the number's type
    where the schema (an OpSchema) wants a tensor; returns the arguments to call the op with."""
    numbers = [i for i in schema.tensor_positions if i < len(args) and _is_number(args[i])]
    if not numbers:
        return args
    args = list(args)
    for i in numbers:
        args[i] = _number_tensor(args[i])
    return tuple(args)


def _call(func, args, kwargs):
    """`func(*args, **kwargs)` with wrapped numbers given back as tensors (_rewrap_numbers)."""
    schema = op_schema(func)
    result = func(*_rewrap_numbers(schema, args), **kwargs)
    if schema.returns_tensor and _is_number(result):
        return _number_tensor(result)
    return result


class _Clock:
    """Op durations: the CPU clock around the call, or CUDA events on a GPU (read at the end)."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.pending = []  # (op record, start event, end event)

    def start(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter_ns()

    def stop(self, op, started):
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.pending.append((op, started, end))
        else:
            op["duration_ns"] = time.perf_counter_ns() - started

    def finish(self):
        if self.cuda and self.pending:
            torch.cuda.synchronize()
            for op, start, end in self.pending:
                op["duration_ns"] = int(start.elapsed_time(end) * 1e6)
        self.pending = []

    def describe(self):
        if self.cuda:
            return "CUDA events around each aten op"
        return "CPU clock (time.perf_counter_ns) around each aten op"


class _Dispatch(TorchDispatchMode):
    def __init__(self, recorder):
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        return self.recorder.dispatch(func, args, kwargs)


class StepRecorder:
    """Records one training step; see the module's docstring.

    Use: construct, `with recorder:` around the step, `begin_phase(name)` before each forward and
    backward pass (alternating, one pair per micro-batch under gradient accumulation) and the
    optimizer step (`phase_after_backward`, `update_after_last_backward`: capture._phases), then
    `trace()`. `on_pack(t, tensor_id)` and `on_unpack(packed)` may be overridden
    (memplan.torch.apply does) to act on what autograd saves."""

    def __init__(self, model, optimizer, batch, cuda=False):
        self.tensors = []
        self.ops = []
        self.current = {}  # storage key -> tensor id of its latest version
        self.persistent = set()  # tensor ids of parameters, buffers, optimizer state
        self.phase = None
        self._backward_end = 0  # the first op after the last backward pass so far
        self.paused = 0
        self.clock = _Clock(cuda)
        self.saved = {}  # tensor id -> storage key, for what autograd saved (ground truth)
        self.never_unpacked = set()  # saved tensor ids no backward op read (`_hold_never_unpacked`)
        self.rewritten = {}  # a saved version -> the version forward wrote over it (unsafe views)
        self._storages = {}  # storage key -> a weak reference that keeps the key from reuse
        self.saved_bytes_by_key = {}
        self.held = {}  # tensor id -> storage key: forward tensors backward read, not saved
        self.dropped_reads = 0  # backward reads of unsaved forward tensors (metadata only)
        self.attached_reads = 0  # saved tensors no backward op read, given to their node's op
        self._module_stack = []
        self._pending_outputs = []  # (op id, tensors) whose autograd node is not hooked yet
        self._node_op = {}  # id(node) -> forward op id
        self._nodes = []  # keeps hooked nodes alive so their ids stay unique
        self._node_start = 0  # first backward op of the node running now
        self._unpacked = []  # tensor ids unpacked since the last node finished
        self._handles = []  # the module and node hooks, removed when the recording ends
        self._dispatching = None  # the op being recorded, or the last one
        self._reads = (None, {})  # that op and its inputs: {tensor id: tensor}
        self._naming = None  # the pre-existing tensor being registered: "'NAME' (KIND)"
        self._register_pre_existing(model, optimizer, batch)
        self._model = model
        self._mode = self._saved_hooks = None  # while recording (`with recorder:`)

    # ---- pre-existing tensors -------------------------------------------------------------
    def _register_pre_existing(self, model, optimizer, batch):
        for name, p in model.named_parameters():
            self._pre_existing(p, name, "parameter", persistent=True)
        for name, b in model.named_buffers():
            self._pre_existing(b, name, "parameter", persistent=True)
        names = {id(p): n for n, p in model.named_parameters()}
        if optimizer is not None:
            for p, state in optimizer.state.items():
                for key, value in state.items():
                    if isinstance(value, torch.Tensor):
                        label = f"{names.get(id(p), 'param')}.{key}"
                        self._pre_existing(value, label, "optimizer_state", persistent=True)
        for i, t in enumerate(flat_tensors(batch, [])):
            self._pre_existing(t, f"batch.{i}", "input", persistent=False)

    def _pre_existing(self, t, name, kind, persistent):
        self._naming = None if name.startswith("external.") else f"'{name}' ({kind})"
        key = self.storage_key(t)
        self._naming = None
        if key in self.current:
            return self.current[key]
        tid = self._new_tensor(t, name, kind, None)
        self.current[key] = tid
        if persistent:
            self.persistent.add(tid)
        return tid

    def _new_tensor(self, t, name, kind, producer, in_place_of=None):
        nbytes = storage_bytes(t)
        record = {"id": len(self.tensors), "name": name, "bytes": nbytes, "kind": kind}
        if t.numel() * t.element_size() == nbytes:
            record["shape"] = list(t.shape)
        if t.dtype in _DTYPES:
            record["dtype"] = _DTYPES[t.dtype]
        record["producer"] = producer
        if in_place_of is not None:
            record["in_place_of"] = in_place_of
        self.tensors.append(record)
        return record["id"]

    def storage_key(self, t):
        """Identity of `t`'s storage: its StorageImpl's address, which a weak reference held
        until the recorder goes keeps from being given to another storage (the data is freed as
        usual). Not the data pointer: the allocator hands a freed buffer's address to the next
        storage, so which tensor an address named would depend on the allocator's history, and a
        replay of the step would disagree with its capture."""
        if t.layout != torch.strided:
            func = self._dispatching
            what = self._naming or (f"a tensor of {self.phase} op {op_schema(func).name}" if func
                                    else "a tensor autograd saves")
            raise UnsupportedTensor(
                f"{what} is a {str(t.layout).replace('torch.', '')} tensor of {list(t.shape)}: "
                "memplan.torch records strided tensors only (a sparse gradient, as "
                "nn.Embedding(sparse=True) makes, and optimizer state made from it must be "
                "dense: sparse=False)")
        storage = untyped_storage(t)
        key = storage._cdata
        if key not in self._storages:
            self._storages[key] = StorageWeakRef(storage)
        return key

    def tensor_id(self, t):
        """The trace id of the latest version of `t`'s storage, registering an unseen one as a
        pre-existing input (a constant the loss closes over, a scalar made outside the
        dispatcher)."""
        return self._id_of(self.storage_key(t), t)

    def _id_of(self, key, t):
        """tensor_id of `t`, whose storage key is `key`."""
        tid = self.current.get(key)
        if tid is None:
            tid = self._pre_existing(t, f"external.{len(self.tensors)}", "input", persistent=False)
        return tid

    # ---- hooks ----------------------------------------------------------------------------
    def _hook_modules(self, model):
        for name, module in model.named_modules():
            if not name:
                continue
            self._handles.append(module.register_forward_pre_hook(self._enter_module(name)))
            self._handles.append(module.register_forward_hook(self._leave_module))

    def _enter_module(self, name):
        def hook(module, inputs):
            self._module_stack.append(name)
        return hook

    def _leave_module(self, module, inputs, output):
        if self._module_stack:
            self._module_stack.pop()

    def _hook_accumulators(self, model):
        # AccumulateGrad nodes mark where a parameter's gradient is stored: a node boundary.
        for p in model.parameters():
            if not p.requires_grad:
                continue
            # view_as, not expand_as: a view that checks no bounds, so that a parameter whose
            # storage a plan has moved to the host (resized to 0 bytes: memplan.torch.apply) has
            # its node found too.
            accumulator = p.view_as(p).grad_fn.next_functions[0][0]
            self._handles.append(
                accumulator.register_hook(lambda gi, go: self._node_finished(None)))
            self._nodes.append(accumulator)

    def _pack(self, t):
        key = self.storage_key(t)
        tid = self.saved_version(self._id_of(key, t))
        if tid not in self.persistent:
            self.saved[tid] = key
            self.saved_bytes_by_key[key] = storage_bytes(t)
        return (self.on_pack(t, tid), tid)

    def _unpack(self, packed):
        payload, tid = packed
        while tid in self.rewritten:
            tid = self.rewritten[tid]
        self._unpacked.append((tid, len(self.ops)))
        return self.on_unpack(payload, tid)

    def saved_version(self, tensor_id):
        """The trace tensor a pack of `tensor_id` (the storage's version now) stands for: itself
        at capture, where a later write moves it (`_rewrite_saved`); `apply` answers from the
        captured trace, which knows the writes to come."""
        return tensor_id

    def _rewrite_saved(self, old, new):
        """Forward wrote version `new` over `old`, which autograd saved. Autograd lets that pass
        only where it cannot see it: a write through a view that shares the storage but not the
        version counter (the CPU LSTM and GRU cells write their gates with `sigmoid_`/`tanh_`
        into `unsafe_chunk`s of one buffer, the gates saved one after the other), or through
        `.data`. The saved tensor is the storage, and what backward reads there is what forward
        left in it: the saved tensor becomes the newest version, as one buffer in the trace."""
        self.saved[new] = self.saved.pop(old)
        self.rewritten[old] = new

    def on_pack(self, t, tensor_id):
        return t

    def on_unpack(self, payload, tensor_id):
        return payload

    def _hook_new_nodes(self):
        for op_id, outputs in self._pending_outputs:
            for t in outputs:
                node = t.grad_fn
                if node is None or id(node) in self._node_op:
                    continue
                self._node_op[id(node)] = op_id
                self._nodes.append(node)
                self._handles.append(node.register_hook(
                    lambda gi, go, node_id=id(node): self._node_finished(node_id)))
        self._pending_outputs = []

    def _node_finished(self, node_id):
        forward_op = self._node_op.get(node_id) if node_id is not None else None
        node_ops = self.ops[self._node_start:]
        for op in node_ops:
            if forward_op is not None:
                op["differentiates"] = forward_op
                op["name"] = f"{self.ops[forward_op]['name']}.backward.{op['name']}"
        self._attach_unread(node_ops)
        if node_ops:
            self._node_start = len(self.ops)

    def _attach_unread(self, node_ops):
        """Every saved tensor the node unpacked is an input of the first op recorded after its
        unpack (PyTorch unpacks a node's saved tensors before it computes with them) and of the
        node's last op (the node holds them until it returns)."""
        if not node_ops:
            return
        read = {t for op in node_ops for t in op["inputs"]}
        first_id = node_ops[0]["id"]
        for tid, next_op in self._unpacked:
            if tid not in self.saved:
                continue
            if tid not in read:
                self.attached_reads += 1
            at = node_ops[min(max(next_op - first_id, 0), len(node_ops) - 1)]
            for op in (at, node_ops[-1]):
                if tid not in op["inputs"]:
                    op["inputs"].append(tid)
            read.add(tid)
        self._unpacked = []

    # ---- phases ---------------------------------------------------------------------------
    def __enter__(self):
        self._hook_modules(self._model)
        self._hook_accumulators(self._model)
        self._mode = _Dispatch(self)
        self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._saved_hooks.__enter__()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        """Ends the recording and lets go of everything that refers back to the recorder: the
        hooks on the model's modules and on autograd's nodes (an AccumulateGrad node outlives the
        step and would hold the recorder, and with it a planned step's copies, for good: issue
        36's step that grew by every step's regenerated maps), the hooked nodes, the dispatch mode
        and the saved-tensor hooks, so that what the recorder holds goes when it goes, not at a
        later garbage collection."""
        self._mode.__exit__(*exc)
        self._saved_hooks.__exit__(*exc)
        for h in self._handles:
            h.remove()
        self._handles = []
        self._nodes = []
        self._mode = self._saved_hooks = None
        return False

    def begin_phase(self, phase):
        assert phase in PHASES
        self._hook_new_nodes()
        if self.phase == "backward":
            self._end_backward()
            self._backward_end = len(self.ops)
        self.phase = phase
        self._node_start = len(self.ops)

    def phase_after_backward(self):
        """The phase of the ops after a backward pass (capture._phases): forward, the next
        micro-batch's, until the step returns and shows it was the last pass
        (`update_after_last_backward`). The recorder records an update op as a forward one: it
        holds the outputs of both until the next op to hook their autograd nodes (an update makes
        none, but holding an output changes the step under torch 1.13, which then detaches it: an
        `aten::detach` after the `torch.zeros(1)` of the optimizer's record_function), and a
        module's name is given to an op inside a module's forward only. So relabelling them
        changes nothing else, and apply, which knows the phase as it runs, records the same
        ops."""
        return "forward"

    def update_after_last_backward(self):
        """The step has returned: the ops recorded since its last backward pass, recorded as the
        next micro-batch's forward pass could have been, are its update (capture._phases)."""
        for op in self.ops[self._backward_end:]:
            op["phase"] = "update"
        if self.phase == "forward":
            self.phase = "update"

    def _end_backward(self):
        self._attach_unread(self.ops[self._node_start:])

    def _hold_never_unpacked(self):
        """What autograd saved and no node unpacked (the saved tensors of a branch that does not
        reach the loss, such as GoogLeNet's auxiliary classifiers) goes with the graph, which
        the step's outputs hold until the step has returned: an input of the step's last op. That
        op is the update's where there is one, so such a tensor is no feature map (no backward op
        reads it), and no plan moves it: held to the end in the planned run as in the trace."""
        read = {t for op in self.ops if op["phase"] == "backward" for t in op["inputs"]}
        self.never_unpacked = {tid for tid in self.saved if tid not in read}
        if not self.never_unpacked or not self.ops:
            return
        last = self.ops[-1]
        for tid in sorted(self.never_unpacked):
            if tid not in last["inputs"]:
                last["inputs"].append(tid)
                self.attached_reads += 1

    def finish(self):
        """Ends the step: closes the backward bookkeeping and reads the CUDA timings."""
        if self.phase == "backward":
            self._end_backward()
        self._hold_never_unpacked()
        self.phase = None
        self.clock.finish()

    # ---- ops ------------------------------------------------------------------------------
    def dispatch(self, func, args, kwargs):
        if self.paused or self.phase is None:
            return _call(func, args, kwargs)
        if self._pending_outputs:
            self._hook_new_nodes()
        self._dispatching = func
        inputs = flat_tensors(args, flat_tensors(kwargs, []))
        written = written_arguments(func, args, kwargs)
        input_keys = [self.storage_key(t) for t in inputs]
        input_ids = [self._id_of(key, t) for key, t in zip(input_keys, inputs)]
        self._reads = (func, input_ids, inputs)
        started = self.clock.start()
        result = self.run_op(func, args, kwargs)
        # storage keys once the op has run (`set_` gives its argument another storage)
        written = [(t, self.storage_key(t)) for t in written]
        outputs = [(t, self.storage_key(t)) for t in flat_tensors(result, [])]
        op = self._record(func, args, input_ids, set(input_keys), written, outputs)
        self.clock.stop(op, started)
        if self.phase != "backward":  # forward, and the update alike (`phase_after_backward`)
            self._pending_outputs.append((op["id"], [t for t, _ in outputs]))
        return result

    def run_op(self, func, args, kwargs):
        """Runs a recorded op (memplan.torch.apply runs an update on the host's copies here)."""
        return _call(func, args, kwargs)

    def _keep_read(self, tid):
        """Whether a backward op's read of `tid` reads data held for backward: what autograd
        saved, or a forward tensor the step held beside it (`held`; see the docstring)."""
        if self.phase != "backward" or tid in self.saved or tid in self.held:
            return True
        tensor = self.tensors[tid]
        if tensor["kind"] not in ("activation", "input") or tid in self.persistent:
            return True
        producer = tensor["producer"]
        if producer is not None and self.ops[producer]["phase"] != "forward":
            return True
        func, input_ids, inputs = self._reads
        if op_schema(func).name in _METADATA_READERS:
            self.dropped_reads += 1
            return False
        reads = dict(zip(input_ids, inputs))
        key = self.storage_key(reads[tid])
        self.held[tid] = key
        self.saved_bytes_by_key.setdefault(key, storage_bytes(reads[tid]))
        return True

    def _record(self, func, args, input_ids, input_keys, written, outputs):
        """The op's record, its inputs and outputs: `written` and `outputs` are the tensors of its
        written arguments and of its result, each with its storage key."""
        op_id = len(self.ops)
        short = op_schema(func).short_name
        module = self._module_stack[-1] if self._module_stack and self.phase == "forward" else ""
        op = {"id": op_id, "name": f"{module}.{short}" if module else short,
              "layer": layer_of(func, args), "phase": self.phase, "inputs": [], "outputs": [],
              "workspace_bytes": 0, "duration_ns": 0}
        self.ops.append(op)
        inputs, backward = op["inputs"], self.phase == "backward"
        for tid in input_ids:
            if tid not in inputs and (not backward or self._keep_read(tid)):
                inputs.append(tid)
        kind = "gradient" if backward else "activation"
        written_keys = {key for _, key in written}
        seen = set()
        for t, key in written + outputs:
            if key in seen:
                continue
            seen.add(key)
            if key in input_keys and key not in written_keys:
                continue  # a view of an input, or the input returned as it is
            old = self.current.get(key)
            if old is not None and self.tensors[old]["producer"] is None:
                self._updated_in_place(old)
                continue
            if old is not None and key in input_keys:
                new = self._new_tensor(t, f"{op['name']}.out{len(op['outputs'])}", kind, op_id,
                                       in_place_of=old)
                if old not in op["inputs"]:
                    op["inputs"].append(old)
                if old in self.saved and self.phase == "forward":
                    self._rewrite_saved(old, new)
            else:
                new = self._new_tensor(t, f"{op['name']}.out{len(op['outputs'])}", kind, op_id)
            self.current[key] = new
            op["outputs"].append(new)
        return op

    def _updated_in_place(self, tid):
        """A write into a tensor that existed before the step: it is updated, not versioned (the
        trace keeps pre-existing tensors as one tensor that ops read and update). One the step
        found outside the model, the optimizer and the batch (`external.N`: a GradScaler's scale
        and growth tracker, a counter) is state the training loop carries from step to step: it
        becomes optimizer state, kept on the device from step to step as the optimizer's is."""
        record = self.tensors[tid]
        if record["kind"] == "input" and record["name"].startswith("external."):
            record["kind"] = "optimizer_state"
            record["name"] = f"{LOOP_STATE}{tid}"
            self.persistent.add(tid)

    # ---- the result -----------------------------------------------------------------------
    def saved_bytes(self, kinds=("activation", "input")):
        """Bytes of the distinct storages autograd saved for a node that ran, whose tensors are of
        `kinds` (what no node unpacked goes with the graph unread: `never_unpacked`)."""
        keys = {key for tid, key in self.saved.items()
                if self.tensors[tid]["kind"] in kinds and tid not in self.never_unpacked}
        return sum(self.saved_bytes_by_key[k] for k in keys)

    def held_bytes(self, kinds=("activation", "input")):
        """Bytes of the distinct storages of `kinds` held for backward that autograd did not
        save (`held`): what the trace counts beyond the hooks."""
        saved = set(self.saved.values())
        keys = {key for tid, key in self.held.items()
                if self.tensors[tid]["kind"] in kinds and key not in saved}
        return sum(self.saved_bytes_by_key[k] for k in keys)

    def trace(self, device, provenance):
        return {"format": "memplan-trace", "version": 1, "provenance": provenance,
                "device": device, "tensors": self.tensors, "ops": self.ops}
