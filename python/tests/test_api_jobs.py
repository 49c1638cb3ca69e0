"""Jobs (the step of a job that ran on several GPUs) through the Python API: read, imported from
the ranks' profiler files, simulated, compared and searched, each giving what the command gives
for the same job's file. The real jobs are ../shared/data/kineto-multirank/ (its README): two
ranks of an 8-rank DLRM job on V100s (NCCL) and all 4 ranks of a ResNet DDP job on MI300Xs
(RCCL) merged in one file."""
import json
import shutil

import pytest

import memplan
from api_support import ROOT, cli_error, cli_json, run_cli

MULTIRANK = ROOT.parent / "shared/data/kineto-multirank"
DLRM = [MULTIRANK / f"dlrm_v100_ddp_rank{r}.pt.trace.json.gz" for r in (0, 1)]
MI300X = MULTIRANK / "mi300x_resnet_ddp_4ranks_merged.json.gz"


def small_rank(rank, fc_ns, sgd_ns):
    """One rank of a job of two: fc (fc_ns), relu (10), fc_bwd (200), the weight gradient's
    all-reduce on the nccl stream (recorded transfer 30 ns), then sgd (sgd_ns) after it."""
    return {
        "provenance": {"source": "hand-written"},
        "device": {"name": "toy", "memory_bytes": 1 << 20},
        "distributed": {"backend": "nccl", "rank": rank, "world_size": 2},
        "streams": ["compute", "nccl"],
        "tensors": [
            {"id": 0, "name": "x", "bytes": 64, "kind": "input", "producer": None},
            {"id": 1, "name": "w", "bytes": 64, "kind": "parameter", "producer": None},
            {"id": 2, "name": "y", "bytes": 64, "kind": "activation", "producer": 0},
            {"id": 3, "name": "a", "bytes": 64, "kind": "activation", "producer": 1},
            {"id": 4, "name": "g_w", "bytes": 64, "kind": "gradient", "producer": 2}],
        "ops": [
            {"id": 0, "name": "fc", "layer": "linear", "phase": "forward", "inputs": [0, 1],
             "outputs": [2], "workspace_bytes": 0, "duration_ns": fc_ns},
            {"id": 1, "name": "relu", "layer": "relu", "phase": "forward", "inputs": [2],
             "outputs": [3], "workspace_bytes": 0, "duration_ns": 10},
            {"id": 2, "name": "fc_bwd", "layer": "linear", "phase": "backward", "inputs": [3, 0],
             "outputs": [4], "workspace_bytes": 0, "duration_ns": 200, "differentiates": 0},
            {"id": 3, "name": "nccl:all_reduce", "layer": "nccl:all_reduce", "phase": "backward",
             "inputs": [4], "outputs": [], "workspace_bytes": 0, "duration_ns": 30, "stream": 1,
             "collective": {"kind": "all_reduce", "in_bytes": 64, "out_bytes": 64,
                            "dtype": "float32", "group": "0", "sequence": 0}},
            {"id": 4, "name": "sgd", "layer": "sgd", "phase": "update", "inputs": [1, 4],
             "outputs": [], "workspace_bytes": 0, "duration_ns": sgd_ns, "after": [3]}]}


def write_job(path, ranks):
    path.write_text(json.dumps({"format": "memplan-trace", "version": 3, "ranks": ranks}))
    return path


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Rank 0 reaches the all-reduce at 100 + 10 + 200 = 310 ns, rank 1 at 400 + 10 + 200 = 610:
    rank 0 waits 300 ns, the transfer runs 610 to 640 on both, then sgd: rank 0 ends at 690,
    rank 1 (sgd 60) at 700, the job's step."""
    return write_job(tmp_path_factory.mktemp("small") / "small.json",
                     [small_rank(0, 100, 50), small_rank(1, 400, 60)])


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory):
    """The two DLRM ranks as `memplan import kineto` writes them, and the Python import."""
    path = tmp_path_factory.mktemp("dlrm") / "dlrm.json"
    status, _, err = run_cli("import", "kineto", *DLRM, "-o", path)
    assert status == 0, err
    return path, memplan.import_kineto_job(DLRM)


