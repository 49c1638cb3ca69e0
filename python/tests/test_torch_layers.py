"""memplan.torch's recorder names an op's layer from the C++ aten table (core/aten_layers.hpp,
through memplan._core), the one the Kineto importer reads: it has no table of its own, and every
aten name maps to the same layer both ways."""

import ast
import pathlib
import sys
from types import SimpleNamespace

import torch
from torch import nn
from torch.nn import functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build

from memplan import _core  # noqa: E402
from memplan.torch import capture  # noqa: E402
from memplan.torch import recorder  # noqa: E402


def op(name):
    """An aten operator as the recorder's dispatch mode sees it: its schema's name."""
    return SimpleNamespace(_schema=SimpleNamespace(name=name))


def test_recorder_has_no_aten_table_of_its_own():
    source = pathlib.Path(recorder.__file__).read_text()
    table = {row["aten"] for row in _core.aten_layers()}
    assert len(table) > 40 and "aten::convolution" in table
    strings = {node.value for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert not strings & table, "recorder.py names operators of the C++ table itself"
    assert not hasattr(recorder, "_LAYERS")


def test_every_name_maps_the_same_both_ways():
    for row in _core.aten_layers():
        if row["test"] != "name":
            continue
        assert recorder.layer_of(op(row["aten"]), ()) == row["layer"] == \
            _core.aten_layer(row["aten"], ())
    # An op the table does not know keeps its aten name: a generic op.
    assert _core.aten_layer("aten::mm", ()) is None
    assert recorder.layer_of(op("aten::mm"), ()) == "aten::mm"


def test_arguments_decide_the_same_both_ways():
    x4, w4 = torch.zeros(1, 2, 3, 3), torch.zeros(2, 2, 1, 1)
    x5, w5 = torch.zeros(1, 2, 3, 3, 3), torch.zeros(2, 2, 1, 1, 1)
    x3, w3 = torch.zeros(1, 2, 3), torch.zeros(2, 2, 1)
    cases = [
        ("aten::convolution", (x4, w4), "conv2d"),
        ("aten::convolution", (x5, w5), "conv3d"),
        ("aten::convolution", (x3, w3), "aten::convolution"),  # conv1d: no layer (Note [conv1d])
        ("aten::convolution_backward", (x5, x5, w5), "conv3d"),
        ("aten::convolution_backward", (x3, x3, w3), "aten::convolution_backward"),
        ("aten::hardtanh_", (x4, 0.0, 6.0), "relu6"),
        ("aten::hardtanh_", (x4, 0, 6), "relu6"),
        ("aten::hardtanh", (x4, -1.0, 1.0), "aten::hardtanh"),
        ("aten::hardtanh", (x4,), "aten::hardtanh"),
        ("aten::hardtanh_backward", (x4, x4, 0.0, 6.0), "relu6"),
        ("aten::add", (x4, x4), "add"),
        ("aten::add_", (x4, 1.0), "aten::add_"),
    ]
    for name, args, layer in cases:
        assert recorder.layer_of(op(name), args) == layer, name
        assert (_core.aten_layer(name, args) or name) == layer, name


class Small(nn.Module):
    """conv3d -> ReLU6 -> conv1d -> linear: the convolutions by their weight's rank."""

    def __init__(self):
        super().__init__()
        self.conv3 = nn.Conv3d(2, 3, 1)
        self.act = nn.ReLU6()
        self.conv1 = nn.Conv1d(3, 4, 1)
        self.fc = nn.Linear(4 * 8, 5)

    def forward(self, x):
        h = self.act(self.conv3(x)).flatten(2)
        return self.fc(self.conv1(h).flatten(1))


def test_captured_layers_are_the_tables():
    torch.manual_seed(0)
    model = Small()
    batch = (torch.randn(2, 2, 2, 2, 2), torch.randint(0, 5, (2,)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ops = capture(model, batch, F.cross_entropy, opt).trace["ops"]
    layer = {(o["name"], o["phase"]): o["layer"] for o in ops}
    assert layer[("conv3.convolution", "forward")] == "conv3d"
    assert layer[("act.hardtanh", "forward")] == "relu6"
    assert layer[("conv1.convolution", "forward")] == "aten::convolution"
    assert layer[("fc.addmm", "forward")] == "linear"
    backward = [o["layer"] for o in ops if o["phase"] == "backward"]
    assert "conv3d" in backward and "relu6" in backward and "aten::convolution_backward" in backward
