"""What a `torch.compile`'d model's step saves: AOTAutograd's forward and backward graphs, run op by op.

What: `step_module(model, warn)` is the module memplan.torch runs for `model` (its eager module
when `model` is an OptimizedModule; the module itself otherwise), with every compiled module of
its tree (the model, or blocks of it, wrapped by torch.compile or compiled in place by
`nn.Module.compile()`) marked with its compile backend, whose AOTAutograd split it runs when the
backend is one whose split is known (`_splits`); `running_compiled(module)` is the context in
which a step calls those modules through their splits; capture, apply and validate run every step
inside it (memplan.torch.capture.run_step).

Why: torch.compile hands the model's graph to AOTAutograd, whose partitioner chooses what the
forward graph saves for backward and what the backward graph recomputes (under inductor, the
default backend, the min-cut rematerialisation with inductor's decompositions; torch's
`activation_memory_budget` acts there); inductor then generates kernels for each graph, which
fuses the intermediates inside a graph but does not change which tensors cross from forward to
backward. Under a dispatch mode TorchDynamo does not compile (it runs the module eagerly), so
capturing the compiled module as it is would record eager's step, which saves other tensors.

How: the split is `aot_function` over `torch.func.functional_call` of the eager module with the
backend's partitioner and decompositions, each graph compiled to itself (an FX graph that calls
its aten ops one by one), so that under the recorder every aten op of both graphs is an op of the
trace and what the forward graph saves is what the compiled step saves. AOTAutograd traces at its
first call, and that first call also runs the forward: `_prime` makes that call once per input
signature (shapes, dtypes; grad, autocast and deterministic algorithms on or off: AOTAutograd
refuses to run a split traced under other settings) on zero-filled stand-ins for every tensor it
takes (the step's own are untouched, and a plan may have emptied them at that point), with the
recorder's dispatch mode and saved-tensor hooks set aside and the random number generators put
back, so that the step's own call is the split's second and is recorded
like any other. A planned step runs the same split, so the plan meets the ops it was made for.
Under inductor the split is partitioned as inductor partitions it (its joint-graph passes: pattern
replacements such as its random-number prims for dropout, then the min-cut), and inductor lowers
the forward graph once, without generating code, to say how it lays out what the forward saves:
where it saves a buffer of its own (a convolution weight or input copied channels-last by its
layout optimisation, an output with padded strides), the forward graph saves a copy of as many
bytes (`_save_as_inductor_lays_out`), so the trace holds the bytes inductor's step saves.
`torch.utils.checkpoint` inside the module is traced as Dynamo hands it to AOTAutograd
(`_checkpoints_as_dynamo_traces_them`): non-reentrant, its region's ops tagged for recomputation
(or as a SAC policy says), so the partitioner recomputes the region as torch.compile's does.

What it does not see: inductor's fusion and scheduling inside a graph (the trace's intermediates
are those of the unfused aten ops, so its transient memory is more than inductor's, and the
layout copies are made where the graph first reads their source; the saved bytes are the same);
graph breaks (the module is traced whole: a forward AOTAutograd cannot trace as one graph,
one that branches on a tensor's value, is run as eager PyTorch runs it, with a
CompiledModelWarning that says why; torch.compile would compile the pieces between the breaks);
module names inside the module (every op of the split is
the module's own: policies by block see no blocks). A backend whose split is not known here
(`eager` needs none; `cudagraphs`, a callable of the user's) is run as eager PyTorch runs the
module, with a CompiledModelWarning for the others.
"""

import contextlib
import functools
import warnings

import torch


class CompiledModelWarning(UserWarning):
    """capture was given a torch.compile'd model whose backend's split memplan does not know: it
    records the model as eager PyTorch runs it."""