@pytest.fixture(scope="module")
def mi300x(tmp_path_factory):
    path = tmp_path_factory.mktemp("mi300x") / "mi300x.json"
    status, _, err = run_cli("import", "kineto", MI300X, "-o", path)
    assert status == 0, err
    return path, memplan.import_kineto_job(MI300X)


def without(data, *keys):
    """`data` (a dict, or a list of them, nested) without the keys that time the run itself."""
    if isinstance(data, list):
        return [without(d, *keys) for d in data]
    if isinstance(data, dict):
        return {k: without(v, *keys) for k, v in data.items() if k not in keys}
    return data


def test_a_job_reads_as_its_ranks(small):
    job = memplan.load_job(small)
    assert len(job.ranks) == 2 and job.world_size == 2 and job.backend == "nccl"
    assert [t.rank for t in job.ranks] == [0, 1]
    assert all(isinstance(t, memplan.Trace) and t.op_count == 5 for t in job.ranks)
    info = cli_json("info", small)
    assert [t.info().data for t in job.ranks] == info["ranks"]
    calls = job.collectives()
    assert list(calls["rank"]) == [0, 1] and set(calls["kind"]) == {"all_reduce"}
    assert list(calls["op"]) == [3, 3] and list(calls["duration_ns"]) == [30, 30]
    assert memplan.parse_job(job.to_json()) == job
    # A file of one step is a job of one rank; a job's file is no single step.
    single = memplan.load_job(ROOT / "traces/mlp4.json")
    assert len(single.ranks) == 1 and single.world_size == 1 and single.ranks[0].rank is None
    assert single.ranks[0] == memplan.load_trace(ROOT / "traces/mlp4.json")
    with pytest.raises(memplan.InputError) as e:
        memplan.load_trace(small)
    assert str(e.value) == cli_error("validate", small, "--policy", "in-core")


def test_simulate_a_job_gives_the_hand_worked_step(small, tmp_path):
    sim = memplan.simulate(memplan.load_job(small), policy="in-core")
    assert sim.summary == cli_json("simulate", small, "--policy", "in-core")
    assert sim.ok and sim.feasible and sim.world_size == 2
    assert sim.step_alone_s == pytest.approx(700e-9) and sim.slowest_rank == 1
    calls = sim.collectives()
    assert list(calls["arrival_ns"]) == [310, 610]
    assert list(calls["start_ns"]) == [610, 610] and list(calls["end_ns"]) == [640, 640]
    assert list(calls["wait_s"]) == pytest.approx([300e-9, 0.0])
    assert list(calls["transfer_s"]) == pytest.approx([30e-9, 30e-9])
    frame = sim.to_dataframe()
    assert list(frame["rank"]) == [0, 1] and list(frame["step_alone_s"]) == pytest.approx([690e-9, 700e-9])
    assert list(frame["collectives.wait_s"]) == pytest.approx([300e-9, 0.0])
    status, out, err = run_cli("simulate", small, "--policy", "in-core",
                               "--timeline", tmp_path / "cli.json")
    assert status == 0, err
    sim.write_timeline(tmp_path / "mine.json")
    assert (tmp_path / "mine.json").read_text() == (tmp_path / "cli.json").read_text()
    assert sim.text == run_cli("simulate", small, "--policy", "in-core")[1]


