"""memplan.torch with a torch.compile'd model (memplan.torch.compiled): the trace holds what the
compiled step saves for backward (AOTAutograd's split of the backend), byte for byte against the
same model compiled and run by torch.compile itself, and plans are carried out on that split bit
for bit at the predicted saved-bytes peak. Backends whose split memplan does not know are captured
as eager PyTorch runs them, with a warning."""

import functools
import pathlib
import sys
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build

import memplan  # noqa: E402
from memplan.torch import CompiledModelWarning, apply, capture, validate  # noqa: E402
from memplan.torch.capture import memplan_trace  # noqa: E402
from memplan.torch.models import GPT, bf16_autocast_step  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"),
                                reason=f"torch {torch.__version__} has no torch.compile")


def gpt():
    """A one-block GPT with dropout (random ops: the split must not recompute them)."""
    model = GPT(layers=1, hidden=64, heads=4, sequence=32, vocab=128, dropout=0.1)
    return model, model.memplan_batch(2, [32]), model.memplan_loss


def cnn():
    """Convolutions with batch norm (buffers the step writes), ReLU and max-pooling (which
    inductor's decompositions save as a bool mask and int8 offsets, not as eager does)."""
    def stage(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
    model = nn.Sequential(*stage(3, 8), nn.MaxPool2d(2), *stage(8, 16), *stage(16, 16),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    return model, (torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,))), F.cross_entropy


MODELS = {"gpt": gpt, "cnn": cnn}


def setup(name):
    torch.manual_seed(0)
    model, batch, loss_fn = {**MODELS, **PADDED_MODELS, **CHECKPOINTED_MODELS}[name]()
    return model, batch, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def saved_by_compiled_step(name, backend, autocast=False, **compile_args):
    """Bytes of the distinct storages the model's step, compiled by torch.compile and run as
    PyTorch runs it, saves for backward (`saved_by_step`)."""
    model, batch, loss_fn, _ = setup(name)
    compiled = torch.compile(model, backend=backend, **compile_args)
    return saved_by_step(model, compiled, batch, loss_fn, autocast)


def saved_by_step(model, call, batch, loss_fn, autocast=False):
    """Bytes of the distinct storages a step calling `call` (the model, or it compiled) saves for
    backward, counted by saved-tensor hooks around its second forward (the first compiles), the
    model's parameters and buffers left out as capture leaves them out."""
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    saved = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in own:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    for _ in range(2):
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(call(*batch[:-1]), batch[-1])
        loss.backward()
    return sum(saved.values())


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("backend", ["aot_eager", "aot_eager_decomp_partition", "inductor"])
def test_the_trace_of_a_compiled_model_holds_what_the_compiled_step_saves(name, backend):
    # Before: the compiled model was captured as its eager step, which saves other bytes (the
    # eager capture below): 478,980 B against the split's 417,540 B on the GPT under aot_eager,
    # 84,516 B against 52,772 B on the CNN under inductor's decompositions (a bool mask for a
    # ReLU, int8 offsets for max-pooling), and 84,516 B against 84,836 B on the CNN under
    # aot_eager.
    model, batch, loss_fn, opt = setup(name)
    eager = capture(model, batch, loss_fn, opt).saved_bytes_hooks
    model, batch, loss_fn, opt = setup(name)
    captured = capture(torch.compile(model, backend=backend), batch, loss_fn, opt)
    assert captured.saved_bytes_hooks == saved_by_compiled_step(name, backend)
    assert captured.saved_bytes_hooks != eager
    # Every op of the split is the step's: decomposed (layer norm's var_mean under inductor's
    # table), not the eager op.
    names = {op["name"] for op in captured.trace["ops"]}
    if backend == "aot_eager_decomp_partition" and name == "gpt":
        assert "var_mean" in names and "native_layer_norm" not in names


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("policy", ["swap-all", "recompute-all"])
@pytest.mark.parametrize("backend", ["aot_eager_decomp_partition", "inductor"])
def test_plans_on_a_compiled_model_are_bitwise_at_the_predicted_peak(name, policy, backend):
    model, batch, loss_fn, opt = setup(name)
    compiled = torch.compile(model, backend=backend)
    captured = capture(compiled, batch, loss_fn, opt)
    simulation = memplan.simulate(memplan_trace(captured.trace), policy=policy, memory="64GiB")
    plan = simulation.plan.to_dict()
    result = validate(compiled, batch, loss_fn, opt, plan, captured)
    assert result.lossless_ok and result.peaks_match, result
    # Step after step of the user's loop: the split is traced once per module and input shapes.
    planned = apply(compiled, plan, captured)
    for _ in range(2):
        assert torch.isfinite(planned.step(batch, loss_fn, opt))
        assert planned.stats["peak_saved_bytes"] == result["predicted_saved_peak_bytes"]


