"""The README's "Your own PyTorch model" recipe, run as written on a small CNN (#40 item 10: the
recipe searched at one budget, found no plan for a small CNN and ended in a CalledProcessError, and
needed `memplan` on PATH)."""

import contextlib
import io
import os
import pathlib
import re
import sys

import torch
from torch import nn

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build


class MyNet(nn.Module):
    """A small CNN whose in-core peak is in its backward pass, where gradients dominate: plans of
    its feature maps take off 5% of it at most (the recipe's one budget, half the saved bytes,
    had no plan)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def readme_recipe():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Your own PyTorch model"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_recipe_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no memplan on PATH: the recipe needs none
    import memplan
    search = memplan.search  # each of the recipe's searches in 2 s, not the default 10
    monkeypatch.setattr(memplan, "search", lambda *a, **k: search(*a, time_limit=1, **k))
    torch.manual_seed(0)
    out = io.StringIO()
    scope = {"MyNet": MyNet}
    with contextlib.redirect_stdout(out):
        exec(compile(readme_recipe(), "README.md", "exec"), scope)  # noqa: S102
    printed = out.getvalue().split()
    # "<share>% of the in-core peak: True <measured> <predicted> <seconds> <seconds>"
    assert printed[:5] == [f"{scope['share']}%", "of", "the", "in-core", "peak:"]
    assert printed[5] == "True"
    assert printed[6] == printed[7]  # the saved-bytes peak, to the byte
    assert scope["share"] == 95  # what searching feature maps alone can take off this one
    assert scope["result"].feasible
    assert os.path.getsize("mynet.json") > 0