def _splits():
    """backend name -> (partition function, decomposition table or None, whether inductor lowers
    the forward graph), as torch's own backends of those names build them
    (torch/_dynamo/backends/debugging.py, torch/_inductor/compile_fx.py)."""
    from functorch.compile import default_partition, min_cut_rematerialization_partition

    def inductor_decompositions():
        # from compile_fx, as aot_eager_decomp_partition takes it: importing it imports the
        # lowerings that some of the decompositions look up (max-pooling's)
        from torch._inductor.compile_fx import select_decomp_table
        return select_decomp_table()

    min_cut_as_inductor = functools.partial(min_cut_rematerialization_partition,
                                            compiler="inductor")

    def inductor_partition(graph, joint_inputs, **kwargs):
        # inductor's own: its joint-graph passes, then the min-cut (PyTorch 2.6 and later have it
        # at module level; before, compile_fx made it inside and the min-cut alone stands in),
        # under the fake mode of the joint graph's inputs, as compile_fx runs it
        from torch._guards import detect_fake_mode
        from torch._inductor import compile_fx
        from torch._inductor.virtualized import V
        partition = getattr(compile_fx, "partition_fn", None)
        if partition is None:
            return min_cut_as_inductor(graph, joint_inputs, **kwargs)
        with V.set_fake_mode(detect_fake_mode(joint_inputs)):
            return partition(graph, joint_inputs, **kwargs)

    return {"inductor": (inductor_partition, inductor_decompositions, True),
            "aot_eager_decomp_partition": (min_cut_as_inductor, inductor_decompositions, False),
            "aot_eager": (min_cut_rematerialization_partition, None, False),
            "aot_eager_default_partitioner": (default_partition, None, False)}


def _compile_context(model):
    """The OptimizeContext `model` was compiled under: an OptimizedModule's `dynamo_ctx`, or for a
    module compiled in place (`nn.Module.compile()`, which wraps its `_call_impl`) the one the
    compiled function closes over; None for a module compiled neither way."""
    if isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
        return getattr(model, "dynamo_ctx", None)
    function = getattr(model, "_compiled_call_impl", None)
    for cell in getattr(function, "__closure__", None) or ():
        if hasattr(cell.cell_contents, "callback"):
            return cell.cell_contents
    return None


def _backend(model):
    """The backend `model` was compiled with (torch.compile or nn.Module.compile), or None: the
    compile wrapper's callback down the chain of `_torchdynamo_orig_backend` to the first that
    has a `compiler_name`."""
    found = getattr(_compile_context(model), "callback", None)
    for _ in range(8):
        if found is None or isinstance(getattr(found, "compiler_name", None), str):
            return found
        found = getattr(found, "_torchdynamo_orig_backend", None)
    return None


def backend_name(model):
    """The name of the backend `model` was compiled with, or None."""
    return getattr(_backend(model), "compiler_name", None)


def step_module(model, warn=False):
    """The module memplan.torch runs for `model`: itself, or the module a torch.compile'd `model`
    wraps. Every compiled module of its tree (the model itself, a block that `torch.compile`
    wrapped, one compiled in place by `nn.Module.compile()`; not the modules inside a compiled
    one, which its split traces) is marked with its backend, and the list of them kept on the
    module that is returned: `running_compiled` then calls each through the backend's split, or
    eagerly, and never through Dynamo (which a deep copy of an in-place compiled module would run
    on the original's `_call_impl`). For a backend whose split is not known, `warn` warns that
    those modules are recorded as eager PyTorch runs them."""
    original = getattr(model, "_orig_mod", None)
    module = original if isinstance(original, torch.nn.Module) else model
    compiled = list(_compiled_modules(model))
    # (the wrapper whose forward must call the module rather than Dynamo, or None, the module):
    # none for the model itself (the module returned is called) or a module compiled in place;
    # added to those an earlier call found (the module a compiled model wraps, given again)
    marked = module.__dict__.setdefault("_memplan_compiled", [])
    for wrapper, eager in compiled:
        if all(eager is not known for _, known in marked):
            marked.append((wrapper if wrapper not in (eager, model) else None, eager))
    unknown = set()
    for wrapper, eager in compiled:
        backend = _backend(wrapper)
        name = getattr(backend, "compiler_name", None)
        eager._memplan_compiled_backend = name or "unknown"
        # torch.compile's mode and options for inductor (`mode="max-autotune"`, `options={...}`):
        # inductor's configuration while it partitions and lays out the split
        eager._memplan_compile_options = dict(getattr(backend, "config", None) or {}) \
            if name == "inductor" else {}
        if name not in _splits() and name != "eager":
            unknown.add(name or "unknown")
    if warn and unknown:
        warnings.warn(f"a torch.compile'd model (backend {', '.join(sorted(unknown))}) is "
                      "captured as eager PyTorch runs it: memplan knows the AOTAutograd split of "
                      "inductor, aot_eager, aot_eager_decomp_partition and "
                      "aot_eager_default_partitioner only; plans are applied and validated on "
                      "the eager model", CompiledModelWarning, stacklevel=3)
    return module


