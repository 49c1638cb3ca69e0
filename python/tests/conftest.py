"""The PyTorch the tests run under: named in pytest's header, and checked against the one ctest's
entry names (MEMPLAN_EXPECT_TORCH, major.minor; python/CMakeLists.txt), so that a pass under
"(torch 2.15)" is a pass under torch 2.15."""
import os

import pytest


def _torch_version():
    try:
        import torch
    except ImportError:
        return "none"
    return torch.__version__


def pytest_report_header(config):
    return f"torch {_torch_version()}"


def pytest_configure(config):
    expected = os.environ.get("MEMPLAN_EXPECT_TORCH")
    found = _torch_version()
    if expected and found != expected and not found.startswith(expected + "."):
        pytest.exit(f"this python has torch {found}, the test names torch {expected} "
                    "(MEMPLAN_EXPECT_TORCH)", returncode=3)
