"""Traces: one training step (trace format v1, traces/FORMAT.md) as a Python object."""
import json
import os

from memplan import _core, _tables
from memplan._files import write_output
from memplan._numbers import whole


class Trace:
    """One training step: the ops in issue order, the tensors they read and write, the device.

    Make one with load_trace(), parse_trace(), zoo() or import_kineto(). `name` names it in
    sweeps and messages (the path it was read from, or the zoo model).
    """

    def __init__(self, workload, name):
        self._workload = workload
        self.name = name

    @property
    def op_count(self):
        return self._workload.op_count

    @property
    def tensor_count(self):
        return self._workload.tensor_count

    @property
    def device(self):
        """The device's name (the trace's `device.name`)."""
        return self._workload.device

    @property
    def device_memory_bytes(self):
        return self._workload.device_memory_bytes

    @property
    def rank(self):
        """The step's global rank in its job (the trace's `distributed`), None for one GPU's."""
        return self._workload.rank

    @property
    def world_size(self):
        """The job's world size, 1 for one GPU's step."""
        return self._workload.world_size

    def to_json(self):
        """The trace file's text (stable: what write() writes)."""
        return _core.write_trace(self._workload)

    def to_dict(self):
        """The trace file as a dict."""
        return json.loads(self.to_json())

    def write(self, path):
        """Writes the trace file atomically (nothing half-written on failure)."""
        write_output(path, _core.write_trace(self._workload))

    def ops(self):
        """A DataFrame, one row per op (the trace's `ops` fields)."""
        return _tables.frame(self.to_dict()["ops"])

    def tensors(self):
        """A DataFrame, one row per tensor (the trace's `tensors` fields)."""
        return _tables.frame(self.to_dict()["tensors"])

    @property
    def fingerprint(self):
        """The workload fingerprint (16 hex digits) that plans made on this trace carry: its
        structure (tensors, ops and their links), not its durations or device."""
        return _core.workload_fingerprint(self._workload)

    def feature_maps(self):
        """Ids of the feature maps, ascending: the activations forward writes and backward reads,
        what a plan decides about."""
        return _core.feature_maps(self._workload)

    def storage_roots(self):
        """Per tensor id, the tensor that allocates its buffer: itself, or the root of the chain of
        tensors it is written in place over (`in_place_of`)."""
        return _core.storage_roots(self._workload)

    def last_uses(self):
        """Per tensor id, the last op that reads it (None when no op does)."""
        return _core.last_uses(self._workload)

    def backward_node_ends(self):
        """Ids of the ops that end a backward node (the last of a run of backward ops that
        differentiate one forward op, or a backward op of unknown origin), ascending."""
        return _core.backward_node_ends(self._workload)

    def saved_activation_bytes(self):
        """The bytes of the distinct buffers backward reads from forward (activations and inputs):
        what PyTorch's saved-tensor hooks count."""
        return _core.saved_activation_bytes(self._workload)

    def info(self):
        """What `memplan info` shows: ops, tensors by kind, feature maps, in-core peak."""
        return Info(json.loads(_core.info_json(self._workload)), _core.info_text(self._workload))

    def __eq__(self, other):
        return isinstance(other, Trace) and self._workload == other._workload

    def __repr__(self):
        return f"<memplan.Trace {self.name!r}: {self.op_count} ops, {self.tensor_count} tensors>"


class Job:
    """One step of a training job that ran on several GPUs (trace format v3 `ranks`): `ranks`,
    one Trace per rank in rank order, and `world_size`, the job's (a file may hold some ranks of
    a larger world: the peers it lacks are taken to be alike, as the commands take them).

    Make one with load_job(), parse_job() or import_kineto_job(); simulate(), compare(),
    search() and machine() take it as the commands take a job's file. `name` names it in errors
    (the path it was read from).
    """

    def __init__(self, job, name):
        self._job = job
        self.name = name
        self.ranks = [Trace(w, f"{name}: rank {i if w.rank is None else w.rank}")
                      for i, w in enumerate(_core.job_ranks(job))]

    @property
    def world_size(self):
        return self._job.world_size

    @property
    def backend(self):
        """The communication backend the ranks recorded ("nccl", "rccl", ...), or None."""
        return self.ranks[0]._workload.backend

    def to_json(self):
        """The job's trace file (format v3 `ranks`; a job of one rank is that rank's trace)."""
        return _core.write_job(self._job)

    def write(self, path):
        """Writes the job's trace file atomically (what `memplan import kineto -o` writes)."""
        write_output(path, _core.write_job(self._job))

    def collectives(self):
        """A DataFrame, one row per collective op of each rank as recorded: rank, op (its id),
        name, stream, duration_ns (the recorded transfer), and the op's `collective` fields
        (kind, in_bytes, out_bytes, dtype, group, sequence; ranks and peer when set)."""
        rows = [{"rank": t.rank, "op": op["id"], "name": op["name"],
                 "stream": op.get("stream", 0), "duration_ns": op["duration_ns"],
                 **op["collective"]}
                for t in self.ranks for op in t.to_dict()["ops"] if "collective" in op]
        return _tables.frame(rows, ["rank", "op", "name", "stream", "duration_ns", "kind",
                                    "in_bytes", "out_bytes", "dtype", "group", "sequence"])

    def __eq__(self, other):
        return isinstance(other, Job) and self._job == other._job

    def __repr__(self):
        return (f"<memplan.Job {self.name!r}: {len(self.ranks)} of {self.world_size} ranks, "
                f"{sum(t.op_count for t in self.ranks)} ops>")