def _compiled_modules(model):
    """(the compiled module, the module it runs) for each compiled module of `model`'s tree, not
    looking inside one: a torch.compile wrapper (OptimizedModule) and the module it wraps; a
    module compiled in place, twice."""
    original = getattr(model, "_orig_mod", None)
    if isinstance(original, torch.nn.Module):
        yield model, original
        return
    if getattr(model, "_compiled_call_impl", None) is not None:
        yield model, model
        return
    for child in model.children():
        yield from _compiled_modules(child)


def compiled_backend(module):
    """The backend whose split a compiled module of `module` (`step_module`'s) runs under
    `running_compiled`, or None (none compiled, or all run eagerly)."""
    for _, eager in getattr(module, "_memplan_compiled", ()):
        if _split_backend(eager) is not None:
            return _split_backend(eager)
    return None


# torch.autograd's own entry points, taken before any step runs: capture watches the step's calls
# of them (memplan.torch.capture._phases), and AOTAutograd's tracing calls them too.
_AUTOGRAD = {name: getattr(torch.autograd, name) for name in ("backward", "grad")}


@contextlib.contextmanager
def _autograd_unwatched():
    """torch.autograd's entry points as torch defines them: AOTAutograd's tracing differentiates
    the joint graph with torch.autograd.grad, which is no backward pass of the step."""
    watched = {name: getattr(torch.autograd, name) for name in _AUTOGRAD}
    for name, function in _AUTOGRAD.items():
        setattr(torch.autograd, name, function)
    try:
        yield
    finally:
        for name, function in watched.items():
            setattr(torch.autograd, name, function)


def _signature(args, kwargs):
    def describe(value):
        if isinstance(value, torch.Tensor):
            return ("tensor", tuple(value.shape), value.dtype, value.device, value.requires_grad)
        return ("value", repr(value))
    autocast = tuple((device, torch.is_autocast_enabled(device))
                     for device in ("cpu", "cuda")) if _autocast_takes_device() else \
        (torch.is_autocast_enabled(), torch.is_autocast_cpu_enabled())
    return (tuple(describe(a) for a in args),
            tuple((k, describe(v)) for k, v in sorted(kwargs.items())),
            torch.is_grad_enabled(), autocast, torch.are_deterministic_algorithms_enabled())


@functools.lru_cache(maxsize=None)
def _autocast_takes_device():
    try:
        torch.is_autocast_enabled("cpu")
        return True
    except TypeError:
        return False


@contextlib.contextmanager
def _class_forward(module):
    """`module` with its class's forward while AOTAutograd traces it (not the split's)."""
    own = module.__dict__.pop("forward", None)
    try:
        yield
    finally:
        if own is not None:
            module.forward = own


def _split(module, backend):
    from functorch.compile import aot_function, make_boxed_func
    partition, decompositions, lowered = _splits()[backend]
    options = getattr(module, "_memplan_compile_options", None)
    if options:
        partition = _under_inductor_options(partition, options)

    def graph_itself(graph, example_inputs):
        return make_boxed_func(graph.forward)

    def forward_as_inductor_saves(graph, example_inputs):
        _under_inductor_options(_save_as_inductor_lays_out, options)(graph, example_inputs)
        return make_boxed_func(graph.forward)

    def functional(params, buffers, *args, **kwargs):
        return torch.func.functional_call(module, {**params, **buffers}, args, kwargs)

    return aot_function(functional,
                        fw_compiler=forward_as_inductor_saves if lowered else graph_itself,
                        bw_compiler=graph_itself, partition_fn=partition,
                        decompositions=decompositions() if decompositions else None,
                        num_params_buffers=len(_named(module)[0]) + len(_named(module)[1]))


def _under_inductor_options(function, options):
    """`function` run with inductor's configuration patched by `options` (a torch.compile
    wrapper's, validated when it was made), as compile_fx runs under them."""
    if not options:
        return function

    @functools.wraps(function)
    def patched(*args, **kwargs):
        from torch._inductor import config
        with config.patch(options):
            return function(*args, **kwargs)
    return patched


class _Lowered(Exception):
    """Inductor has lowered a graph: what memplan asks of it is known, its code is not needed."""


