"""A real FSDP step, recorded on this machine's CPU (issue 35): two processes over gloo, a
residual MLP of 4 blocks (256 wide) with FSDP2's fully_shard on each block and on the root,
Adam, batch 32; torch.profiler (record_shapes, profile_memory) over steps 2 and 3, one Chrome
trace per rank.

    $(scripts/setup --torch2-python) bench/record-fsdp-cpu.py OUT_DIR [--width W] [--blocks B]
        [--active N] [--gzip] [--fsdp1]
    build/release/bin/memplan import kineto OUT_DIR/rank0.json OUT_DIR/rank1.json -o job.json

The import reads it as FSDP's (Note [FSDP in a trace] in importers/kineto/fsdp_steps.cpp):
the 14 collectives (9 all-gathers: each unit before its forward, each block again before its
backward; 5 gradient reductions, which gloo runs as all-reduces), the parameters as this rank's
shards, the gathered parameters and the collectives' buffers as tensors of the collectives from
the trace's [memory] events. Each rank's in-core peak above the shards and Adam's state (made before
the profiler started, which the CPU's Total Allocated does not count) is 11,358,760 bytes against
the profiler's Total Allocated peak of 11,297,368 (+0.54%, PyTorch 2.15; docs/kineto-import.md).
traces/fsdp-cpu holds a smaller recording (--width 128 --blocks 2 --active 1 --gzip), and in
fsdp1/ the same step under FSDP1 (--fsdp1: FullyShardedDataParallel, one FlatParameter per block
and one for the root's own parameters).
"""
import argparse
import gzip
import os
import shutil

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
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


def run(rank, world, out, width, blocks, active, compress, fsdp1):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = Net(width, blocks)
    if fsdp1:
        model = FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({Block}),
                                         device_id=torch.device("cpu"))
    else:
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                 schedule=schedule(wait=1, warmup=1, active=active)) as prof:
        for _ in range(2 + active):
            optimizer.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            prof.step()
    path = os.path.join(out, f"rank{rank}.json")
    prof.export_chrome_trace(path)
    if compress:
        with open(path, "rb") as plain, gzip.GzipFile(path + ".gz", "wb", 9, mtime=0) as packed:
            shutil.copyfileobj(plain, packed)
        os.remove(path)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--active", type=int, default=2, help="profiled steps")
    parser.add_argument("--gzip", action="store_true", help="write rankR.json.gz")
    parser.add_argument("--fsdp1", action="store_true",
                        help="FSDP1 (FullyShardedDataParallel) instead of FSDP2's fully_shard")
    a = parser.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    mp.spawn(run, args=(2, a.out_dir, a.width, a.blocks, a.active, a.gzip, a.fsdp1), nprocs=2)
