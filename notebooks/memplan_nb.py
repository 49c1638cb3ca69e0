"""Helpers the notebooks share: the memplan Python package, scratch files, figures.

The notebooks call the `memplan` package (python/memplan/, built into build/release/python); it is
found on PYTHONPATH (scripts/notebooks sets it), else in build/release/python of this checkout.
Scratch files go to $MEMPLAN_NB_OUT, or out/notebooks/ of this checkout; figures go to
$MEMPLAN_NB_FIGURES, or docs/figures/ (the test command sends them to out/, so that running the
tests leaves the checkout as it was).
"""
import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
try:
    import memplan  # noqa: E402
except ImportError:
    sys.path.insert(0, str(ROOT / "build" / "release" / "python"))
    import memplan  # noqa: E402,F811

OUT = Path(os.environ.get("MEMPLAN_NB_OUT", ROOT / "out" / "notebooks"))
FIGURES = Path(os.environ.get("MEMPLAN_NB_FIGURES", ROOT / "docs" / "figures"))
OUT.mkdir(parents=True, exist_ok=True)
FIGURES.mkdir(parents=True, exist_ok=True)

GiB = 1024**3


def zoo_trace(model, device, batch):
    """The zoo's modeled trace of `model` on `device` at `batch`, also written to OUT (what
    `memplan zoo` would write) so the command line can replay it."""
    trace = memplan.zoo(model, device, batch=batch)
    trace.write(OUT / f"{trace.name}.json")
    return trace


def save(fig, name):
    """Saves `fig` as NAME.png in FIGURES (docs/figures/) and returns the path."""
    path = FIGURES / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path
