"""simulate and compare through the Python API give what the commands print."""
import pytest

import memplan
from api_support import TRACES, cli_error, cli_json, run_cli

MLP4 = TRACES / "mlp4.json"
TINY = TRACES / "resnet_tiny.json"


@pytest.mark.parametrize("policy", ["in-core", "vdnn-all", "checkpoint-sqrt", "swap-all"])
def test_simulate_is_memplan_simulate(policy):
    sim = memplan.simulate(memplan.load_trace(TINY), policy=policy)
    assert sim.summary == cli_json("simulate", TINY, "--policy", policy)
    assert sim.plan.policy == policy


def test_what_if_machine_and_a_plan_that_does_not_fit():
    trace = memplan.load_trace(TINY)
    incore = memplan.simulate(trace, policy="in-core")
    # One byte less than the in-core run reserves: in-core cannot fit, and says where.
    short = incore.peak_reserved_bytes - 1
    sim = memplan.simulate(trace, policy="in-core", memory=short, link="nvlink2")
    assert not sim.feasible
    assert sim.oom is not None and sim.oom.startswith("out of device memory at op")
    assert sim.summary == cli_json("simulate", TINY, "--policy", "in-core", "--memory", f"{short}B",
                                   "--link", "nvlink2")
    status, _, err = run_cli("simulate", TINY, "--policy", "in-core", "--memory", f"{short}B",
                             "--link", "nvlink2")
    assert status == 1 and err.strip() == f"memplan: the plan does not fit: {sim.oom}"
    assert memplan.machine(trace, memory="1GiB").memory_bytes == 1 << 30


def test_plan_files_round_trip_and_simulate_from_file(tmp_path):
    trace = memplan.load_trace(MLP4)
    sim = memplan.simulate(trace, policy="vdnn-all", encode="fp16")
    path = tmp_path / "plan.json"
    sim.plan.write(path)
    status, _, err = run_cli("simulate", MLP4, "--policy", "vdnn-all", "--encode", "fp16",
                             "--plan-out", tmp_path / "cli_plan.json")
    assert status == 0, err
    assert path.read_text() == (tmp_path / "cli_plan.json").read_text()
    plan = memplan.read_plan(path, trace)
    assert plan == sim.plan
    again = memplan.simulate(trace, plan=path)
    assert again.summary["step_alone_s"] == sim.summary["step_alone_s"]
    df = plan.to_dataframe()
    assert len(df) == trace.info().feature_maps
    # vdnn-all keeps the last map, probs: 160 bytes, one arena unit narrowed or not, so Gist
    # leaves it as it is (search/policies/gist.cpp).
    assert set(df["action"]) == {"swap", "keep"}
    fp16 = memplan.simulate(trace, policy="in-core", encode="fp16").plan
    fp16.write(path)
    assert memplan.read_plan(path, trace) == fp16
    assert set(fp16.to_dataframe()["action"]) == {"encode:fp16", "keep"}


def test_timeline_and_memory_curve(tmp_path):
    trace = memplan.load_trace(TINY)
    sim = memplan.simulate(trace, policy="vdnn-all")
    spans = sim.timeline.to_dataframe()
    assert set(spans["track"]) == {"compute stream", "h2d stream", "d2h stream", "compute stalls"}
    # The compute stream runs every op once: its run spans add up to the workload's compute.
    runs = spans[spans["category"] == "run"]
    assert runs["duration_s"].sum() == pytest.approx(sim.compute_s, rel=1e-6)
    curve = sim.timeline.memory()
    assert list(curve.columns) == ["time_ns", "live_bytes", "reserved_bytes"]
    assert curve["live_bytes"].max() == sim.peak_bytes
    sim.timeline.write(tmp_path / "t.json")
    status, _, err = run_cli("simulate", TINY, "--policy", "vdnn-all",
                             "--timeline", tmp_path / "cli.json", "--memory-csv", tmp_path / "m.csv")
    assert status == 0, err
    assert (tmp_path / "t.json").read_text() == (tmp_path / "cli.json").read_text()
    assert sim.timeline.memory_csv() == (tmp_path / "m.csv").read_text()


def test_compare_is_memplan_compare():
    trace = memplan.load_trace(TINY)
    c = memplan.compare(trace, memory="150KiB")
    cli = cli_json("compare", TINY, "--memory", "150KiB")
    strip = lambda rows: [{k: v for k, v in r.items() if k != "decide_s"} for r in rows]
    assert strip(c.rows) == strip(cli["rows"]) and c.ideal_s == cli["ideal_s"]
    assert c.lower_bound_s == cli["lower_bound_s"] and all("gap" in r for r in c.rows)
    df = c.to_dataframe()
    assert list(df["policy"]) == [r["policy"] for r in c.rows]
    assert list(df["feasible"]) == [int(r["feasible"]) for r in c.rows]


def test_bad_arguments_raise_the_cli_line(tmp_path):
    trace = memplan.load_trace(MLP4)
    cases = [
        (dict(policy="no-such"), ["--policy", "no-such"]),
        (dict(policy="in-core", memory="12XB"), ["--policy", "in-core", "--memory", "12XB"]),
        (dict(policy="in-core", link="pcie9"), ["--policy", "in-core", "--link", "pcie9"]),
        (dict(policy="in-core", encode="fp3"), ["--policy", "in-core", "--encode", "fp3"]),
    ]
    for kwargs, flags in cases:
        with pytest.raises(memplan.InputError) as e:
            memplan.simulate(trace, **kwargs)
        assert str(e.value) == cli_error("simulate", MLP4, *flags)
    with pytest.raises(memplan.InputError, match="give plan=PLAN or policy=NAME"):
        memplan.simulate(trace)
    other = memplan.simulate(memplan.load_trace(TINY), policy="vdnn-all").plan
    (tmp_path / "other.json").write_text(other.to_json())
    with pytest.raises(memplan.InputError) as e:
        memplan.simulate(trace, plan=tmp_path / "other.json")
    assert str(e.value) == cli_error("simulate", MLP4, "--plan", tmp_path / "other.json")
    with pytest.raises(memplan.InputError):  # a Plan object for another trace: checked the same way
        memplan.simulate(trace, plan=other)
