"""validate on the host backend through the Python API."""
import json

import pytest

import memplan
from memplan import _validation
from api_support import run_cli, TRACES, cli_error, cli_json

MLP4 = TRACES / "mlp4.json"


@pytest.mark.parametrize("policy", ["in-core", "vdnn-all", "checkpoint-sqrt"])
def test_validate_on_the_host_backend(policy):
    report = memplan.validate(memplan.load_trace(MLP4), policy=policy)
    cli = cli_json("validate", MLP4, "--backend", "host", "--policy", policy)
    assert report.ok and report.failures == []
    assert report.peaks_match and report.gradients_match and report.bitwise_equal
    for key in ("fits", "policy", "peak_bytes_predicted", "peak_bytes_measured",
                "peak_reserved_bytes_predicted", "peak_reserved_bytes_measured",
                "iteration_s_predicted", "gradients_match", "bitwise_equal", "comparison",
                "tensors_compared", "spilled_bytes", "calibrated"):
        assert report.data[key] == cli[key], key
    row = report.to_dataframe()
    assert len(row) == 1 and row["peak_bytes_measured"][0] == report.peak_bytes_measured


def test_narrowed_maps_are_compared_within_the_stated_tolerance():
    report = memplan.validate(memplan.load_trace(MLP4), policy="in-core", encode="fp16")
    assert report.comparison == "tolerance" and report.tolerance["narrowed_maps"] > 0
    assert report.gradients_match and report.ok


def test_a_plan_that_does_not_fit_is_refused_unless_forced():
    trace = memplan.load_trace(MLP4)
    with pytest.raises(memplan.InputError) as e:
        memplan.validate(trace, policy="in-core", memory="300KiB")
    # The command's line for the same outcome (exit 1: a plan that does not fit is a result).
    status, _, err = run_cli("validate", MLP4, "--policy", "in-core", "--memory", "300KiB")
    assert status == 1
    assert "memplan: " + str(e.value).replace("(force=True runs it)", "(--force runs it)") == \
        err.strip()
    forced = memplan.validate(trace, policy="in-core", memory="300KiB", force=True)
    assert not forced.fits and not forced.ok
    # The backend runs out where the simulator said it would (they share the allocator model).
    assert forced.oom == memplan.simulate(trace, policy="in-core", memory="300KiB").oom


def host_plan(trace, placed, update, prefetches=None):
    """In-core's plan of `trace` with tensors `placed` (names) on the host, the update on
    `update`, and `prefetches` (tensor name -> [(first use, prefetch_before)])."""
    data = memplan.simulate(trace, policy="in-core").plan.to_dict()
    data["tensors"] = [{"tensor": t, "placement": "host"} for t in placed]
    for entry in data["tensors"]:
        chosen = (prefetches or {}).get(entry["tensor"])
        if chosen:
            entry["prefetches"] = [{"first_use": f, "prefetch_before": p} for f, p in chosen]
    data["update"] = update
    return memplan.parse_plan(json.dumps(data), trace)


def groups_of(points):
    return {p.tensor: [(g.first_use, g.last_use, g.earliest_prefetch, g.default_prefetch,
                        g.prefetch_before) for g in p.groups] for p in points}


def test_host_points_are_the_groups_and_drops_the_lowering_uses():
    """memplan._validation.host_points (Note [Host placement] in core/plan.hpp), on mlp4: ops 0-7
    forward, 8-15 backward, 16 the update (sgd reads w1-w4, g_w4, g_w3, g_w2, g_w1, m_w1-m_w4)."""
    trace = memplan.load_trace(MLP4)
    # w1 (1): fc1 (0), fc1_bwd (15), sgd (16); x (0): fc1, fc1_bwd; g_w4 (17): made by fc4_bwd
    # (9), read by sgd; g_w1 (25): made by fc1_bwd (15), read by sgd; m_w1 (26): sgd.
    placed = ["x", "w1", "g_w4", "g_w1", "m_w1"]
    on_device = host_plan(trace, placed, "device", {"g_w4": [(16, 11)], "w1": [(15, 3)]})
    points = _validation.host_points(on_device)
    assert [p.tensor for p in points] == [0, 1, 17, 25, 26]
    # Pre-existing tensors have no drop point; a gradient's goes one op after its producer.
    assert [p.gradient_drop for p in points] == [None, None, 10, 16, None]
    # (first use, last use, earliest prefetch, default prefetch, the plan's or the default point)
    assert groups_of(points) == {
        0: [(0, 0, 0, 0, 0), (15, 15, 1, 14, 14)],
        1: [(0, 0, 0, 0, 0), (15, 15, 1, 14, 3), (16, 16, 16, 16, 16)],
        17: [(16, 16, 11, 15, 11)],  # brought back for the update on the device
        25: [],  # its device copy is still there at the update
        26: [(16, 16, 0, 15, 15)]}
    # An update on the host reads the slots: no update group, and a gradient is not brought back.
    on_host = host_plan(trace, ["w1", "g_w1", "g_w2", "g_w3", "g_w4", "m_w1", "m_w2", "m_w3",
                                "m_w4"], "host")
    points = {p.tensor: p for p in _validation.host_points(on_host)}
    assert groups_of(points.values())[1] == [(0, 0, 0, 0, 0), (15, 15, 1, 14, 14)]
    assert all(not points[t].groups for t in (17, 20, 23, 25, 26, 27, 28, 29))
    assert [points[t].gradient_drop for t in (17, 20, 23, 25)] == [10, 12, 14, 16]
    # No placement, no points.
    assert _validation.host_points(memplan.simulate(trace, policy="in-core").plan) == []
