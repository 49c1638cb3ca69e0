"""memplan.torch with the user's own training step (capture's, apply's and validate's `step`): its
phases are told by what it calls, so a step under autocast with a GradScaler and gradient clipping
is captured, planned and carried out bit for bit like the default one, and so are foreach and fused
optimizers; a step the trace cannot
hold (no backward pass) is refused in one line. Steps of several micro-batches (gradient
accumulation): test_torch_accumulation.py."""

import pathlib
import sys

import pytest
import torch
from torch import nn
from torch.nn import functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build

import memplan  # noqa: E402
from memplan.torch import StepError, apply, capture, default_step, validate  # noqa: E402
from memplan.torch.capture import memplan_trace  # noqa: E402

# torch.amp.GradScaler on the CPU: PyTorch 2.3 and later (1.13's scaler is CUDA's only).
CPU_SCALER = hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler")
SDPA = hasattr(F, "scaled_dot_product_attention")  # PyTorch 2.0 and later


class Block(nn.Module):
    """A pre-norm attention block: scaled-dot-product attention where PyTorch has it (its CPU
    kernel saves the output and the log-sum-exp for backward), else the same attention written
    out; then an MLP."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (h.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for h in self.qkv(self.norm(x)).split(d, dim=-1))
        if SDPA:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            mask = torch.ones(t, t, dtype=torch.bool).triu(1)
            a = torch.softmax((q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5)
                              .masked_fill(mask, float("-inf")), -1) @ v
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(x)


class Attention(nn.Module):
    """Four attention blocks and a classifier head."""

    def __init__(self, dim=32, heads=4, depth=4):
        super().__init__()
        self.blocks = nn.Sequential(*(Block(dim, heads) for _ in range(depth)))
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        return self.head(self.blocks(x).mean(1))


def mixed_precision_step(scaler):
    """A training step as people write it today: bf16 autocast for the forward pass and the loss,
    the loss scaled by `scaler` (None: not scaled), gradients unscaled and clipped to norm 1, the
    optimizer stepped through the scaler, which then updates its scale."""
    def step(model, batch, loss_fn, optimizer):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model(batch[0]), batch[1])
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        return loss
    return step


def attention_setup(step):
    torch.manual_seed(0)
    model = Attention()
    batch = (torch.randn(8, 64, 32), torch.randint(0, 10, (8,)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, batch, opt, capture(model, batch, F.cross_entropy, opt, step=step)


def policy_plan(trace, policy):
    simulation = memplan.simulate(memplan_trace(trace), policy=policy, memory="64GiB")
    assert simulation.feasible, simulation.oom
    return simulation.plan.to_dict()


def test_a_mixed_precision_step_is_captured_in_its_phases():
    scaler = torch.amp.GradScaler("cpu") if CPU_SCALER else None
    _, _, _, captured = attention_setup(mixed_precision_step(scaler))
    ops = captured.trace["ops"]
    phases = [op["phase"] for op in ops]
    # One forward, one backward, one update, in that order.
    assert phases == sorted(phases, key=("forward", "backward", "update").index)
    assert set(phases) == {"forward", "backward", "update"}
    # Autocast's casts of the weights to bf16 are forward ops, the gradients' norm (clipping) is an
    # update op: the phases follow the calls, wherever the step writes them.
    names = {phase: [op["name"].rsplit(".", 1)[-1] for op in ops if op["phase"] == phase]
             for phase in ("forward", "update")}
    assert "_to_copy" in names["forward"]
    assert any("norm" in n for n in names["update"]), names["update"]
    dtypes = {t.get("dtype") for t in captured.trace["tensors"] if t["kind"] == "activation"}
    assert "bfloat16" in dtypes
    if scaler:
        # The scaler's scale and growth tracker, written by the step, are state the loop carries:
        # optimizer state beside the optimizer's, updated in place.
        state = [t for t in captured.trace["tensors"] if t["name"].startswith("loop_state.")]
        assert len(state) == 2 and {t["kind"] for t in state} == {"optimizer_state"}
    memplan_trace(captured)  # memplan's trace reader takes it


@pytest.mark.parametrize("policy", ["recompute-all", "swap-all"])
def test_plans_of_a_mixed_precision_step_are_bitwise_lossless(policy):
    scaler = torch.amp.GradScaler("cpu") if CPU_SCALER else None
    step = mixed_precision_step(scaler)
    model, batch, opt, captured = attention_setup(step)
    plan = policy_plan(captured.trace, policy)
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, step=step)
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]
    if policy == "recompute-all":
        assert result["recomputed_ops"] > 0


def test_a_searched_plan_of_a_mixed_precision_step_measures_its_predicted_peak():
    scaler = torch.amp.GradScaler("cpu") if CPU_SCALER else None
    step = mixed_precision_step(scaler)
    model, batch, opt, captured = attention_setup(step)
    parsed = memplan_trace(captured)
    info = parsed.info()
    budget = info.peak_bytes_incore - info.feature_map_bytes // 2  # half the maps away
    found = memplan.search(parsed, memory=budget, time_limit=30, rounds=4, deterministic=True,
                           maps_only=True)
    assert found.feasible
    plan = found.plan.to_dict()
    assert any(m["action"] != "keep" for m in plan["maps"])
    result = validate(model, batch, F.cross_entropy, opt, plan, captured, step=step)
    assert result.lossless_ok, result
    assert result["measured_saved_peak_bytes"] == result["predicted_saved_peak_bytes"]


def test_the_default_step_given_by_name_captures_the_same_trace():
    def trace_of(step):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        batch = (torch.randn(8, 16), torch.randint(0, 4, (8,)))
        trace = capture(model, batch, F.cross_entropy, opt, step=step).trace
        return [(op["name"], op["phase"], op["inputs"], op["outputs"]) for op in trace["ops"]]
    assert trace_of(None) == trace_of(default_step)


def small_setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, (torch.randn(8, 16), torch.randint(0, 4, (8,))), opt


def test_a_step_with_no_backward_pass_is_refused_in_one_line():
    def forward_only(model, batch, loss_fn, optimizer):
        return loss_fn(model(batch[0]), batch[1])
    model, batch, opt = small_setup()
    with pytest.raises(StepError, match=r"^the step ran no backward pass"):
        capture(model, batch, F.cross_entropy, opt, step=forward_only)


def fused_cpu_adamw():
    """Whether this PyTorch has a fused AdamW on the CPU (2.4 and later)."""
    try:
        torch.optim.AdamW([nn.Parameter(torch.zeros(1))], fused=True)
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


@pytest.mark.parametrize("implementation", ["foreach", "fused"])
def test_foreach_and_fused_optimizers_are_captured_and_their_plans_bitwise(implementation):
    if implementation == "fused" and not fused_cpu_adamw():
        pytest.skip(f"torch {torch.__version__} has no fused AdamW on the CPU (2.4 and later)")
    torch.manual_seed(0)
    model = Attention(depth=1)
    batch = (torch.randn(4, 32, 32), torch.randint(0, 10, (4,)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **{implementation: True})
    captured = capture(model, batch, F.cross_entropy, opt)
    update = [op["name"] for op in captured.trace["ops"] if op["phase"] == "update"]
    # One op updates every parameter (a list of them), not one op per parameter.
    assert any(n.startswith("_fused_adamw" if implementation == "fused" else "_foreach_")
               for n in update), update
    result = validate(model, batch, F.cross_entropy, opt,
                      policy_plan(captured.trace, "recompute-all"), captured)
    assert result.lossless_ok and result.peaks_match, result


def test_the_python_api_takes_a_capture_where_it_takes_a_trace():
    # One API: search takes the capture, apply and validate the Plan search returns, budgets as a
    # share of the in-core peak.
    step = mixed_precision_step(torch.amp.GradScaler("cpu") if CPU_SCALER else None)
    model, batch, opt, captured = attention_setup(step)
    peak = memplan.info(captured).peak_bytes_incore
    assert peak == captured.memplan_trace().info().peak_bytes_incore
    found = memplan.search(captured, memory="60%", time_limit=30, rounds=2, deterministic=True,
                           maps_only=True)
    assert found.feasible and found.simulation.summary["machine"]["memory_bytes"] == peak * 6 // 10
    assert memplan.simulate(captured, plan=found.plan, memory="60%").feasible
    result = validate(model, batch, F.cross_entropy, opt, found.plan, captured, step=step,
                      memory="60%")
    assert result.lossless_ok and result.peaks_match, result
    # The plan runs step after step of the user's loop: the first under the recorder, at the
    # predicted saved-bytes peak, the next ones on the steady path (memplan.torch.steady), which
    # repeats it and reports the recorded step's peak.
    planned = apply(model, found.plan, captured, step=step)
    for i in range(3):
        loss = planned.step(batch, F.cross_entropy, opt)
        assert torch.isfinite(loss)
        assert planned.stats["peak_saved_bytes"] == result["predicted_saved_peak_bytes"]
        assert planned.stats["steady"] == (i > 0), planned.steady_reason
    with pytest.raises(TypeError, match="expected a memplan.Trace, a memplan.Job or a "
                                        "memplan.torch.Capture, not dict"):
        memplan.search(captured.trace)