def test_a_backend_whose_split_memplan_does_not_know_is_captured_as_eager_runs_it():
    model, batch, loss_fn, opt = setup("gpt")
    eager = [op["name"] for op in capture(model, batch, loss_fn, opt).trace["ops"]]

    def own_backend(graph, example_inputs):
        return graph.forward

    model, batch, loss_fn, opt = setup("gpt")
    with pytest.warns(CompiledModelWarning, match="backend own_backend.* captured as eager"):
        captured = capture(torch.compile(model, backend=own_backend), batch, loss_fn, opt)
    assert [op["name"] for op in captured.trace["ops"]] == eager
    # The eager backend's step is eager PyTorch's: no warning.
    model, batch, loss_fn, opt = setup("gpt")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompiledModelWarning)
        captured = capture(torch.compile(model, backend="eager"), batch, loss_fn, opt)
    assert [op["name"] for op in captured.trace["ops"]] == eager


def test_a_plan_that_places_the_parameters_on_the_host_runs_on_a_compiled_model():
    # Before: the split's first call in a new process's planned step read the host-placed
    # parameters' emptied storages ("setStorage: ... out of bounds for storage of size 0"), and
    # validate ran the split's CPU steps on several threads, where its embedding backward (an
    # index_put_ that accumulates) adds in the order the threads finish: the tied embedding's
    # gradient differed in one run of three.
    model, batch, loss_fn, opt = setup("gpt")
    compiled = torch.compile(model, backend="aot_eager_decomp_partition")
    captured = capture(compiled, batch, loss_fn, opt)
    plan = memplan.simulate(memplan_trace(captured.trace), policy="in-core",
                            memory="64GiB").plan.to_dict()
    plan["tensors"] = [{"tensor": t["name"], "placement": "host"}
                       for t in captured.trace["tensors"] if t["kind"] == "parameter"]
    compiled._orig_mod.__dict__.pop("_memplan_splits")  # as in a process that did not capture
    threads = []

    def step(model, batch, loss_fn, optimizer):
        threads.append(torch.get_num_threads())
        return memplan.torch.default_step(model, batch, loss_fn, optimizer)

    result = validate(compiled, batch, loss_fn, opt, plan, captured, step=step)
    assert result.lossless_ok and result.peaks_match, result
    assert threads == [1, 1]  # the baseline step and the planned one


def test_a_model_compiled_in_place_is_captured_and_planned_as_its_split():
    # nn.Module.compile() (PyTorch 2.2 and later) compiles the module's own _call_impl: before,
    # the model was not seen as compiled at all (its eager step recorded, silently), and
    # validate's deep copies would have called the original's compiled _call_impl.
    if not hasattr(torch.nn.Module, "compile"):
        pytest.skip(f"torch {torch.__version__} has no nn.Module.compile")
    model, batch, loss_fn, opt = setup("cnn")
    model.compile(backend="aot_eager_decomp_partition")
    captured = capture(model, batch, loss_fn, opt)
    assert captured.saved_bytes_hooks == saved_by_compiled_step("cnn",
                                                                "aot_eager_decomp_partition")
    result = validate(model, batch, loss_fn, opt, policy_plan(captured, "recompute-all"),
                      captured)
    assert result.lossless_ok and result.peaks_match, result
    assert model._compiled_call_impl is not None  # the user's model as it was


