"""The Kineto importer against capture (issue 36): one training step recorded by torch.profiler on
the CPU (record_shapes, profile_memory) and imported with `memplan import kineto`, whose account of
what autograd saves is derived from the trace alone, is within 1% of what capture's saved-tensor
hooks counted for the same step. Both sides are counted by one rule (zoo::saved_activation_bytes:
the distinct buffers of activations and inputs backward reads). bench/importer-vs-capture.py runs
the same comparison over a battery of torchvision models.

Needs a PyTorch built with Kineto (the PyPI wheels of 2.x); Debian's torch 1.13 has none: skipped.
"""

import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
if not (hasattr(torch.autograd, "kineto_available") and torch.autograd.kineto_available()):
    pytest.skip(f"torch {torch.__version__} is built without Kineto: torch.profiler writes no "
                "Chrome trace the importer reads", allow_module_level=True)

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.profiler import ProfilerActivity, profile, schedule  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build

import memplan  # noqa: E402
from memplan.torch import capture, default_step, saved_bytes_in_trace  # noqa: E402

MEMPLAN = pathlib.Path(os.environ.get("MEMPLAN_BINARY", ROOT / "build/release/bin/memplan"))


class Mixed(nn.Module):
    """What the importer's rules are for beyond a ResNet: conv-bn-SiLU, a squeeze-and-excitation
    scale (mean, 1x1 convolutions, sigmoid, a broadcast mul), a residual branch under stochastic
    depth (Swin's and ConvNeXt's: times a noise no autograd node made, so only the noise is
    kept), a fire module's concatenation, average pooling, dropout, linear."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 4, 1), nn.SiLU(),
                                nn.Conv2d(4, 16, 1), nn.Sigmoid())
        self.body = nn.Conv2d(16, 16, 3, padding=1)
        self.squeeze = nn.Conv2d(16, 8, 1)
        self.left = nn.Conv2d(8, 16, 1)
        self.right = nn.Conv2d(8, 16, 3, padding=1)
        self.pool = nn.AvgPool2d(2)
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(32 * 8 * 8, classes))

    def forward(self, x):
        x = self.stem(x)
        x = x * self.se(x)
        noise = torch.empty(x.shape[0], 1, 1, 1).bernoulli_(0.8).div_(0.8)  # stochastic depth
        x = x + self.body(x) * noise
        s = F.relu(self.squeeze(x))
        x = torch.cat([F.relu(self.left(s)), F.relu(self.right(s))], 1)
        return self.head(self.pool(x))


def make(name):
    torch.manual_seed(0)
    if name == "resnet18":
        torchvision = pytest.importorskip("torchvision")
        return torchvision.models.resnet18(), (torch.randn(2, 3, 64, 64),
                                               torch.randint(0, 1000, (2,)))
    return Mixed(), (torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)))


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)


def profiled_step(name, path):
    """One warm-up step, then one step recorded by torch.profiler (ProfilerStep#1)."""
    model, batch = make(name)
    optimizer = sgd(model)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                 schedule=schedule(wait=0, warmup=1, active=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(2):
            default_step(model, batch, F.cross_entropy, optimizer)
            prof.step()


@pytest.mark.parametrize("name", ["resnet18", "mixed"])
def test_importer_saved_bytes_within_one_percent_of_capture(name, tmp_path):
    if not MEMPLAN.exists():
        pytest.skip(f"{MEMPLAN} is not built (scripts/build release)")
    profiled = tmp_path / "step.pt.trace.json"
    profiled_step(name, profiled)
    imported = tmp_path / "imported.json"
    run = subprocess.run([str(MEMPLAN), "import", "kineto", str(profiled), "-o", str(imported)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "imported ProfilerStep#1" in run.stdout
    importer = memplan.parse_trace(imported.read_text(), str(imported)).saved_activation_bytes()

    model, batch = make(name)
    captured = capture(model, batch, F.cross_entropy, sgd(model))  # its own warm-up step first
    exact = saved_bytes_in_trace(captured)
    assert exact == captured.saved_bytes_hooks + captured.held_bytes
    assert importer == pytest.approx(exact, rel=0.01), (
        f"{name}: importer {importer} B, capture {exact} B "
        f"({(importer - exact) / exact:+.2%})")