def test_a_plan_file_applies_to_every_rank_it_was_made_for(small, dlrm, tmp_path):
    job = memplan.load_job(small)
    plan = tmp_path / "plan.json"
    memplan.simulate(job.ranks[0], policy="swap-all").plan.write(plan)
    sim = memplan.simulate(job, plan=plan)
    assert sim.summary == cli_json("simulate", small, "--plan", plan)
    assert [p.policy for p in sim.plans] == ["swap-all", "swap-all"]
    # The DLRM ranks' steps differ: rank 0's plan is not rank 1's, and both say so alike.
    path, dlrm_job = dlrm
    memplan.simulate(dlrm_job.ranks[0], policy="in-core").plan.write(plan)
    with pytest.raises(memplan.InputError) as e:
        memplan.simulate(dlrm_job, plan=plan)
    assert str(e.value) == cli_error("simulate", path, "--plan", plan)


def test_import_kineto_job_is_memplan_import(dlrm, mi300x, tmp_path):
    path, job = dlrm
    assert job.to_json() == path.read_text()
    assert len(job.ranks) == 2 and job.world_size == 8 and job.backend == "nccl"
    folder = tmp_path / "ranks"
    folder.mkdir()
    for f in DLRM:
        shutil.copy(f, folder)
    assert memplan.import_kineto_job(folder) == job
    path, job = mi300x
    assert job.to_json() == path.read_text()
    assert [t.rank for t in job.ranks] == [0, 1, 2, 3] and job.world_size == 4
    assert memplan.load_job(path) == job
    # The shared folder holds rank 0 twice (a DLRM file and the merged file).
    for bad in (MULTIRANK, tmp_path / "nope.json"):
        with pytest.raises(memplan.InputError) as e:
            memplan.import_kineto_job(bad)
        assert str(e.value) == cli_error("import", "kineto", bad, "-o", tmp_path / "x.json")


@pytest.mark.parametrize("what_if, flags", [
    ({}, []),
    (dict(interconnect="nvlink4", network="ib-ndr", gpus_per_node=1),
     ["--interconnect", "nvlink4", "--network", "ib-ndr", "--gpus-per-node", 1]),
    (dict(interconnect="pcie4-p2p", memory="24MiB"),
     ["--interconnect", "pcie4-p2p", "--memory", "24MiB"]),
])
def test_simulate_the_dlrm_job_is_memplan_simulate(dlrm, what_if, flags):
    path, job = dlrm
    sim = memplan.simulate(job, policy="vdnn-all", **what_if)
    status, out, err = run_cli("simulate", path, "--policy", "vdnn-all", *flags, "--json")
    assert status in (0, 1), err
    assert sim.summary == json.loads(out)
    assert sim.ok == (status == 0) and sim.world_size == 8 and len(sim.ranks) == 2
    if not sim.ok:  # 24 MiB: vdnn-all's 30 MiB do not fit, and the job has no step
        assert sim.step_s is None and sim.slowest_rank is None
        assert not all(r["feasible"] for r in sim.ranks)
        assert any(r["oom"] and r["oom"]["memory"] == "device" for r in sim.ranks)
        return
    # The step alone runs from the first rank's start to the last rank's end.
    assert sim.step_alone_s == pytest.approx(max(r["start_s"] + r["step_alone_s"] for r in sim.ranks))
    calls = sim.collectives()
    assert len(calls) == len(job.collectives()) == 16
    # A later peer's wait is the rank's, beside the transfer.
    for r in sim.ranks:
        assert r["collectives"]["wait_s"] == pytest.approx(
            calls[calls["rank"] == r["rank"]]["wait_s"].sum())


