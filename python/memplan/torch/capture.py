"""`capture`: one real training step of a PyTorch model, recorded as a memplan trace (v1 JSON).

The step is `default_step` (`optimizer.zero_grad()`, `loss = loss_fn(model(*batch[:-1]),
batch[-1])`, `loss.backward()`, `optimizer.step()`) or the user's own, a callable
`step(model, batch, loss_fn, optimizer)` that returns the loss: under autocast with a GradScaler,
with gradient clipping, a loss of its own making, gradient accumulation (for each of k
micro-batches the forward pass, the loss divided by k and its backward pass, then one optimizer
step), anything a training loop does in one step. It runs after `warmup_steps` unrecorded steps
(they create the optimizer's state, so that it exists before the recorded step as the trace format
wants, and warm the allocator). The model and optimizer are trained by those steps: capture does
not restore them.

The step's phases are told by what it calls, not by where it is written (`_phases`): forward until
a backward pass starts (`torch.autograd.backward`, which `Tensor.backward` calls, or
`torch.autograd.grad`), backward inside it, then forward again (the next micro-batch's) until the
next backward pass, and update after the last one (unscaling, clipping, the optimizer's step, the
scaler's update): ops carry their phase in the trace, so a step of k micro-batches is k forward and
backward passes alternating, then the update. Each micro-batch's saved tensors are read by its own
backward pass only; the second pass adds into the `.grad` tensors the first one made (autograd's
AccumulateGrad: an in-place `add_`, a new version of each gradient). A step that runs no backward
pass is refused in one line (`StepError`).

`memplan_trace(captured)` is the captured trace as a memplan.Trace (read and checked by memplan's
C++ trace reader): what every question memplan.torch asks the simulator takes, in process.
"""

import contextlib
import json
import os
import time

import torch

import memplan
from memplan._files import write_output
from memplan.torch.compiled import running_compiled, step_module
from memplan.torch.recorder import StepRecorder


class Capture:
    """What `capture` returns: the trace (a dict in trace format v1) and the hooks' counts. The
    trace's saved bytes (`saved_bytes_in_trace`) are `saved_bytes_hooks + held_bytes`, its
    feature-map bytes `saved_activation_bytes_hooks + held_activation_bytes`."""

    def __init__(self, trace, saved_bytes_hooks, saved_activation_bytes_hooks, stats,
                 held_bytes=0, held_activation_bytes=0):
        self.trace = trace
        #: bytes of the distinct storages autograd saved for a node that ran, parameters and
        #: optimizer state left out (the batch's tensors counted, as the zoo counts them); what a
        #: branch that does not reach the loss saved is never unpacked and not counted
        #: (`stats["never_unpacked"]`: their trace ids)
        self.saved_bytes_hooks = saved_bytes_hooks
        #: the same, activations only: what `memplan info` calls feature_map_bytes
        self.saved_activation_bytes_hooks = saved_activation_bytes_hooks
        #: bytes of the distinct storages backward read that the step held beside what autograd
        #: saved (the inputs torch 1.13's non-reentrant checkpoint keeps in its closure): the
        #: hooks do not see them (`stats["held_tensors"]`: their trace ids)
        self.held_bytes = held_bytes
        #: the same, activations only
        self.held_activation_bytes = held_activation_bytes
        self.stats = stats
        self._trace = None

    def save(self, path):
        """Writes the trace to `path` as every memplan output is written (memplan._files: "-"
        standard output, a file through a temporary file and a rename); memplan.InputError
        naming the file when it cannot."""
        write_trace(self.trace, path)

    def memplan_trace(self):
        """The trace as a memplan.Trace (read and checked by memplan's C++ trace reader, once):
        what memplan.simulate, compare, search and info take a Capture as."""
        if self._trace is None:
            self._trace = memplan_trace(self.trace)
        return self._trace


def write_trace(trace, path):
    """Writes a trace dict to `path` as every memplan output is written (memplan._files)."""
    write_output(path, _trace_text(trace))


def _trace_text(trace):
    """A trace dict as memplan writes traces: one line per tensor and per op."""
    lines = ["{"]
    for key in ("format", "version", "provenance", "device"):
        lines.append(f"{json.dumps(key)}: {json.dumps(trace[key])},")
    for key, last in (("tensors", False), ("ops", True)):
        items = ",\n  ".join(json.dumps(item) for item in trace[key])
        body = f"[\n  {items}\n]" if trace[key] else "[]"
        lines.append(f"{json.dumps(key)}: {body}" + ("" if last else ","))
    lines.append("}")
    return "\n".join(lines) + "\n"


def memplan_trace(captured):
    """A captured trace (a Capture or its dict) as a memplan.Trace; memplan.InputError (one line)
    when memplan's trace reader refuses it."""
    trace = captured.trace if isinstance(captured, Capture) else captured
    return memplan.parse_trace(json.dumps(trace), "the captured trace")


def saved_bytes_in_trace(trace):
    """The trace's own count of what backward keeps (a Capture, a trace dict): the distinct
    buffers of activations and inputs read by backward ops (zoo::saved_activation_bytes)."""
    return memplan_trace(trace).saved_activation_bytes()


