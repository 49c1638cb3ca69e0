"""torchtune's activation offloading against memplan's emulation of it (issue 37): the same step
run once, with torchtune's own `OffloadActivations` (torchtune/training/_activation_offloading.py,
use_streams=True, its defaults) deciding what autograd saves, inside memplan.torch's recorder, so
that every save torchtune packs is known by its trace tensor; memplan's `offload-activations` plan
of that trace is compared save by save with what torchtune did.

Running it on the CPU: torchtune's hooks are written for CUDA. Its constructor asks for the
default stream and makes a side stream, its pack hook copies under `torch.cuda.stream(...)`,
records events and waits on them, its unpack hook copies back with `.to("cuda")` and may call
`record_stream`. Here the streams are stand-ins that do nothing (`CpuStream`: on the CPU every op
has finished when the next one starts, which is what the waits ensure on a GPU), pinned memory is
off (use_pin_memory=False: pinning needs a GPU), and the host copy torchtune keeps is wrapped so
that its `.to("cuda")` gives a CPU copy of it (`HostCopy`). Everything torchtune decides runs as
written: which saves it copies, its numbering, its forward stash and when it drops a tensor, what
backward takes from the stash and what it copies back, and its data (each unpacked tensor is
checked equal to the one saved; the step itself goes on with the saved tensor, so the recorded step
is the plain one: checked against a plain capture). What this cannot check: the copies' timing.

torchtune 0.6.1 is installed without its dependencies (its package imports Hugging Face's datasets
and tokenizers at `import torchtune`; the offloading module needs torchao and psutil only), so its
module is loaded without running the package's `__init__` (`torchtune_offloading`).

Differences measured (docs/policies.md): see `findings` and the tests' assertions.
"""

import contextlib
import functools
import importlib.util
import pathlib
import sys
import types
from unittest import mock

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build

import memplan  # noqa: E402
from memplan.torch import capture  # noqa: E402
from memplan.torch.capture import device_record, memplan_trace, run_step  # noqa: E402
from memplan.torch.recorder import StepRecorder  # noqa: E402


def torchtune_offloading():
    """torchtune.training._activation_offloading, imported without running the `__init__` of
    `torchtune` and `torchtune.training` (which import its datasets, models and checkpointing, and
    through them Hugging Face's datasets and tokenizers); None when torchtune is not installed."""
    spec = importlib.util.find_spec("torchtune")
    if spec is None or spec.origin is None:
        return None
    root = pathlib.Path(spec.origin).parent
    for name, folder in (("torchtune", root), ("torchtune.training", root / "training")):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(folder)]
            sys.modules[name] = package
    import torchtune.training._activation_offloading as offloading
    return offloading


if not hasattr(torch.nn, "Buffer"):
    pytest.skip(f"torch {torch.__version__} has no torch.nn.Buffer, which torchtune's pack hook "
                "tests saved tensors against (torchtune needs torch 2.5 or later)",
                allow_module_level=True)
try:
    offloading = torchtune_offloading()
except ImportError as e:
    pytest.skip(f"torchtune's activation offloading does not import: {e}", allow_module_level=True)
if offloading is None:
    pytest.skip("torchtune is not installed (python/requirements-torch2.txt pins it; "
                "scripts/setup installs it)", allow_module_level=True)
pytest.importorskip("torchvision")
from policy_models import gpt, gpt_batch, resnet, resnet_batch, vit  # noqa: E402


class CpuStream:
    """Stands for a CUDA stream on the CPU, where each op has finished before the next starts:
    waits have nothing to wait for."""

    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass

    def record_event(self):
        return object()