def policy_plan(captured, policy):
    simulation = memplan.simulate(memplan_trace(captured.trace), policy=policy, memory="64GiB")
    return simulation.plan.to_dict()


def test_inductor_s_layout_copies_of_convolution_weights_are_saved_as_its_step_saves_them():
    # On the CPU inductor lays every convolution out channels-last (oneDNN is there:
    # GraphLowering.decide_layout_opt), and the forward saves its channels-last copies of the
    # first convolution's input and of the three 3x3 weights in their place. The weights' copies
    # are 8*3*9 + 16*8*9 + 16*16*9 = 3,672 floats, 14,688 B, on top of the 52,772 B the split
    # saves without them (aot_eager_decomp_partition: the same decompositions and partitioner, no
    # lowering); the input's copy, [2, 3, 16, 16], is saved instead of the batch, which the split
    # saves: 67,460 B. Before, the trace held 52,772 B.
    model, batch, loss_fn, opt = setup("cnn")
    captured = capture(torch.compile(model, backend="inductor"), batch, loss_fn, opt)
    assert captured.saved_bytes_hooks == 52_772 + 14_688 == saved_by_compiled_step("cnn", "inductor")
    tensors = captured.trace["tensors"]
    copied = [tensors[op["inputs"][0]]["shape"] for op in captured.trace["ops"]
              if op["name"] == "clone"]
    assert copied == [[8, 3, 3, 3], [2, 3, 16, 16], [16, 8, 3, 3], [16, 16, 3, 3]]


def test_torch_compile_s_options_for_inductor_are_inductor_s_configuration_at_capture():
    # options={"layout_optimization": False}: no channels-last copies, in the compiled step as in
    # the trace: the split's own 52,772 B.
    options = {"layout_optimization": False}
    model, batch, loss_fn, opt = setup("cnn")
    captured = capture(torch.compile(model, backend="inductor", options=options), batch, loss_fn,
                       opt)
    assert captured.saved_bytes_hooks == 52_772 == \
        saved_by_compiled_step("cnn", "inductor", options=options)