class Info(_tables.JsonFields):
    """`memplan info` of a trace: `data` is its JSON object (keys in traces/FORMAT.md), `text`
    its report; the keys are also attributes (info.peak_bytes_incore)."""

    def __init__(self, data, text):
        self.data = data
        self.text = text

    def to_dataframe(self):
        """Ops per phase and layer type: one row per (phase, layer) with its op count."""
        rows = [{"phase": phase, "layer": layer, "ops": n}
                for phase, layers in self.data["ops_by_phase_and_layer"].items()
                for layer, n in layers.items()]
        return _tables.frame(rows, ["phase", "layer", "ops"])

    def __str__(self):
        return self.text

    def __repr__(self):
        peak = self.data.get("peak_bytes_incore")
        return f"<memplan.Info {self.data.get('ops')} ops, in-core peak {peak} B>"


def as_trace(value):
    """`value` as the commands take it: a Trace or Job as it is, anything that knows its trace
    (`value.memplan_trace()`: memplan.torch's Capture) as that trace. TypeError otherwise."""
    if isinstance(value, (Trace, Job)):
        return value
    to_trace = getattr(value, "memplan_trace", None)
    if callable(to_trace):
        return to_trace()
    raise TypeError(f"expected a memplan.Trace, a memplan.Job or a memplan.torch.Capture, not "
                    f"{type(value).__name__}")


def load_trace(path):
    """Reads and validates a trace file. Raises InputError naming the file and JSON path."""
    return Trace(_core.read_trace(os.fspath(path)), str(path))


def load_job(path):
    """Reads and validates any trace file as a Job: a job's file of several ranks, or a step of one
    GPU as a job of one rank (what the commands that take a job read). Raises InputError naming
    the file, the rank and the JSON path."""
    return Job(_core.read_job(os.fspath(path)), str(path))


def parse_job(text, name="<string>"):
    """Parses and validates trace text as a Job; `name` names it in errors."""
    return Job(_core.parse_job(text, name), name)


def parse_trace(text, name="<string>"):
    """Parses and validates trace text; `name` names it in errors."""
    return Trace(_core.parse_trace(text, name), name)


def zoo(model, device, batch, input=None, depth=None, layers=None, hidden=None, heads=None,
        seq=None, vocab=None, intermediate=None, kv_heads=None, optimizer="sgd", precision="fp32",
        attention=None, activation=None, channels_last=False, data_parallel=None, fsdp=None,
        fsdp_strategy=None, fsdp_prefetch=None, interconnect=None, network=None,
        gpus_per_node=None):
    """The zoo's modeled training step of `model` on the `device` preset (`memplan zoo`).

    input: extents, "224x224" or (224, 224) (TxHxW for clips); depth: the deep residual family's;
    layers, hidden, heads, seq, vocab, intermediate (the MLP's width): a decoder's (gpt, llama),
    each the model's default when None; kv_heads: llama's key/value heads (grouped-query
    attention); optimizer: "sgd" (momentum) or "adam" (two state tensors per parameter);
    precision: "fp32", "tf32" (float32 tensors, TF32 tensor-core matmuls and convolutions), "bf16"
    or "fp16" (torch.autocast's dtypes, float32 parameters, gradients and optimizer state; fp16
    with a GradScaler), refused on a device without that tensor-core rate; attention (gpt, llama,
    vit_b16): "eager" (scores, softmax, P·V, the S×S probabilities saved) or "sdpa" (PyTorch's
    fused scaled_dot_product_attention, FlashAttention-2), None for the precision's default (sdpa
    for bf16 and fp16, eager for fp32 and tf32); activation (gpt): "gelu" (fused, the default) or
    "gelu_new" (Hugging Face GPT-2's eight elementwise kernels); channels_last: the activations in
    NHWC (torch.channels_last), else NCHW, whose tensor-core convolutions cuDNN transposes. See
    zoo_models(), zoo_devices().

    data_parallel=N (DDP) or fsdp=N (FSDP; fsdp_strategy "full-shard" or "shard-grad-op",
    fsdp_prefetch units ahead), priced on interconnect, network and gpus_per_node: a Job, rank 0's
    step of the job on N GPUs (`--data-parallel`, `--fsdp`, docs/zoo.md).
    """
    if isinstance(input, str):
        input = _parse_extents(input)
    transformer = _core.TransformerOptions()
    for key, value in dict(layers=layers, hidden=hidden, heads=heads, sequence=seq, vocab=vocab,
                           intermediate=intermediate, kv_heads=kv_heads).items():
        if value is not None:
            flag = "--" + {"sequence": "seq", "kv_heads": "kv-heads"}.get(key, key)
            setattr(transformer, key, whole(value, flag))
    workload = _core.zoo_workload(model, device, whole(batch, "--batch"), list(input or []),
                                  depth, transformer, optimizer, precision, attention,
                                  activation, bool(channels_last))
    name = f"{model}_{device}_b{batch}"
    parallel = dict(data_parallel=data_parallel, fsdp=fsdp, fsdp_strategy=fsdp_strategy,
                    fsdp_prefetch=fsdp_prefetch, interconnect=interconnect, network=network,
                    gpus_per_node=gpus_per_node)
    if all(v is None for v in parallel.values()):
        return Trace(workload, name)
    request = _core.DataParallelRequest()
    for key, value in parallel.items():
        if value is not None:
            flag = "--" + key.replace("_", "-")
            setattr(request, key, value if isinstance(value, str) else whole(value, flag))
    return Job(_core.zoo_data_parallel_job(workload, device, request), name)