def _inductor_outputs(graph, example_inputs):
    """The forward graph's outputs as inductor lays them out: for each, the name of its buffer (a
    graph input's own name where inductor returns that input) and the elements its layout spans;
    None for an output that is no tensor. Inductor lowers a copy of `graph` (its post-grad passes,
    then the lowering, which decides every buffer's layout) and stops before generating code."""
    import copy

    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.graph import GraphLowering

    lowerings = []

    def stop(lowering, *args, **kwargs):
        lowerings.append(lowering)
        raise _Lowered()

    compile_to_module = GraphLowering.compile_to_module
    GraphLowering.compile_to_module = stop
    try:
        with config.patch(fx_graph_cache=False):
            compile_fx_inner(copy.deepcopy(graph), example_inputs)
    except Exception:  # inductor wraps _Lowered in its own error
        if not lowerings:
            raise
    finally:
        GraphLowering.compile_to_module = compile_to_module
    if not lowerings:
        raise RuntimeError("inductor compiled the forward graph without lowering it here")
    described = []
    for output in lowerings[0].graph_outputs:
        layout = output.get_layout() if output.has_tensor_output() else None
        described.append(None if layout is None else
                         (output.get_name(), int(layout.storage_size())))
    return described


def _extent(size, stride):
    """Elements from a tensor's first to one past its last (its storage offset aside)."""
    return 0 if 0 in size else 1 + sum((n - 1) * s for n, s in zip(size, stride))


def _copy_of_extent(graph, value, own, extent):
    """Nodes of `graph` that copy `value` (`own` its example) into a storage of `extent`
    elements, in `own`'s strides: the bytes inductor's buffer holds, read by the backward graph
    as the graph's own output was (its views assume those strides)."""
    aten = torch.ops.aten
    if extent == _extent(own.shape, own.stride()):
        return graph.call_function(aten.clone.default, (value,))
    storage = graph.call_function(aten.empty.memory_format, ([extent],),
                                  {"dtype": own.dtype, "device": own.device})
    view = graph.call_function(aten.as_strided.default, (storage, list(own.shape),
                                                          list(own.stride())))
    return graph.call_function(aten.copy_.default, (view, value))


def _save_as_inductor_lays_out(graph, example_inputs):
    """Makes `graph` (the forward graph) save the bytes inductor's forward saves. Where inductor
    returns an output in a buffer of its own that the graph's output is not, the graph saves a
    copy, in a storage of the elements inductor's layout spans: a graph input (a convolution's
    weight or input) that layout optimisation (`torch._inductor.config.layout_optimization`)
    copies channels-last (inductor's convolution reads that copy and backward gets it; here the
    convolution reads the input, whose values the copy holds); and an output whose strides
    inductor pads (`comprehensive_padding`, on by default for GPUs). The copy is made just
    before the input's first reader, or just after the output's producer. If
    inductor cannot say (another version's internals, dynamic shapes), the graph stays as it is
    and a CompiledModelWarning says so."""
    try:
        laid_out = _inductor_outputs(graph, example_inputs)
    except Exception as error:  # noqa: BLE001 - any failure of inductor's internals
        said = (str(error).splitlines() or [""])[0][:200]
        warnings.warn("memplan could not read how inductor lays out the forward graph's saved "
                      f"tensors ({type(error).__name__}: {said}): "
                      "its layout copies (channels-last convolution weights, padded strides) "
                      "are not in the trace", CompiledModelWarning, stacklevel=2)
        return
    nodes = list(graph.graph.nodes)
    order = {node: i for i, node in enumerate(nodes)}
    output = nodes[-1]
    values = list(output.args[0])
    inputs = {node.target for node in nodes if node.op == "placeholder"}
    for i, (value, described) in enumerate(zip(values, laid_out)):
        if described is None or not isinstance(value, torch.fx.Node) or \
                not isinstance(value.meta.get("val"), torch.Tensor):
            continue
        name, extent = described
        own = value.meta["val"]
        if value.op == "placeholder":
            copied = name not in inputs
        else:
            copied = extent > _extent(own.shape, own.stride())
        if not copied:
            continue
        readers = sorted((n for n in value.users if n is not output), key=order.get)
        place = readers[0] if value.op == "placeholder" and readers else value.next
        with graph.graph.inserting_before(place):
            values[i] = _copy_of_extent(graph.graph, value, own, extent)
    output.args = (type(output.args[0])(values),) + tuple(output.args[1:])
    graph.recompile()


def _named(module):
    """The split's parameters and buffers, each once: a tied weight (a GPT's embedding and head)
    under one name, which functional_call ties to the others (its `tie_weights`), so that no two
    of the split's inputs alias (AOTAutograd would rebuild aliased inputs from a synthetic base,
    views a host-placed parameter's emptied storage cannot give)."""
    return dict(module.named_parameters()), dict(module.named_buffers())


