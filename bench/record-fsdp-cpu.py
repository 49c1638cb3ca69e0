"""A real FSDP step, recorded on this machine's CPU (issue 35): two processes over gloo, a
residual MLP of 4 blocks (256 wide) with FSDP2's fully_shard on each block and on the root,
Adam, batch 32; torch.profiler (record_shapes, profile_memory) over steps 2 and 3, one Chrome
trace per rank.

    $(scripts/setup --torch2-python) bench/record-fsdp-cpu.py OUT_DIR
    build/release/bin/memplan import kineto OUT_DIR/rank0.json OUT_DIR/rank1.json -o job.json

When this was written (PyTorch 2.15 on the CPU) the import recognised the step's 14 collectives
(the all-gathers and reduce-scatters) on both ranks, but not the sharding: it sees the unsharded
parameters that the ops read and reports an in-core peak of 37.4 MiB against the profiler's Total
Allocated of 10.8 MiB. Recognising FSDP's flat parameters (their all-gathered storage freed after
each unit, the reduce-scattered gradient shards) is the next step.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard
from torch.profiler import ProfilerActivity, profile, schedule


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))


class Net(torch.nn.Module):
    def __init__(self, d=256, blocks=4):
        super().__init__()
        self.inp = torch.nn.Linear(64, d)
        self.blocks = torch.nn.ModuleList([Block(d) for _ in range(blocks)])
        self.head = torch.nn.Linear(d, 10)

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


def run(rank, world, out):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = Net()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                 schedule=schedule(wait=1, warmup=1, active=2)) as prof:
        for _ in range(4):
            optimizer.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            prof.step()
    prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: record-fsdp-cpu.py OUT_DIR")
    os.makedirs(sys.argv[1], exist_ok=True)
    mp.spawn(run, args=(2, sys.argv[1]), nprocs=2)