def wide():
    """A saved activation of [8, 33, 1025] floats: its rows 1025 floats apart, which inductor's
    comprehensive padding (on GPUs by default) pads to a multiple of 128 B, 1056 floats."""
    class Wide(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(1025, 1025), nn.Linear(1025, 10)

        def forward(self, x):
            return self.b(torch.sin(torch.tanh(self.a(x)) * 2)).mean(1)
    return Wide(), (torch.randn(8, 33, 1025), torch.randint(0, 10, (8,))), F.cross_entropy


PADDED_MODELS = {"wide": wide}


def test_inductor_s_padded_strides_are_saved_as_its_step_saves_them():
    from torch._inductor import config
    with config.patch(disable_padding_cpu=False, comprehensive_padding=True):
        real = saved_by_compiled_step("wide", "inductor")
        model, batch, loss_fn, opt = setup("wide")
        captured = capture(torch.compile(model, backend="inductor"), batch, loss_fn, opt)
    model, batch, loss_fn, opt = setup("wide")
    unpadded = capture(torch.compile(model, backend="aot_eager_decomp_partition"), batch, loss_fn,
                       opt).saved_bytes_hooks
    # Two saved [8, 33, 1025] maps (tanh's output and the one sin reads) span 263 rows of 1056
    # floats each, the last row 1025: 31 * 263 floats more each, 2 * 32,612 B = 65,224 B.
    assert captured.saved_bytes_hooks == real == unpadded + 2 * 31 * 263 * 4


def test_when_inductor_cannot_say_how_it_lays_out_the_split_is_saved_as_it_is(monkeypatch):
    from memplan.torch import compiled

    def fails(graph, example_inputs):
        raise AttributeError("'GraphLowering' object has no attribute 'graph_outputs'")
    monkeypatch.setattr(compiled, "_inductor_outputs", fails)
    model, batch, loss_fn, opt = setup("cnn")
    with pytest.warns(CompiledModelWarning, match="could not read how inductor lays out"):
        captured = capture(torch.compile(model, backend="inductor"), batch, loss_fn, opt)
    assert captured.saved_bytes_hooks == 52_772


class BranchOnData(nn.Module):
    """A forward that branches on a tensor's value: torch.compile breaks the graph there."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 10)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if h.sum() > 0:
            h = torch.tanh(h)
        return self.b(h)


def test_a_forward_with_a_graph_break_is_captured_and_planned_as_eager_pytorch_runs_it():
    # Before: capture failed with "DataDependentOutputException: aten._local_scalar_dense".
    def setup_branch():
        torch.manual_seed(0)
        model = BranchOnData()
        return (model, (torch.randn(4, 16), torch.randint(0, 10, (4,))), F.cross_entropy,
                torch.optim.SGD(model.parameters(), lr=0.1))
    model, batch, loss_fn, opt = setup_branch()
    eager = capture(model, batch, loss_fn, opt)
    model, batch, loss_fn, opt = setup_branch()
    compiled = torch.compile(model, backend="aot_eager_decomp_partition")
    with pytest.warns(CompiledModelWarning, match="cannot be traced as one graph"):
        captured = capture(compiled, batch, loss_fn, opt)
    assert [op["name"] for op in captured.trace["ops"]] == \
        [op["name"] for op in eager.trace["ops"]]
    assert captured.saved_bytes_hooks == eager.saved_bytes_hooks
    simulation = memplan.simulate(memplan_trace(captured.trace), policy="swap-all",
                                  memory="64GiB")
    result = validate(compiled, batch, loss_fn, opt, simulation.plan.to_dict(), captured)
    assert result.lossless_ok and result.peaks_match, result


def gpt_with_compiled_blocks(how):
    """A two-block GPT whose blocks alone are compiled (as torchtitan compiles a transformer:
    each block a graph), wrapped by torch.compile or compiled in place."""
    torch.manual_seed(0)
    model = GPT(layers=2, hidden=64, heads=4, sequence=32, vocab=128, dropout=0.1)
    for i, block in enumerate(model.h):
        if how == "wrapped":
            model.h[i] = torch.compile(block, backend="aot_eager_decomp_partition")
        else:
            block.compile(backend="aot_eager_decomp_partition")
    return (model, model.memplan_batch(2, [32]), model.memplan_loss,
            torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))


@pytest.mark.parametrize("how", ["wrapped", "in place"])
def test_a_model_whose_blocks_are_compiled_saves_what_their_splits_save(how):
    # Before: the blocks were captured as eager PyTorch runs them, silently: 874,244 B saved,
    # where the compiled step saves 780,036 B.
    model, batch, loss_fn, opt = gpt_with_compiled_blocks(how)
    real = saved_by_step(model, model, batch, loss_fn)
    model, batch, loss_fn, opt = gpt_with_compiled_blocks(how)
    captured = capture(model, batch, loss_fn, opt)
    assert captured.saved_bytes_hooks == real == 780_036
    simulation = memplan.simulate(memplan_trace(captured.trace), policy="swap-all",
                                  memory="64GiB")
    plan = simulation.plan.to_dict()
    result = validate(model, batch, loss_fn, opt, plan, captured)
    assert result.lossless_ok and result.peaks_match, result
    planned = apply(model, plan, captured)
    for _ in range(3):  # recorded, then steady steps: the blocks' splits, never Dynamo
        assert torch.isfinite(planned.step(batch, loss_fn, opt))
    assert planned.steady_steps == 2


class CheckpointedBlocks(nn.Module):
    """Three pre-norm MLP blocks, each under torch.utils.checkpoint: non-reentrant, reentrant,
    or selective (SAC: matrix products saved, the rest recomputed)."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 256), nn.GELU(),
                                                  nn.Linear(256, 64)) for _ in range(3))
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        from torch.utils import checkpoint
        for block in self.blocks:
            if self.how == "selective":
                context_fn = functools.partial(checkpoint.create_selective_checkpoint_contexts,
                                               save_matrix_products)
                x = x + checkpoint.checkpoint(block, x, use_reentrant=False,
                                              context_fn=context_fn)
            else:
                x = x + checkpoint.checkpoint(block, x, use_reentrant=self.how == "reentrant")
        return self.head(x)