@contextlib.contextmanager
def cpu_streams():
    """torch.cuda's stream API as torchtune's hooks call it, on CpuStream."""
    record_stream = torch.Tensor.record_stream

    def record(tensor, stream):
        if not isinstance(stream, CpuStream):
            record_stream(tensor, stream)

    with mock.patch.object(torch.cuda, "default_stream", lambda *args: CpuStream()), \
            mock.patch.object(torch.cuda, "Stream", lambda *args: CpuStream()), \
            mock.patch.object(torch.cuda, "stream", lambda stream: contextlib.nullcontext()), \
            mock.patch.object(torch.Tensor, "record_stream", record):
        yield


class HostCopy:
    """torchtune's host copy of a saved tensor: `.to("cuda")` brings back a new tensor, here on the
    CPU."""

    def __init__(self, tensor):
        self.tensor = tensor

    def to(self, device, non_blocking=False):
        return self.tensor.clone()


class TorchtuneRecorder(StepRecorder):
    """The recorder with torchtune's hooks deciding what happens to each save made while
    `offloading_now()` says so: each pack is logged with its trace tensor (`packs`), each drop from
    torchtune's forward stash with the op it happens before (`dropped`), each unpack served from the
    stash (`from_stash`)."""

    def __init__(self, model, optimizer, batch, scope):
        super().__init__(model, optimizer, batch)
        with cpu_streams():
            self.hooks = offloading.OffloadActivations(use_pin_memory=False)
        self.scope = scope
        self.in_model = False
        self.model_end = None
        self.packs = []  # dicts: number, tensor, offloaded, bytes, op (the op that saved it)
        self.saved_tensors = {}  # torchtune's number -> the tensor saved
        self.dropped = {}  # torchtune's number -> the op before which its stash let it go
        self.stashed = set()
        self.from_stash = set()  # torchtune's numbers unpacked from the forward stash
        self.stale = set()  # trace tensors torchtune gave back as they were before an update

    def offloading_now(self):
        if self.phase != "forward":
            return False
        return self.in_model or self.scope == "forward"

    def note_drops(self):
        """Logs what torchtune's forward stash let go of since the last look: before the next op."""
        now = set(self.hooks.fwd_stash)
        for number in self.stashed - now:
            self.dropped[number] = len(self.ops)
        self.stashed = now

    def dispatch(self, func, args, kwargs):
        if self.stashed and not self.paused:
            self.note_drops()
        return super().dispatch(func, args, kwargs)

    def on_pack(self, t, tensor_id):
        if not self.offloading_now():
            return t
        self.paused += 1
        try:
            number = self.hooks.pack_hook(t)
            copy, offloaded = self.hooks.tracker[number]
            if offloaded:
                self.hooks.tracker[number] = (HostCopy(copy), True)
            self.note_drops()
            self.saved_tensors[number] = t
            self.packs.append({
                "number": number, "tensor": tensor_id, "offloaded": offloaded,
                "bytes": t.element_size() * t.nelement(), "op": len(self.ops) - 1,
                "parameter_view": isinstance(t._base, torch.nn.Parameter)})
            return ("torchtune", number)
        finally:
            self.paused -= 1

    def on_unpack(self, payload, tensor_id):
        if not (isinstance(payload, tuple) and payload[0] == "torchtune"):
            return payload
        number = payload[1]
        saved = self.saved_tensors.pop(number)
        self.paused += 1
        try:
            if number in self.hooks.fwd_stash:
                self.from_stash.add(number)
            same = torch.equal(self.hooks.unpack_hook(number), saved)
        finally:
            self.paused -= 1
        if not same:
            # A buffer the op that saves it updates after the save (batch norm's running
            # statistics): torchtune's copy is the value before. Anything else is an error.
            assert tensor_id in self.persistent, \
                f"torchtune gave back other data for save {number} ({self.tensors[tensor_id]})"
            self.stale.add(tensor_id)
        return saved







CASES = {"gpt": (gpt, gpt_batch), "resnet18": (resnet, resnet_batch), "vit": (vit, resnet_batch)}


