"""Shared by the test_torch_*.py files that apply plans to a small model."""
from torch import nn
from torch.nn import functional as F


class Tiny(nn.Module):
    """conv-bn-relu_ -> max-pool -> residual conv-bn + add -> relu_ -> dropout -> linear: in-place
    chains, a residual, and randomness that recompute must replay."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x)), inplace=True), 2)
        h = F.relu(self.bn2(self.conv2(h)) + h, inplace=True)
        return self.fc(self.drop(h.flatten(1)))


def with_fixed_durations(trace):
    """The trace, changed in place (validate reads it too), with every op's duration a function of
    the bytes it writes (2 us + 1 ns a byte) instead of the CPU time captured: the search's plan
    then depends on the model alone, not on the machine's load while it was captured (loaded
    machines gave a plan without fp16, and one with Adam's update on the device)."""
    bytes_of = {t["id"]: t["bytes"] for t in trace["tensors"]}
    for op in trace["ops"]:
        op["duration_ns"] = 2000 + sum(bytes_of[t] for t in op["outputs"])
    return trace