def _stand_in(value):
    """A tensor like `value` (shape, strides, dtype, device, requires_grad) holding zeros, for the
    split's first call: the tensors a planned step hands the split may have emptied storages (a
    host-placed parameter or batch tensor before its copy comes back), and the first call must
    change none of the step's tensors (a batch-norm buffer). Anything else as it is."""
    if not isinstance(value, torch.Tensor):
        return value
    with torch.no_grad():
        stand_in = torch.empty_strided(value.size(), value.stride(), dtype=value.dtype,
                                       device=value.device).zero_()
    return stand_in.requires_grad_(value.requires_grad)


@contextlib.contextmanager
def _checkpoints_as_dynamo_traces_them():
    """`torch.utils.checkpoint` inside the split's tracing as Dynamo hands it to AOTAutograd
    (torch/_higher_order_ops/wrap.py, tag_activation_checkpoint): non-reentrant whatever
    `use_reentrant` says, without preserving the random state (inductor does that), its ops
    tagged for recomputation by selective checkpointing's dispatch mode (the user's `context_fn`
    if given, else a policy that prefers recomputing every op) under a graph id of its own, so
    that the partitioner recomputes the region in backward as torch.compile's does. Patched where
    torch.utils.checkpoint looks them up at each call (its non-reentrant generator, under either
    of its names, and CheckpointFunction); on a PyTorch without selective checkpointing (before
    2.4) nothing changes."""
    import inspect
    import itertools

    import torch.fx.traceback as fx_traceback
    from torch.utils import checkpoint as torch_checkpoint
    if not hasattr(torch_checkpoint, "create_selective_checkpoint_contexts"):
        yield
        return
    graph_ids = itertools.count()

    def prefer_recompute(ctx, op, *args, **kwargs):
        return torch_checkpoint.CheckpointPolicy.PREFER_RECOMPUTE

    def tagged(context_fn):
        if getattr(context_fn, "_memplan_tagged", False):
            return context_fn
        base = functools.partial(torch_checkpoint.create_selective_checkpoint_contexts,
                                 prefer_recompute) \
            if context_fn is torch_checkpoint.noop_context_fn else context_fn
        graph_id = next(graph_ids)

        def with_graph_id():
            forward_context, recompute_context = base()
            forward_context.ac_graph_id = graph_id
            return forward_context, recompute_context
        with_graph_id._memplan_tagged = True
        return with_graph_id

    def as_traced(generator):
        signature = inspect.signature(generator)

        @functools.wraps(generator)
        def traced(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            bound.arguments["context_fn"] = tagged(bound.arguments["context_fn"])
            bound.arguments["preserve_rng_state"] = False
            if "early_stop" in bound.arguments:
                bound.arguments["early_stop"] = False
            return tagging_the_region(generator(*bound.args, **bound.kwargs))
        return traced

    def tagging_the_region(region):
        # the tags selective checkpointing sets go on the nodes traced from the region's first
        # step to its last (the checkpointed function runs between them), and no further
        with fx_traceback.preserve_node_meta():
            return (yield from region)

    class NonReentrant:
        @staticmethod
        def apply(function, preserve, *args):
            return torch_checkpoint.checkpoint(function, *args, use_reentrant=False,
                                               preserve_rng_state=preserve)

    patched = {name: getattr(torch_checkpoint, name) for name in
               ("_checkpoint_without_reentrant_generator",
                "_checkpoint_without_reentrant_generator_impl", "CheckpointFunction")
               if hasattr(torch_checkpoint, name)}
    try:
        for name, original in patched.items():
            setattr(torch_checkpoint, name,
                    NonReentrant if name == "CheckpointFunction" else as_traced(original))
        yield
    finally:
        for name, original in patched.items():
            setattr(torch_checkpoint, name, original)


def _prime(module, split, args, kwargs):
    """The split's first call (AOTAutograd traces it and runs the forward) on stand-ins for every
    tensor it takes, with no dispatch mode and no saved-tensor hooks of the caller's and the random
    state put back; its tracing's torch.autograd.grad is not the step's backward pass
    (`_autograd_unwatched`)."""
    from torch.utils._python_dispatch import _disable_current_modes
    devices = sorted({t.device.index or 0 for t in [*module.parameters(), *args]
                      if isinstance(t, torch.Tensor) and t.device.type == "cuda"})
    with _disable_current_modes(), torch.random.fork_rng(devices=devices), \
            torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t), \
            _class_forward(module), _autograd_unwatched(), _checkpoints_as_dynamo_traces_them():
        params, buffers = ({name: _stand_in(t) for name, t in named.items()}
                           for named in _named(module))
        split(params, buffers, *(_stand_in(a) for a in args),
              **{k: _stand_in(v) for k, v in kwargs.items()})


