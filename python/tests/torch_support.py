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
