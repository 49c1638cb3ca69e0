"""validate on the host backend through the Python API."""
import pytest

import memplan
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