def test_the_mi300x_job_needs_a_memory_and_runs_on_an_interconnect(mi300x):
    path, job = mi300x
    with pytest.raises(memplan.InputError) as e:
        memplan.simulate(job, policy="in-core")
    assert str(e.value) == cli_error("simulate", path, "--policy", "in-core")
    sim = memplan.simulate(job, policy="in-core", memory="192GiB", interconnect="xgmi")
    assert sim.summary == cli_json("simulate", path, "--policy", "in-core", "--memory", "192GiB",
                                   "--interconnect", "xgmi")
    assert sim.ok and [r["rank"] for r in sim.ranks] == [0, 1, 2, 3]
    # The fabric prices the collectives (the recorded ones took longer); rank 3, the last to
    # start, waits for no one and sets the step either way.
    recorded = memplan.simulate(job, policy="in-core", memory="192GiB")
    for fabric, as_recorded in zip(sim.ranks, recorded.ranks):
        assert fabric["collectives"]["transfer_s"] < as_recorded["collectives"]["transfer_s"]
    assert sim.slowest_rank == recorded.slowest_rank == 3
    assert sim.ranks[3]["collectives"]["wait_s"] == 0


def test_compare_a_job_is_memplan_compare(dlrm):
    path, job = dlrm
    c = memplan.compare(job, memory="24MiB")
    cli = cli_json("compare", path, "--memory", "24MiB")
    assert without(c.data, "decide_s") == without(cli, "decide_s")
    assert c.world_size == 8 and c.ideal_slowest_rank == cli["ideal_slowest_rank"]
    # The job's lower bound (search/bound/job_bound.hpp): every row that fits is at or over it.
    fitting = [row for row in c.rows if row["feasible"]]
    assert fitting and c.period_lower_bound_s > 0
    for row in fitting:
        assert row["step_s"] >= c.period_lower_bound_s and row["gap"] >= 0
        assert row["step_alone_s"] >= c.lower_bound_s
    frame = c.to_dataframe()
    status, csv, err = run_cli("compare", path, "--memory", "24MiB", "--csv")
    assert status == 0, err
    assert list(frame.columns) == csv.splitlines()[0].split(",")
    assert len(frame) == 2 * len(c.rows)
    fits = frame[frame["feasible"] == 1]
    assert set(fits["rank"]) == {0, 1} and fits["step_s"].notna().all()


def test_search_a_job_is_memplan_search(dlrm, tmp_path):
    path, job = dlrm
    args = dict(memory="24MiB", threads=1, deterministic=True, rounds=2)
    found = memplan.search(job, **args)
    status, _, err = run_cli("search", path, "--memory", "24MiB", "--threads", 1,
                             "--deterministic", "--rounds", 2, "-o", tmp_path / "plan.json")
    assert status == 0, err
    cli = cli_json("search", path, "--memory", "24MiB", "--threads", 1, "--deterministic",
                   "--rounds", 2)
    mine = found.to_dict()
    assert not mine.pop("cancelled")
    assert without(mine, "search_s") == without(cli, "search_s")
    assert found.ok and found.searched_rank == cli["searched_rank"]
    assert found.step_s >= found.period_lower_bound_s
    assert found.gap == pytest.approx(found.step_s / found.period_lower_bound_s - 1)
    # -o writes each rank's plan (a job plan file); read_plan of a Job reads them, and
    # JobSearchResult.write writes the same bytes.
    assert found.plans == memplan.read_plan(tmp_path / "plan.json", job)
    assert found.plan == found.plans[found.searched_rank]
    found.write(tmp_path / "mine.json")
    assert (tmp_path / "mine.json").read_bytes() == (tmp_path / "plan.json").read_bytes()
    sources = ["policy"] * 2 if found.plans_from != "search" else ["searched", "own search"]
    assert [r["plan"] for r in found.ranks] == sources
    assert found.simulation.step_s == found.step_s
    assert [p.trace for p in found.plans] == job.ranks
    assert list(found.to_dataframe()["plan"]) == sources
    # A plan file of one rank's plan, read for the job: that plan for every rank it applies to.
    found.plans[0].write(tmp_path / "one.json")
    with pytest.raises(memplan.InputError, match=r"one.json"):
        memplan.read_plan(tmp_path / "one.json", job)  # rank 1's workload differs