def save_matrix_products(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy
    products = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
    return CheckpointPolicy.MUST_SAVE if op in products else CheckpointPolicy.PREFER_RECOMPUTE


def checkpointed(how):
    model = CheckpointedBlocks(how)
    return model, (torch.randn(32, 64, requires_grad=True), torch.randint(0, 10, (32,))), \
        F.cross_entropy


CHECKPOINTED_MODELS = {f"checkpointed {how}": functools.partial(checkpointed, how)
                       for how in ("non-reentrant", "reentrant", "selective")}


@pytest.mark.skipif(not hasattr(torch.utils.checkpoint, "create_selective_checkpoint_contexts"),
                    reason="Dynamo tags checkpointed regions through selective checkpointing "
                           "(PyTorch 2.4 and later)")
@pytest.mark.parametrize("how", ["non-reentrant", "reentrant", "selective"])
def test_checkpointing_inside_a_compiled_model_is_traced_as_dynamo_hands_it_to_aotautograd(how):
    # torch.compile recomputes a checkpointed region in backward as its partitioner decides with
    # the region's ops tagged for recomputation (reentrant or not: Dynamo makes it non-reentrant),
    # and saves the ops a SAC policy says MUST_SAVE: its step saves 26,116 B, 26,116 B and
    # 132,612 B. Before: the split traced through the non-reentrant checkpoints as if they were
    # not there (256,132 B), and the two others could not be traced as one graph (captured as
    # eager PyTorch runs them, 34,308 B, with a CompiledModelWarning; before that, not at all).
    name = f"checkpointed {how}"
    real = saved_by_compiled_step(name, "aot_eager_decomp_partition")
    assert real == {"non-reentrant": 26_116, "reentrant": 26_116, "selective": 132_612}[how]
    model, batch, loss_fn, opt = setup(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompiledModelWarning)
        captured = capture(torch.compile(model, backend="aot_eager_decomp_partition"), batch,
                           loss_fn, opt)
    assert captured.saved_bytes_hooks == real
    if how == "non-reentrant":
        compiled = torch.compile(model, backend="aot_eager_decomp_partition")
        simulation = memplan.simulate(memplan_trace(captured.trace), policy="swap-all",
                                      memory="64GiB")
        result = validate(compiled, batch, loss_fn, opt, simulation.plan.to_dict(), captured)
        assert result.lossless_ok and result.peaks_match, result


def test_a_compiled_model_under_bf16_autocast_saves_what_its_step_saves():
    # The split traced under autocast (its signature holds autocast's state): the GPT with
    # dropout's step saves bf16 copies and the float32 ops autocast leaves; the trace the same.
    real = saved_by_compiled_step("gpt", "aot_eager_decomp_partition", autocast=True)
    model, batch, loss_fn, opt = setup("gpt")
    captured = capture(torch.compile(model, backend="aot_eager_decomp_partition"), batch, loss_fn,
                       opt, step=bf16_autocast_step)
    assert captured.saved_bytes_hooks == real != \
        saved_by_compiled_step("gpt", "aot_eager_decomp_partition")


def test_a_captured_compiled_model_can_be_saved_whole_and_captured_again_where_it_is_loaded():
    # Before: torch.save(model) failed ("Can't pickle local object '_split.<locals>.functional'")
    # once memplan had captured it: its splits were kept on the module.
    import io
    model, batch, loss_fn, opt = setup("cnn")
    captured = capture(torch.compile(model, backend="aot_eager_decomp_partition"), batch, loss_fn,
                       opt)
    saved = io.BytesIO()
    torch.save(model, saved)
    saved.seek(0)
    loaded = torch.load(saved, weights_only=False)
    again = capture(torch.compile(loaded, backend="aot_eager_decomp_partition"), batch, loss_fn,
                    torch.optim.SGD(loaded.parameters(), lr=0.1, momentum=0.9))
    assert again.saved_bytes_hooks == captured.saved_bytes_hooks
