#!/usr/bin/python3
"""What a torch.compile'd model's trace holds against what its compiled step saves (issue 36;
memplan.torch.compiled): per model and backend, the bytes of the distinct storages the step
compiled and run by torch.compile itself saves for backward (test_torch_compiled's
`saved_by_step`: saved-tensor hooks around its second forward, the first compiles; parameters and
buffers left out, as capture leaves them out),
the same count for memplan's capture of it, and the eager step's for reference, with the time
torch.compile's two steps and memplan's capture took. On a GPU inductor pads strides
(`comprehensive_padding`) and lays convolutions out channels-last: the table shows whether the
trace holds those bytes too.

Usage: bench/compiled-vs-torch-compile.py [--device cpu|cuda] [--backends inductor,...]
                                          [--models cnn,gpt,wide,resnet18,checkpointed]
Under the venv's PyTorch (`$(scripts/setup --torch2-python)`); MEMPLAN_PYTHON_PATH, when set, is
where the memplan package is imported from (default: build/release/python). Timings depend on
the machine's load and inductor's cache; they are figures for a report, never a test.
"""

import argparse
import os
import pathlib
import sys
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, os.environ.get("MEMPLAN_PYTHON_PATH", str(ROOT / "build/release/python")))
sys.path.insert(0, str(ROOT / "python/tests"))

import torch  # noqa: E402
import torchvision  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import test_torch_compiled as cases  # noqa: E402
from memplan.torch import capture  # noqa: E402


def resnet18():
    model = torchvision.models.resnet18(num_classes=10)
    return model, (torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))), F.cross_entropy


MODELS = {"cnn": cases.cnn, "gpt": cases.gpt, "wide": cases.wide, "resnet18": resnet18,
          "checkpointed": lambda: cases.checkpointed("non-reentrant")}


def setup(name, device):
    torch.manual_seed(0)
    model, batch, loss_fn = MODELS[name]()
    model = model.to(device)
    batch = tuple(t.to(device) for t in batch)
    return model, batch, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--backends", default="inductor,aot_eager_decomp_partition")
    parser.add_argument("--models", default="cnn,gpt,wide,resnet18,checkpointed")
    args = parser.parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(f"torch {torch.__version__} on {name}")
    print("| model | backend | torch.compile's step saves (B) | memplan's trace (B) | equal | "
          "eager step (B) | compile s | capture s |")
    print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |")
    warnings.simplefilter("ignore")
    for model_name in args.models.split(","):
        model, batch, loss_fn, _ = setup(model_name, device)
        eager = cases.saved_by_step(model, model, batch, loss_fn)
        for backend in args.backends.split(","):
            model, batch, loss_fn, _ = setup(model_name, device)
            start = time.perf_counter()
            real = cases.saved_by_step(model, torch.compile(model, backend=backend), batch,
                                       loss_fn)
            compiled_s = time.perf_counter() - start
            model, batch, loss_fn, opt = setup(model_name, device)
            start = time.perf_counter()
            traced = capture(torch.compile(model, backend=backend), batch, loss_fn,
                             opt).saved_bytes_hooks
            capture_s = time.perf_counter() - start
            print(f"| {model_name} | {backend} | {real:,} | {traced:,} | "
                  f"{'yes' if real == traced else 'NO'} | {eager:,} | {compiled_s:.1f} | "
                  f"{capture_s:.1f} |", flush=True)


if __name__ == "__main__":
    main()