def test_progress_stops_a_job_search(dlrm):
    _, job = dlrm
    calls = []

    def stop(p):
        calls.append(p.stage)
        return False

    found = memplan.search(job, memory="24MiB", threads=1, deterministic=True, rounds=2,
                           progress=stop)
    assert found.cancelled and calls[0] == "seeding"

    def fail(p):
        raise KeyError("stop here")

    with pytest.raises(KeyError, match="stop here"):
        memplan.search(job, memory="24MiB", threads=1, deterministic=True, rounds=2,
                       progress=fail)


def test_sweep_a_job_is_memplan_sweep(small, tmp_path):
    job = memplan.load_job(small)
    result = memplan.sweep({str(small): job}, policies=["in-core", "vdnn-all"], search=False,
                           interconnects=["recorded", "nvlink4"], threads=1)
    status, _, err = run_cli("sweep", small, "--policies", "in-core,vdnn-all", "--no-search",
                             "--interconnects", "recorded,nvlink4", "--threads", 1,
                             "-o", tmp_path / "s.csv")
    assert status == 0, err
    assert result.csv.splitlines()[0] == (tmp_path / "s.csv").read_text().splitlines()[0]
    mine = result.to_dataframe()
    cli = memplan.Sweep((tmp_path / "s.csv").read_text()).to_dataframe()
    assert len(mine) == 2 * 2  # interconnects x policies, each cell every rank together
    assert mine.drop(columns="decide_s").equals(cli.drop(columns="decide_s"))
    in_core = mine[(mine["policy"] == "in-core") & (mine["interconnect"] == "recorded")]
    assert list(in_core["step_s"]) == pytest.approx([700e-9])  # the hand-worked step


@pytest.mark.parametrize("what_if, flags", [
    (dict(policy="nope"), ["--policy", "nope"]),
    (dict(policy="in-core", interconnect="nvlink9"), ["--interconnect", "nvlink9"]),
    (dict(policy="in-core", interconnect="ib-ndr"), ["--interconnect", "ib-ndr"]),
    (dict(policy="in-core", network="ib-ndr"), ["--network", "ib-ndr"]),
    (dict(policy="in-core", encode="fp7"), ["--encode", "fp7"]),
])
def test_bad_input_on_a_job_is_the_commands_line(small, what_if, flags):
    job = memplan.load_job(small)
    with pytest.raises(memplan.InputError) as e:
        memplan.simulate(job, **what_if)
    policy = [] if "--policy" in flags else ["--policy", "in-core"]
    assert str(e.value) == cli_error("simulate", small, *policy, *flags)


def test_a_broken_job_is_refused_as_the_commands_refuse_it(tmp_path):
    skips = small_rank(1, 400, 60)
    skips["ops"][3]["collective"]["kind"] = "all_gather"  # rank 1 calls another collective
    bad = write_job(tmp_path / "bad.json", [small_rank(0, 100, 50), skips])
    with pytest.raises(memplan.InputError) as e:
        memplan.load_job(bad)
    assert str(e.value) == cli_error("info", bad)
    assert "rank 1" in str(e.value)
    # A job without sizes (a time-only import) has nothing to plan: compare and search refuse.
    sizeless = [small_rank(r, 100, 50) for r in (0, 1)]
    for rank in sizeless:
        rank["tensors"] = []
        for op in rank["ops"]:
            op["inputs"], op["outputs"] = [], []
            op.pop("differentiates", None)
    path = write_job(tmp_path / "sizeless.json", sizeless)
    job = memplan.load_job(path)
    with pytest.raises(memplan.InputError) as e:
        memplan.compare(job)
    assert str(e.value) == cli_error("compare", path)
    with pytest.raises(memplan.InputError) as e:
        memplan.search(job, rounds=1)
    assert str(e.value) == cli_error("search", path, "--rounds", 1)
    with pytest.raises(memplan.InputError) as e:
        memplan.sweep({str(path): job}, search=False)
    assert str(e.value) == cli_error("sweep", path, "--no-search", "-o", tmp_path / "s.csv")