def running_compiled(module):
    """A context in which each compiled module of `module` (`step_module`'s) runs its backend's
    split, or eagerly for a backend whose split is not known, and a torch.compile wrapper inside
    the tree calls the module it wraps rather than Dynamo; nothing changes for a module
    `step_module` did not see. A class, not a generator: a generator's frame would hold the
    step's recorder in a reference cycle with an exception raised through it."""
    compiled = getattr(module, "_memplan_compiled", None)
    if not compiled:
        return contextlib.nullcontext()
    return _RunningCompiled(compiled)


class _RunningCompiled:
    """The splits of a tree's compiled modules, entered and left together."""

    def __init__(self, compiled):
        self.running = [_RunningSplit(eager, _split_backend(eager), wrapper)
                        for wrapper, eager in compiled]

    def __enter__(self):
        for running in self.running:
            running.__enter__()

    def __exit__(self, *exc):
        for running in reversed(self.running):
            running.__exit__(*exc)


def _split_backend(eager):
    """The backend whose split the compiled module `eager` runs, or None (run eagerly)."""
    name = getattr(eager, "_memplan_compiled_backend", None)
    return name if name in _splits() else None


class _Splits(dict):
    """A module's splits by input signature. Pickled empty (a split is closures; saving the whole
    module with torch.save must not fail for them: it traces again where it is loaded), and a
    deep copy shares them (a split takes the parameters and buffers as arguments)."""

    def __reduce__(self):
        return _Splits, ()

    def __deepcopy__(self, memo):
        return _Splits(self)


class _RunningSplit:
    """Calls of the module go to its class's `_call_impl` (not the `_compiled_call_impl` an
    in-place compile set), a torch.compile `wrapper`'s (if any) to the module rather than to
    Dynamo, and, for a known backend, the module's forward to the split."""

    def __init__(self, module, backend, wrapper=None):
        self.module, self.backend, self.wrapper = module, backend, wrapper
        # input signature -> the split (an aot_function), kept on the module: a split takes the
        # parameters and buffers as arguments, so a copy of the module may run its original's
        self.splits = module.__dict__.setdefault("_memplan_splits", _Splits())
        self.compiled_call = self.wrapper_forward = None

    def __enter__(self):
        self.compiled_call = self.module.__dict__.get("_compiled_call_impl")
        if self.compiled_call is not None:
            self.module._compiled_call_impl = None
        if self.wrapper is not None:
            self.wrapper_forward = self.wrapper.__dict__.get("forward")
            self.wrapper.forward = self.module.__call__
        if self.backend is not None:
            self.module.forward = self.forward

    def __exit__(self, *exc):
        self.module.__dict__.pop("forward", None)
        if self.wrapper is not None:
            if self.wrapper_forward is None:
                self.wrapper.__dict__.pop("forward", None)
            else:
                self.wrapper.forward = self.wrapper_forward
        if self.compiled_call is not None:
            self.module._compiled_call_impl = self.compiled_call

    def forward(self, *args, **kwargs):
        key = _signature(args, kwargs)
        if key not in self.splits:
            self.splits[key] = self._traced(args, kwargs)
        split = self.splits[key]
        if split is None:
            return type(self.module).forward(self.module, *args, **kwargs)
        return split(*_named(self.module), *args, **kwargs)

    def _traced(self, args, kwargs):
        """The split for these inputs, or None where AOTAutograd cannot trace the forward as one
        graph (a branch on a tensor's value, `.item()`, an op it cannot trace: where torch.compile
        breaks the graph and runs the piece between graphs eagerly); then the module runs as
        eager PyTorch runs it, with a CompiledModelWarning that says why (if the forward fails
        eagerly too, that error is the step's)."""
        split = _split(self.module, self.backend)
        try:
            _prime(self.module, split, args, kwargs)
        except Exception as error:  # noqa: BLE001 - whatever stops the tracing
            said = (str(error).splitlines() or [""])[0][:200]
            warnings.warn(f"the forward of a torch.compile'd {type(self.module).__name__} cannot "
                          f"be traced as one graph ({type(error).__name__}: {said}), as "
                          "torch.compile would break it: memplan captures, plans and runs it as "
                          "eager PyTorch runs it", CompiledModelWarning, stacklevel=3)
            return None
        return split