def run_under_torchtune(make, batch_of, scope):
    """One step of a fresh model under torchtune's hooks (after one warm-up step, as capture
    runs), recorded: the recorder and the trace."""
    torch.manual_seed(0)
    model = make()
    batch, loss_fn = batch_of(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run_step(model, batch, loss_fn, opt)
    recorder = TorchtuneRecorder(model, opt, batch, scope)
    enter = model.register_forward_pre_hook(lambda *args: setattr(recorder, "in_model", True))
    def left_model(*args):
        recorder.in_model = False
        recorder.model_end = len(recorder.ops)  # the first op after the model's forward

    leave = model.register_forward_hook(left_model)
    with cpu_streams():
        run_step(model, batch, loss_fn, opt, recorder)
    enter.remove()
    leave.remove()
    trace = recorder.trace(device_record(torch.device("cpu")),
                           {"source": "recorded", "backend": "torch", "note": "torchtune"})
    return recorder, trace


def plain_capture(make, batch_of):
    torch.manual_seed(0)
    model = make()
    batch, loss_fn = batch_of(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return capture(model, batch, loss_fn, opt).trace


@functools.lru_cache(maxsize=None)
def findings(case, scope):
    """What torchtune did and what memplan's plan does, save by save (see the tests), for one of
    CASES with torchtune's hooks around the step's forward ("forward") or the model ("model")."""
    recorder, trace = run_under_torchtune(*CASES[case], scope)
    tensors, ops = trace["tensors"], trace["ops"]
    by_name = {}
    for kind in (tensors, ops):
        for record in kind:
            by_name.setdefault((kind is ops, record["name"]), []).append(record["id"])

    def op_id(ref):
        return ref if isinstance(ref, int) else by_name[(True, ref)][0]

    def tensor_id(ref):
        return ref if isinstance(ref, int) else by_name[(False, ref)][0]

    plan = memplan.simulate(memplan_trace(trace), policy="offload-activations",
                            memory="64GiB").plan.to_dict()
    decisions = {tensor_id(m["tensor"]): m for m in plan["maps"]}
    maps = set(decisions)
    swapped = {t for t, m in decisions.items() if m["action"] == "swap"}
    # the plan keeps a map of 1 KiB or more only where backward takes it from torchtune's stash
    from_stash = {t for t, m in decisions.items()
                  if m["action"] == "keep" and tensors[t]["bytes"] >= 1024}
    offloaded = [p for p in recorder.packs if p["offloaded"]]
    by_tensor = {}
    for p in offloaded:
        by_tensor.setdefault(p["tensor"], []).append(p)

    def last_forward_use(t):
        uses = [o["id"] for o in ops if o["phase"] == "forward" and t in o["inputs"]]
        return max(uses, default=tensors[t]["producer"])

    # When torchtune let each offloaded map's device tensor go: after its last forward use and its
    # stash's last drop of it; "stash" when backward took it from the stash.
    real_release = {}
    for t, packs in by_tensor.items():
        if t not in maps:
            continue
        if any(p["number"] in recorder.from_stash for p in packs):
            real_release[t] = "stash"
        else:
            real_release[t] = max(last_forward_use(t) + 1,
                                  *(recorder.dropped[p["number"]] for p in packs))
    plan_release = {t: op_id(decisions[t]["release_before"]) for t in swapped}
    plan_release.update({t: "stash" for t in from_stash})
    return {
        "recorder": recorder, "trace": trace, "plan": plan,
        "maps offloaded": {t for t in by_tensor if t in maps},
        "maps memplan moves": swapped | from_stash,
        "maps after the model": {t for t in maps
                                 if tensors[t]["producer"] >= recorder.model_end},
        "not maps": {t: packs for t, packs in by_tensor.items() if t not in maps},
        "saved twice": {t: len(packs) for t, packs in by_tensor.items() if len(packs) > 1},
        "view bytes": {t: [p["bytes"] for p in packs] for t, packs in by_tensor.items()
                       if t in maps and any(p["bytes"] != tensors[t]["bytes"] for p in packs)},
        # maps of 1 KiB or more whose every save under the hooks is a view of less
        "small views": {t for t in maps if tensors[t]["bytes"] >= 1024 and t not in by_tensor
                        and any(p["tensor"] == t for p in recorder.packs)},
        "release": {t: (real_release.get(t), plan_release.get(t))
                    for t in set(real_release) | set(plan_release)},
        "tensors": tensors,
    }


@pytest.mark.parametrize("case", list(CASES))
def test_the_step_torchtune_ran_is_the_step_captured(case):
    """The recorded step under torchtune's hooks is the plain step's (same ops, same tensors), so
    memplan's plan of it is its plan of the step a user captures."""
    make, batch_of = CASES[case]
    _, trace = run_under_torchtune(make, batch_of, "forward")
    plain = plain_capture(make, batch_of)

    def shape(t):
        return ([(o["name"], o["inputs"], o["outputs"], o["phase"]) for o in t["ops"]],
                [(x["name"], x["bytes"], x["kind"]) for x in t["tensors"]])
    assert shape(trace) == shape(plain)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("scope", ["forward", "model"])
def test_memplan_moves_the_maps_torchtune_offloads(case, scope):
    """The feature maps torchtune copies to the host are those memplan's plan swaps (or, for the
    last ones, keeps as torchtune's stash does): with torchtune's hooks around the step's forward
    (model and loss), all but a map saved only as a view of under 1 KiB (torchtune's threshold is
    on the view, the plan's on the storage: the ViT's class token, `x[:, 0]` of the last layer
    norm's output); around the model alone, as torchtune's recipes put them, the loss's maps as
    well, which the trace does not tell from the model's and the plan swaps too."""
    found = findings(case, scope)
    tensors = found["tensors"]
    moved, offloaded = found["maps memplan moves"], found["maps offloaded"]
    assert offloaded <= moved
    names = {tensors[t]["name"] for t in found["small views"]}
    assert names == ({"encoder.ln.native_layer_norm.out0"} if case == "vit" else set())
    loss_maps = found["maps after the model"] & moved if scope == "model" else set()
    assert moved - offloaded == found["small views"] | loss_maps
    # the GPT's log-softmax over its 128 words (32 KiB); the classifiers' over 10 classes is 80 B
    assert {tensors[t]["name"] for t in loss_maps} == (
        {"_log_softmax.out0"} if case == "gpt" and scope == "model" else set())


@pytest.mark.parametrize("case", list(CASES))
def test_the_bytes_torchtune_copies_of_each_map(case):
    """Each save of a map torchtune copies is its whole storage, the bytes the plan moves, except
    the ViT's in-projection output, whose q, k and v (a third each) attention saves one by one."""
    found = findings(case, "forward")
    tensors = found["tensors"]
    views = {}
    for t, sizes in found["view bytes"].items():
        views.setdefault(tensors[t]["name"], []).append((sizes, tensors[t]["bytes"]))
    if case != "vit":
        assert views == {}
        return
    assert set(views) == {f"encoder.layers.encoder_layer_{i}.self_attention.clone.out0"
                          for i in range(2)}
    for sizes, storage in (pair for pairs in views.values() for pair in pairs):
        assert sizes == [storage // 3] * 3


@pytest.mark.parametrize("case", list(CASES))
def test_what_torchtune_offloads_beyond_the_maps(case):
    """torchtune copies saves that are no feature map: views of parameters (a linear layer's
    `weight.t()`, which is not an nn.Parameter itself), buffers (batch norm's running statistics:
    `register_buffer` makes no nn.Buffer), and the batch's inputs of 1 KiB or more (the images);
    and it copies a map saved by two ops twice. memplan's plan moves none of these. Batch norm
    updates its running statistics after autograd saved them: what torchtune gives back is the
    value before (training-mode backward does not read it)."""
    found = findings(case, "forward")
    tensors = found["tensors"]
    running = (".running_mean", ".running_var")
    for t, packs in found["not maps"].items():
        kind, name = tensors[t]["kind"], tensors[t]["name"]
        assert kind in ("parameter", "input"), (t, tensors[t])
        if kind == "parameter":
            assert name.endswith(running) or all(p["parameter_view"] for p in packs), name
    assert any(tensors[t]["kind"] == "parameter" for t in found["not maps"])
    assert all(tensors[t]["name"].endswith(running) for t in found["recorder"].stale)
    names = {tensors[t]["name"] for t in found["not maps"]}
    assert ("batch.0" in names) == (case != "gpt")  # the images; the GPT's tokens are 512 B
    assert bool(found["recorder"].stale) == (case == "resnet18")  # layer3's and layer4's
    twice = {tensors[t]["name"] for t in found["saved twice"]}
    if case == "gpt":  # softmax's output: saved by softmax and by the product with v
        assert twice >= {f"h.{i}.attn._softmax.out0" for i in range(4)}
    assert twice


# The ViT's in-projection output is saved three times by one op (attention's q, k and v), which the
# trace shows as one read, and its in-projection's product saves the weight before the data (an
# mm's "mat2" before its "self"): two of its maps go three ops later than torchtune lets them go.
@pytest.mark.parametrize("case", ["gpt", "resnet18"])
def test_memplan_releases_each_map_where_torchtunes_stash_does(case):
    """With the hooks around the step's forward, each map's device copy goes before the op where
    torchtune's stash (or forward's last use) lets it go, and backward takes the same maps from
    the stash (Note [torchtune's activation offloading])."""
    found = findings(case, "forward")
    tensors = found["tensors"]
    different = {tensors[t]["name"]: pair for t, pair in found["release"].items()
                 if pair[0] != pair[1]}
    assert different == {}


def summary(case, scope):
    """One case's numbers, as docs/policies.md quotes them."""
    found = findings(case, scope)
    tensors = found["tensors"]
    off = [p for p in found["recorder"].packs if p["offloaded"]]
    moved = found["maps memplan moves"]
    out = [f"{case}, hooks around the {scope}: {len(found['recorder'].packs)} saves, {len(off)} "
           f"copied to the host ({sum(p['bytes'] for p in off):,} B); {len(found['maps offloaded'])} "
           f"maps; memplan moves {len(moved)} maps ({sum(tensors[t]['bytes'] for t in moved):,} B)"]
    kinds = {}
    for t, packs in found["not maps"].items():
        name = tensors[t]["name"]
        kind = ("buffers" if name.endswith((".running_mean", ".running_var")) else
                "parameter views" if tensors[t]["kind"] == "parameter" else "batch inputs")
        count, size = kinds.get(kind, (0, 0))
        kinds[kind] = (count + 1, size + sum(p["bytes"] for p in packs))
    for kind, (count, size) in sorted(kinds.items()):
        out.append(f"  beyond the maps, {kind}: {count} ({size:,} B)")
    copied = {}
    for p in off:
        copied[p["tensor"]] = copied.get(p["tensor"], 0) + p["bytes"]
    extra = sum(copied[t] - tensors[t]["bytes"] for t in found["saved twice"])
    out.append(f"  maps saved more than once: {len(found['saved twice'])}, {extra:,} B copied "
               "beyond their storage's bytes")
    for what, ts in (("moved by memplan only", moved - found["maps offloaded"]),
                     ("copied by torchtune only", found["maps offloaded"] - moved)):
        out.append(f"  maps {what}: {sorted(tensors[t]['name'] for t in ts)}")
    differ = {tensors[t]["name"]: pair for t, pair in found["release"].items()
              if pair[0] != pair[1] and t in found["maps offloaded"]}
    out.append(f"  released before a different op (torchtune, memplan): {differ}")
    return "\n".join(out)


if __name__ == "__main__":  # the numbers docs/policies.md quotes
    for case in CASES:
        for scope in ("forward", "model"):
            print(summary(case, scope))
