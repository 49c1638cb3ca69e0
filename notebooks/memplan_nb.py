"""Helpers the notebooks share: run the memplan binary, keep scratch files, save figures.

The binary is $MEMPLAN, or build/release/bin/memplan of this checkout. Scratch files (traces,
plans, CSVs) go to $MEMPLAN_NB_OUT, or out/notebooks/ of this checkout; figures go to
docs/figures/.
"""
import json
import os
import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MEMPLAN = Path(os.environ.get("MEMPLAN", ROOT / "build" / "release" / "bin" / "memplan"))
OUT = Path(os.environ.get("MEMPLAN_NB_OUT", ROOT / "out" / "notebooks"))
FIGURES = ROOT / "docs" / "figures"
OUT.mkdir(parents=True, exist_ok=True)
FIGURES.mkdir(parents=True, exist_ok=True)

GiB = 1024**3


def memplan(*args, ok=(0,)):
    """Runs `memplan ARGS`; returns its standard output. Fails on an exit status not in `ok`."""
    cmd = [str(MEMPLAN), *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in ok:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def memplan_json(*args, ok=(0,)):
    return json.loads(memplan(*args, "--json", ok=ok))


def zoo_trace(model, device, batch):
    """Writes the modeled trace of `model` on `device` at `batch` (`memplan zoo`); returns its path."""
    path = OUT / f"{model}_{device}_b{batch}.json"
    memplan("zoo", model, "--device", device, "--batch", batch, "-o", path)
    return path


def sweep(name, traces, *flags):
    """`memplan sweep` over `traces` with `flags` into OUT/NAME.csv; returns it as a DataFrame."""
    import pandas as pd

    csv = OUT / f"{name}.csv"
    memplan("sweep", *traces, *flags, "-o", csv)
    return pd.read_csv(csv, keep_default_na=False, na_values={"iteration_s": [""], "overhead": [""]})


def save(fig, name):
    """Saves `fig` as docs/figures/NAME.png and returns the path."""
    path = FIGURES / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path
