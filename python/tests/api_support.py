"""Shared by the test_api*.py files: the checkout, the memplan binary, running it."""
import json
import os
import subprocess
from pathlib import Path

import memplan

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "traces"
# ctest names the binary; run by hand with PYTHONPATH=build/PRESET/python, it is next to it.
BINARY = Path(os.environ.get("MEMPLAN_BINARY",
                             Path(memplan.__file__).resolve().parents[2] / "bin" / "memplan"))


def run_cli(*args):
    """(exit status, stdout, stderr) of `memplan ARGS`."""
    r = subprocess.run([str(BINARY), *map(str, args)], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def cli_json(*args):
    status, out, err = run_cli(*args, "--json")
    assert status in (0, 1), err
    return json.loads(out)


def cli_error(*args):
    """The one line `memplan ARGS` prints for bad input (exit 2), without the "memplan: " prefix."""
    status, _, err = run_cli(*args)
    assert status == 2, err
    line = err.strip()
    assert "\n" not in line and line.startswith("memplan: ")
    # The command adds where to read more (its --help), which a Python caller has no use for.
    return line[len("memplan: "):].removesuffix(" (see memplan --help)")