def _parse_extents(text):
    try:
        return [int(part) for part in text.split("x")]
    except ValueError:
        raise _core.InputError(f"--input: '{text}' is not HxW or TxHxW") from None


def zoo_models():
    """The zoo's model names."""
    return _core.zoo_model_names().split(", ")


def zoo_devices():
    """The zoo's device presets."""
    return _core.zoo_device_names().split(", ")


def import_kineto(path, step=None, snapshot=None, snapshot_device=None):
    """A trace from a PyTorch profiler (Kineto) Chrome trace, .json or .json.gz (`memplan import
    kineto`); `step` is the N of ProfilerStep#N (default: the median complete step, Note [Default
    step] in importers/kineto/step_selection.cpp). `snapshot`: a CUDA memory snapshot of the same
    run (`--snapshot`), whose allocations give sizes to a step recorded without shapes
    (`snapshot_device`: its device that ran the step, when several have events)."""
    return Trace(_core.import_kineto(os.fspath(path), step,
                                     None if snapshot is None else os.fspath(snapshot),
                                     snapshot_device), str(path))


class Snapshot(_tables.JsonFields):
    """A PyTorch CUDA memory snapshot as `memplan import snapshot` reads it (as data: a pickle that
    would import or call anything raises InputError): `data` is its JSON object (`file`,
    `segments`, `devices`, `allocator_settings`; docs/snapshots.md), `text` its report; the keys
    are also attributes (snapshot.devices)."""

    def __init__(self, data, text):
        self.data = data
        self.text = text

    def to_dataframe(self):
        """One row per device: its figures at the dump and over the events."""
        columns = ["device", "segments", "reserved_bytes", "allocated_bytes", "requested_bytes",
                   "events", "event_sizes", "live_bytes_at_first_event", "peak_live_bytes",
                   "reserved_bytes_at_first_event", "peak_reserved_bytes"]
        return _tables.frame([{c: d[c] for c in columns} for d in self.data["devices"]], columns)

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"<memplan.Snapshot {self.data['file']!r}: {self.data['segments']} segments>"


def import_snapshot(path, trace=None):
    """The memory snapshot `path` wrote by torch.cuda.memory._dump_snapshot (.pickle or
    .pickle.gz), read as data only (`memplan import snapshot`). `trace`: a PyTorch profiler trace
    of the same run, joined by time (`--trace`): each device's `trace_join` attributes its
    allocations to the ops that made them (`by_op`: op, allocations, bytes)."""
    data, text = _core.import_snapshot(os.fspath(path), "" if trace is None else os.fspath(trace))
    return Snapshot(json.loads(data), text)


def import_kineto_job(paths, step=None, ranks=None, snapshots=None, snapshot_device=None):
    """A Job from the PyTorch profiler (Kineto) traces of a job's ranks (`memplan import kineto`):
    `paths` is a file, a folder of .json/.json.gz files, or a list of them; a merged file holds
    several ranks. `step`: the N of ProfilerStep#N on every rank (default: one that stands for the
    steady state, the same on every rank); `ranks`: each trace's global rank, in the order read,
    for files that record none; `snapshots`: a memory snapshot of each rank, in rank order, whose
    allocations give sizes to steps recorded without shapes (`--snapshot`, repeated)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    return Job(_core.import_kineto_job(paths, step, [int(r) for r in ranks or []],
                                       [os.fspath(s) for s in snapshots or []], snapshot_device),
               ", ".join(paths))
