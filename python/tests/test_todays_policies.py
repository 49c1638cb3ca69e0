"""Today's policies against PyTorch itself (issue 37): memplan's emulation of activation
checkpointing per block (`full-ac`), every second block (`selective-ac-layer`) and selective
activation checkpointing with torchtitan's op policy (`selective-ac`), run on a step captured
without checkpointing, keeps exactly the bytes PyTorch saves for backward when the same model runs
with `torch.utils.checkpoint` around those blocks — counted by the saved-tensor hooks and what the
step holds beside them (capture's count) on the real step."""

import functools
import pathlib
import sys

import pytest
import torch
from torch.utils import checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build

import memplan  # noqa: E402
from memplan.torch import capture  # noqa: E402
from memplan.torch.capture import memplan_trace  # noqa: E402

pytest.importorskip("torchvision")
from policy_models import gpt, gpt_batch, mobilenet, resnet, resnet50, resnet_batch, vit  # noqa: E402


def torchtitan_op_policy():
    """torchtitan's op-level SAC policy (torchtitan/distributed/activation_checkpoint.py): save
    matmuls but every second one in a block, and fused attention; recompute the rest. Its list
    names aten.mm; a linear with a bias runs aten.addmm, which memplan counts as a matmul too
    (Note [Selective activation checkpointing by op])."""
    matmuls = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
    attention = tuple(getattr(torch.ops.aten, name).default for name in (
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention_for_cpu") if hasattr(torch.ops.aten, name))
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx, op, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if op in matmuls:
            counts[mode] += 1
        save = op in attention or (op in matmuls and counts[mode] % 2 == 1)
        return (checkpoint.CheckpointPolicy.MUST_SAVE if save
                else checkpoint.CheckpointPolicy.PREFER_RECOMPUTE)

    def contexts():
        counts["forward"] = counts["recompute"] = 0  # torchtitan counts per block
        return checkpoint.create_selective_checkpoint_contexts(policy)
    return contexts


def checkpoint_blocks(model, paths, context_fn=None):
    """Runs each block named in `paths` under torch.utils.checkpoint (non-reentrant), its module
    path unchanged, as torchtitan's checkpoint_wrapper does."""
    for path in paths:
        block = model.get_submodule(path)
        extra = {} if context_fn is None else {"context_fn": context_fn}
        block.forward = functools.partial(checkpoint.checkpoint, block.forward,
                                          use_reentrant=False, **extra)
    return model









GPT_BLOCKS = [f"h.{i}" for i in range(4)]
VIT_BLOCKS = [f"encoder.layers.encoder_layer_{i}" for i in range(2)]
RESNET_BLOCKS = [f"layer{s}.{b}" for s in range(1, 5) for b in range(2)]
RESNET50_BLOCKS = [f"layer{s}.{b}" for s, n in zip(range(1, 5), (3, 4, 6, 3)) for b in range(n)]
MOBILENET_BLOCKS = [f"features.{i}" for i in range(19)]
CASES = {
    # policy, model, batch, the blocks PyTorch checkpoints, with SAC's contexts or not
    "gpt full-ac": ("full-ac", gpt, gpt_batch, GPT_BLOCKS, None),
    "gpt selective-ac-layer": ("selective-ac-layer", gpt, gpt_batch, GPT_BLOCKS[1::2], None),
    "resnet18 full-ac": ("full-ac", resnet, resnet_batch, RESNET_BLOCKS, None),
    "resnet18 selective-ac-layer": ("selective-ac-layer", resnet, resnet_batch,
                                    RESNET_BLOCKS[1::2], None),
    "resnet50 full-ac": ("full-ac", resnet50, resnet_batch, RESNET50_BLOCKS, None),
    "mobilenet_v2 full-ac": ("full-ac", mobilenet, resnet_batch, MOBILENET_BLOCKS, None),
    "gpt selective-ac": ("selective-ac", gpt, gpt_batch, GPT_BLOCKS, "torchtitan"),
    "vit full-ac": ("full-ac", vit, resnet_batch, VIT_BLOCKS, None),
    "vit selective-ac-layer": ("selective-ac-layer", vit, resnet_batch, VIT_BLOCKS[1::2], None),
    "vit selective-ac": ("selective-ac", vit, resnet_batch, VIT_BLOCKS, "torchtitan"),
}


def captured(make, batch_of, blocks=(), context_fn=None):
    torch.manual_seed(0)
    model = make()
    checkpoint_blocks(model, blocks, context_fn)
    batch, loss_fn = batch_of(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return capture(model, batch, loss_fn, opt)


def kept_bytes(trace, plan):
    """Bytes of the maps a plan keeps (a plan names a map by its name, or by its id where the
    name is not unique)."""
    sizes = {t["id"]: t["bytes"] for t in trace["tensors"]}
    sizes.update({t["name"]: t["bytes"] for t in trace["tensors"]})
    return sum(sizes[m["tensor"]] for m in plan["maps"] if m["action"] == "keep")


@pytest.mark.parametrize("case", list(CASES))
def test_memplans_emulation_keeps_what_pytorch_saves(case):
    policy, make, batch_of, blocks, sac = CASES[case]
    if sac and not hasattr(checkpoint, "create_selective_checkpoint_contexts"):
        pytest.skip(f"torch {torch.__version__} has no selective activation checkpointing")
    plain = captured(make, batch_of)
    plan = memplan.simulate(memplan_trace(plain.trace), policy=policy, memory="64GiB").plan
    emulated = kept_bytes(plain.trace, plan.to_dict())
    real = captured(make, batch_of, blocks, torchtitan_op_policy() if sac else None)
    pytorch_saves = real.saved_activation_bytes_hooks + real.held_activation_bytes
    everything = plain.saved_activation_bytes_hooks + plain.held_activation_bytes
    assert emulated < everything  # the policy acted
    assert emulated == pytorch_saves, (case, emulated, pytorch_saves, everything)