@contextlib.contextmanager
def step_part(name, attribute="step_part"):
    """Marks an exception raised inside with the part of the step it came from (its `attribute`,
    the innermost part's name kept), for a one-line report (memplan.torch's command line): the
    exception itself goes on unchanged."""
    try:
        yield
    except Exception as e:
        if not hasattr(e, attribute):
            setattr(e, attribute, name)
        raise


class StepError(ValueError):
    """A step the trace cannot hold (no backward pass): one line."""


def default_step(model, batch, loss_fn, optimizer):
    """The step `capture`, `apply` and `validate` run when given none: zero the gradients, the
    forward pass and the loss, the backward pass, the optimizer's step. Returns the loss."""
    optimizer.zero_grad(set_to_none=True)
    with step_part("the forward pass"):
        output = model(*batch[:-1])
    with step_part("the loss"):
        loss = loss_fn(output, batch[-1])
    del output
    with step_part("the backward pass"):
        loss.backward()
    with step_part("the optimizer step"):
        optimizer.step()
    return loss


@contextlib.contextmanager
def _phases(recorder):
    """Tells `recorder` the step's phases from what the step calls (the module's docstring):
    `torch.autograd.backward` and `torch.autograd.grad` are wrapped while the step runs. What
    follows a backward pass is the next micro-batch's forward pass or the update, which the
    recorder tells (`StepRecorder.phase_after_backward`: capture records it as forward, apply takes
    the captured trace's phase); once the step has returned, what follows its last backward pass is
    the update (`StepRecorder.update_after_last_backward`)."""
    originals = {name: getattr(torch.autograd, name) for name in ("backward", "grad")}
    passes = []
    inside = []  # the backward pass running now: a call within it is part of it

    def watched(name):
        def run(*args, **kwargs):
            if inside:  # reentrant torch.utils.checkpoint runs its block's backward so
                return originals[name](*args, **kwargs)
            passes.append(name)
            inside.append(name)
            recorder.begin_phase("backward")
            try:
                return originals[name](*args, **kwargs)
            finally:
                inside.clear()
                recorder.begin_phase(recorder.phase_after_backward())
        return run

    recorder.begin_phase("forward")
    for name in originals:
        setattr(torch.autograd, name, watched(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(torch.autograd, name, original)
    if not passes:
        raise StepError("the step ran no backward pass (torch.autograd.backward or "
                        "torch.autograd.grad): there is nothing for a plan to keep")
    recorder.update_after_last_backward()


def run_step(model, batch, loss_fn, optimizer, recorder=None, step=None):
    """One training step, `step` or `default_step`; `recorder` (a StepRecorder) records it and is
    told its phases. Returns the step's loss, detached (None when the step returns none)."""
    own = step is not None and step is not default_step
    step = step or default_step
    with step_part("the step function") if own else contextlib.nullcontext(), \
            running_compiled(model):
        if recorder is None:
            loss = step(model, batch, loss_fn, optimizer)
        else:
            with recorder, _phases(recorder):
                loss = step(model, batch, loss_fn, optimizer)
            recorder.finish()
    return loss.detach() if isinstance(loss, torch.Tensor) else None


def device_record(device):
    """The trace's device: a GPU with its memory, or the CPU with the host's physical memory (as
    `memplan record --backend host` records it), so that the trace is simulated as it ran."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {"name": props.name, "memory_bytes": int(props.total_memory)}
    return {"name": "cpu", "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}


def model_device(model, batch):
    for p in model.parameters():
        return p.device
    for t in batch:
        if isinstance(t, torch.Tensor):
            return t.device
    return torch.device("cpu")


def capture(model, batch, loss_fn, optimizer, *, step=None, warmup_steps=1, name=None):
    """Records one training step of `model` on `batch` (a tuple: the model's inputs, then the
    target) and returns a `Capture`. `step`: the user's own step, `step(model, batch, loss_fn,
    optimizer)` returning the loss (default: `default_step`); see the module's docstring."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError("batch must be a tuple (model inputs..., target)")
    batch = tuple(batch)
    model = step_module(model, warn=True)
    model.train()
    for _ in range(warmup_steps):
        run_step(model, batch, loss_fn, optimizer, step=step)
    device = model_device(model, batch)
    started = time.perf_counter()
    recorder = StepRecorder(model, optimizer, batch, cuda=device.type == "cuda")
    run_step(model, batch, loss_fn, optimizer, recorder, step)
    seconds = time.perf_counter() - started
    provenance = {
        "source": "recorded", "backend": "torch",
        "note": f"memplan.torch.capture of {name or type(model).__name__} (torch "
                f"{torch.__version__}, {device.type}); durations: {recorder.clock.describe()}"}
    trace = recorder.trace(device_record(device), provenance)
    phases = {}
    for op in trace["ops"]:
        phases[op["phase"]] = phases.get(op["phase"], 0) + 1
    stats = {"ops": len(trace["ops"]), "ops_by_phase": phases, "tensors": len(trace["tensors"]),
             "dropped_reads": recorder.dropped_reads, "attached_reads": recorder.attached_reads,
             "held_tensors": sorted(recorder.held),
             "never_unpacked": sorted(recorder.never_unpacked), "capture_seconds": seconds}
    return Capture(trace, recorder.saved_bytes(), recorder.saved_bytes(("activation",)), stats,
                   recorder.held_bytes(), recorder.held_bytes(("activation",)))
