"""search (progress, cancellation) and sweep through the Python API."""
import pytest

import memplan
from api_support import TRACES, cli_json, run_cli

TINY = TRACES / "resnet_tiny.json"


@pytest.fixture(scope="module")
def tight():
    trace = memplan.load_trace(TINY)
    reserved = memplan.simulate(trace, policy="in-core").peak_reserved_bytes
    return trace, int(reserved * 0.9)  # a plan fits; the search takes 4 rounds to settle


def test_search_finds_the_plan_memplan_search_finds(tight, tmp_path):
    trace, memory = tight
    found = memplan.search(trace, memory=memory, threads=1, deterministic=True, rounds=6)
    status, _, err = run_cli("search", TINY, "--memory", f"{memory}B", "--threads", 1, "--deterministic",
                             "--rounds", 6, "-o", tmp_path / "plan.json")
    assert status in (0, 1), err
    assert found.plan == memplan.read_plan(tmp_path / "plan.json", trace)
    cli = cli_json("search", TINY, "--memory", f"{memory}B", "--threads", 1, "--deterministic",
                   "--rounds", 6)
    mine = found.to_dict()
    for key in ("step_s", "step_alone_s", "peak_bytes", "feasible", "best_policy", "best_policy_step_s",
                "evaluated", "rounds", "converged", "within_gap", "actions", "lower_bound_s",
                "period_lower_bound_s", "gap"):
        assert mine[key] == cli[key], key
    assert not found.cancelled
    # Never worse than the best policy.
    if found.best_policy_feasible:
        assert found.feasible and found.step_s <= found.best_policy_step_s * (1 + 1e-12)


def test_the_search_stops_within_the_gap_it_is_given(tight):
    # #39: memplan search --gap; a fraction or a percentage, refused out of range as the CLI does.
    trace, memory = tight
    wide = memplan.search(trace, memory=memory, threads=1, deterministic=True, gap="1000%")
    assert wide.within_gap and wide.gap <= 10
    assert wide.to_dict()["within_gap"] is True
    same = memplan.search(trace, memory=memory, threads=1, deterministic=True, gap=10)
    assert same.plan == wide.plan and same.rounds == wide.rounds
    with pytest.raises(memplan.InputError, match=r"^--gap: -0.1 is not a gap from 0 to 100"):
        memplan.search(trace, memory=memory, gap=-0.1)
    with pytest.raises(memplan.InputError, match=r"^--gap: 'half' is not a gap"):
        memplan.search(trace, memory=memory, gap="half")


def test_progress_is_called_every_round_and_false_stops_the_search(tight):
    trace, memory = tight
    full = memplan.search(trace, memory=memory, threads=1, deterministic=True, rounds=6)
    assert full.rounds > 2  # otherwise stopping after round 2 would show nothing

    seen = []
    def progress(p):
        if p.stage == "seeding":  # one call per policy that seeds the search, before round 1
            return True
        seen.append((p.round, p.evaluated, p.best.feasible, p.best.step_ns))
        return p.round < 2  # False after the second round

    stopped = memplan.search(trace, memory=memory, threads=1, deterministic=True, rounds=6,
                             progress=progress)
    assert [r for r, *_ in seen] == [1, 2]
    assert stopped.rounds == 2 and stopped.cancelled and not stopped.converged
    # The best plan so far: what the last progress call reported, and what the simulator says.
    assert round(stopped.simulation.step_s * 1e9) == seen[-1][3]
    assert seen[0][1] < seen[1][1]  # evaluated counts up


def test_an_exception_in_progress_stops_the_search_and_is_raised(tight):
    trace, memory = tight
    calls = []
    def progress(p):
        calls.append(p.stage)
        raise KeyError("stop here")

    with pytest.raises(KeyError, match="stop here"):
        memplan.search(trace, memory=memory, threads=1, deterministic=True, rounds=6,
                       progress=progress)
    assert calls == ["seeding"]  # the first call, for the first policy that seeded


def test_sweep_is_memplan_sweep(tmp_path):
    trace = memplan.load_trace(TINY)
    mlp = memplan.load_trace(TRACES / "mlp4.json")
    done = []
    result = memplan.sweep({"tiny": trace, "mlp4": mlp}, memory=["150KiB", 1 << 20],
                           link=["pcie3"], bandwidth=["8GB/s"], policies=["vdnn-all", "pooch"],
                           search=False, threads=2, progress=lambda p: done.append(p.done))
    # The CLI names traces by path; give it files called like the Python names.
    trace.write(tmp_path / "tiny")
    mlp.write(tmp_path / "mlp4")
    status, _, err = run_cli("sweep", tmp_path / "tiny", tmp_path / "mlp4", "--memory",
                             f"150KiB,{1 << 20}B", "--link", "pcie3", "--bandwidth", "8GB/s",
                             "--policies", "vdnn-all,pooch", "--no-search", "-o", tmp_path / "s.csv")
    assert status == 0, err
    df = result.to_dataframe()
    cli = memplan._tables.read_csv((tmp_path / "s.csv").read_text(), keep_default_na=False,
                                   na_values={"step_s": [""], "overhead": [""]})
    cli["trace"] = cli["trace"].map(lambda p: p.rsplit("/", 1)[-1])
    assert len(df) == 2 * 2 * 2 * 2  # traces x memories x links x policies
    assert sorted(done) == list(range(1, len(df) + 1))  # one call per cell
    assert df.drop(columns="decide_s").equals(cli.drop(columns="decide_s"))


def test_sweep_refuses_what_is_not_a_trace():
    # Found by fuzz-cli --python: sweep([None]) raised AttributeError ('NoneType' ... 'name').
    with pytest.raises(TypeError, match=r"^expected a memplan.Trace, a memplan.Job"):
        memplan.sweep([None], search=False)


def test_a_step_with_a_host_side_is_bounded_back_to_back():
    # The imported ResNet-50 step is CPU-bound: the gap is of the step back to back, which the
    # search ranks by, against its own bound (docs/search.md, "How far from optimal").
    trace = memplan.load_trace(TRACES / "resnet50_b32_v100.json")
    found = memplan.search(trace, memory="2GiB", time_limit=3, threads=1)
    assert found.lower_bound_s is not None and found.period_lower_bound_s is not None
    assert found.period_lower_bound_s <= found.step_s < found.lower_bound_s
    assert found.gap == pytest.approx(found.step_s / found.period_lower_bound_s - 1, abs=1e-9)
    compared = memplan.compare(trace, memory="2GiB")
    assert compared.period_lower_bound_s == found.period_lower_bound_s
    tiny = memplan.search(memplan.load_trace(TINY), threads=1, deterministic=True, rounds=1)
    assert tiny.period_lower_bound_s is None  # no host side: the step alone is the step
