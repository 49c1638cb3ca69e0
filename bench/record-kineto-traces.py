#!/usr/bin/env python3
"""Record PyTorch profiler (Kineto) traces of real training jobs on a GPU, the input memplan's
importer is judged on (issue 15): each a few training steps of a job written as its users write it.

  gpt2        Hugging Face GPT-2 (6 layers, 768 wide, random weights), bf16 autocast,
              scaled-dot-product attention, fused AdamW, loss.item() each step
  resnet50    torchvision ResNet-50, channels_last, fp16 autocast with a GradScaler, SGD with
              momentum (foreach), the input batch copied from pinned memory each step
  two_streams a two-tower network whose towers run on two CUDA streams, the input copied on a
              side stream (a prefetching data loader's pattern), Adam
  compiled    a torch.compile'd MLP (Triton kernels), SGD
  no_shapes   ResNet-18 recorded without shapes or memory, each step a record_function
              "train_step" rather than ProfilerStep#N
  gpt_blocks  a GPT block stack (8 pre-norm blocks, 1024 wide, 16 heads, batch 8 x 1024 tokens),
              bf16 autocast, scaled-dot-product attention (causal), AdamW (foreach)
  gpt_checkpointed   the same, each block under torch.utils.checkpoint (non-reentrant)
  gpt_offloaded      the same, every saved tensor offloaded to pinned host memory
              (torch.autograd.graph.save_on_cpu(pin_memory=True))

Each is recorded with record_shapes and profile_memory (except no_shapes), wait 1, warmup 1,
active 3 steps, and written as OUT/NAME.pt.trace.json.gz; the CUDA caching allocator's history
over the same five steps (torch.cuda.memory._record_memory_history, Python frames) is written
beside it as OUT/NAME.snapshot.pickle.gz (except no_shapes): real snapshots for reading them and
checking the caching-allocator model against them (issue 38).

  python3 bench/record-kineto-traces.py OUT [NAME...]
"""

import gzip
import pickle
import sys
import time
import traceback

import torch
from torch import nn
from torch.nn import functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.CUDA]


def run_profiled(path, step, steps=5, **kwargs):
    """Run `step` under the profiler (wait 1, warmup 1, active 3) and write the trace, and the
    allocator's history over the same steps as a memory snapshot beside it."""
    opts = dict(record_shapes=True, profile_memory=True)
    opts.update(kwargs)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
    with profile(activities=ACTIVITIES, schedule=schedule(wait=1, warmup=1, active=3),
                 on_trace_ready=lambda p: p.export_chrome_trace(path), **opts) as prof:
        for _ in range(steps):
            step()
            prof.step()
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with gzip.open(path.replace(".pt.trace.json.gz", ".snapshot.pickle.gz"), "wb") as f:
        pickle.dump(snapshot, f)


def gpt2(path):
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=512, vocab_size=50257,
                        attn_implementation="sdpa")
    model = GPT2LMHeadModel(config).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, config.vocab_size, (8, 512), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    run_profiled(path, step)


def resnet50(path):
    import torchvision
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    images = torch.randn(64, 3, 224, 224).pin_memory()
    labels = torch.randint(0, 1000, (64,)).pin_memory()

    def step():
        x = images.to("cuda", non_blocking=True).to(memory_format=torch.channels_last)
        y = labels.to("cuda", non_blocking=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    run_profiled(path, step)


class TwoTowers(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.LayerNorm(4096),
                               nn.Linear(4096, 1024))
        self.b = nn.Sequential(nn.Conv1d(16, 64, 5, padding=2), nn.ReLU(),
                               nn.Conv1d(64, 16, 5, padding=2))
        self.side = torch.cuda.Stream()

    def forward(self, x):
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            b = self.b(x.view(x.shape[0], 16, 64)).flatten(1)
        a = self.a(x)
        main.wait_stream(self.side)
        return torch.softmax(a + b, dim=-1)


def two_streams(path):
    model = TwoTowers().cuda().train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    copy = torch.cuda.Stream()
    host = torch.randn(512, 1024).pin_memory()

    def step():
        with torch.cuda.stream(copy):
            x = host.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(copy)
        x.record_stream(torch.cuda.current_stream())
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    run_profiled(path, step)


def compiled(path):
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(),
                          nn.Linear(2048, 10)).cuda()
    cmodel = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 512, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")

    def step():
        loss = F.cross_entropy(cmodel(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # compile outside the profiled steps
        step()
    run_profiled(path, step)


def no_shapes(path):
    import torchvision
    model = torchvision.models.resnet18().cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(32, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (32,), device="cuda")

    def step():
        with record_function("train_step"):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    with profile(activities=ACTIVITIES) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)


class Block(nn.Module):
    """A pre-norm GPT block: causal scaled-dot-product attention, then a 4x GELU MLP."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class BlockStack(nn.Module):
    def __init__(self, layers=8, width=1024, heads=16, vocab=32000, checkpointed=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)
        self.checkpointed = checkpointed

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            if self.checkpointed:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.norm(x))


def gpt_stack(path, checkpointed=False, offloaded=False):
    import contextlib
    import torch.utils.checkpoint  # noqa: F401
    model = BlockStack(checkpointed=checkpointed).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.randint(0, 32000, (8, 1024), device="cuda")

    def step():
        saving = (torch.autograd.graph.save_on_cpu(pin_memory=True) if offloaded
                  else contextlib.nullcontext())
        with saving, torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    run_profiled(path, step)


JOBS = dict(gpt2=gpt2, resnet50=resnet50, two_streams=two_streams, compiled=compiled,
            no_shapes=no_shapes, gpt_blocks=gpt_stack,
            gpt_checkpointed=lambda path: gpt_stack(path, checkpointed=True),
            gpt_offloaded=lambda path: gpt_stack(path, offloaded=True))


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or list(JOBS)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    failed = 0
    for name in names:
        start = time.time()
        try:
            JOBS[name](f"{out}/{name}.pt.trace.json.gz")
            print(f"{name}: recorded in {time.time() - start:.1f} s", flush=True)
        except Exception:  # one job's failure must not lose the others' traces
            failed += 1
            print(f"{name}: FAILED after {time.time() - start:.1f} s", flush=True)
            traceback.print_exc()
        torch.cuda.empty_cache()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
