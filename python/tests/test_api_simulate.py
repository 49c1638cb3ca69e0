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


@pytest.mark.parametrize("allocator", ["arena", "caching"])
def test_a_simulated_step_as_a_pytorch_memory_snapshot(tmp_path, allocator):
    # #38 item 4: `memplan simulate --snapshot-out` and Timeline.memory_snapshot() write the step's
    # device memory as PyTorch's snapshot pickle: loaded by pickle, drawn by this PyTorch's own
    # torch.cuda._memory_viz, its live bytes peak where the simulator's do, to the byte.
    import pickle
    from torch.cuda import _memory_viz as viz
    trace = memplan.load_trace(TRACES / "resnet_tiny.json")
    sim = memplan.simulate(trace, policy="swap-all", allocator=allocator, memory="64MiB")
    data = sim.timeline.memory_snapshot()
    path = tmp_path / "step.pickle"
    status, _, err = run_cli("simulate", TRACES / "resnet_tiny.json", "--policy", "swap-all",
                             "--allocator", allocator, "--memory", "64MiB",
                             "--snapshot-out", path)
    assert status == 0, err
    assert path.read_bytes() == data
    sim.timeline.write_snapshot(tmp_path / "mine.pickle")
    assert (tmp_path / "mine.pickle").read_bytes() == data
    snapshot = pickle.loads(data)
    live = peak = 0
    for e in snapshot["device_traces"][0]:
        live += {"alloc": e["size"], "free_completed": -e["size"]}.get(e["action"], 0)
        peak = max(peak, live)
    assert peak == sim.peak_bytes
    segments = snapshot["segments"]
    assert sum(s["total_size"] for s in segments) == sim.peak_reserved_bytes
    for s in segments:  # each segment tiled by its blocks
        assert sum(b["size"] for b in s["blocks"]) == s["total_size"]
    if hasattr(viz, "segsum"):  # PyTorch 2.x: the summaries, and the viewer's HTML pages
        assert "Summary of segments" in viz.segsum(snapshot)
        assert f"{len(snapshot['device_traces'][0])} entries" in viz.trace(snapshot)
        assert len(viz.trace_plot(snapshot)) > len(data) and len(viz.segment_plot(snapshot)) > 0
    else:  # PyTorch 1.13: a snapshot was its list of segments
        assert viz.stats(segments)["segments"] == len(segments)
        assert "active_allocated" in viz.segments(segments, format_flamegraph=lambda lines: lines)


def test_the_demo_search_plan_as_a_pytorch_memory_snapshot():
    # #38 item 4's check on the demo's step (ResNet-50 b32 imported from a V100 trace, the search
    # at half its in-core peak): the snapshot of the searched plan loads with pickle and is drawn
    # by this PyTorch's torch.cuda._memory_viz; its live bytes peak where the simulator's do.
    import pickle
    from torch.cuda import _memory_viz as viz
    demo = memplan.load_trace(TRACES / "resnet50_b32_v100.json")
    found = memplan.search(demo, memory="50%", time_limit=3, threads=2)
    assert found.feasible
    snapshot = pickle.loads(found.simulation.timeline.memory_snapshot())
    live = peak = 0
    for e in snapshot["device_traces"][0]:
        live += {"alloc": e["size"], "free_completed": -e["size"]}.get(e["action"], 0)
        peak = max(peak, live)
    assert peak == found.simulation.peak_bytes
    actions = {e["action"] for e in snapshot["device_traces"][0]}
    assert {"segment_alloc", "alloc", "free_requested", "free_completed"} <= actions
    if hasattr(viz, "segsum"):
        assert "Summary of segments" in viz.segsum(snapshot)
        assert len(viz.trace_plot(snapshot)) > 0 and len(viz.segment_plot(snapshot)) > 0
    else:
        assert viz.stats(snapshot["segments"])["segments"] == len(snapshot["segments"])


def test_alloc_conf_what_if():
    # `alloc_conf` is `--alloc-conf`: the demo's step with every map swapped on 28% of its in-core
    # peak runs out under PyTorch's default caching allocator and fits with expandable segments
    # (tests/cli/simulate_command_test.cpp works it out); a bad option is the CLI's one line.
    trace = memplan.load_trace(TRACES / "resnet50_b32_v100.json")
    default = memplan.simulate(trace, policy="swap-all", allocator="caching", memory="28%")
    expandable = memplan.simulate(trace, policy="swap-all", allocator="caching", memory="28%",
                                  alloc_conf="expandable_segments:True")
    assert not default.feasible and expandable.feasible
    assert memplan.machine(trace, allocator="caching",
                           alloc_conf="max_split_size_mb:128").alloc_conf == "max_split_size_mb:128"
    with pytest.raises(memplan.InputError) as e:
        memplan.simulate(trace, policy="swap-all", allocator="caching", alloc_conf="no_such:1")
    assert str(e.value).startswith("--alloc-conf")
    # Its snapshot has the pages' maps and the settings, and this PyTorch draws it.
    import pickle
    from torch.cuda import _memory_viz as viz
    snapshot = pickle.loads(expandable.timeline.memory_snapshot())
    assert snapshot["allocator_settings"]["expandable_segments"] is True
    actions = {e["action"] for e in snapshot["device_traces"][0]}
    assert "segment_map" in actions and "segment_alloc" not in actions
    assert all(s["is_expandable"] for s in snapshot["segments"])
    assert sum(s["total_size"] for s in snapshot["segments"]) <= expandable.peak_reserved_bytes
    if hasattr(viz, "segsum"):
        assert "Summary of segments" in viz.segsum(snapshot)
        assert len(viz.trace_plot(snapshot)) > 0 and len(viz.segment_plot(snapshot)) > 0


def test_a_validated_run_as_a_pytorch_memory_snapshot(tmp_path):
    # `memplan validate --snapshot-out` from Python: the host backend's run, its allocator's events
    # as they happened, call for call the simulator's (tests/cli/validate_command_test.cpp); its
    # live bytes peak at the measured peak.
    import pickle
    trace = memplan.load_trace(TRACES / "resnet_tiny.json")
    report = memplan.validate(trace, policy="swap-all", allocator="caching", memory="64MiB")
    assert report.ok
    snapshot = pickle.loads(report.memory_snapshot())
    predicted = pickle.loads(memplan.simulate(trace, policy="swap-all", allocator="caching",
                                              memory="64MiB").timeline.memory_snapshot())
    measured = snapshot["device_traces"][0]
    assert [(e["action"], e["addr"], e["size"]) for e in measured] == \
        [(e["action"], e["addr"], e["size"]) for e in predicted["device_traces"][0]]
    live = peak = 0
    for e in measured:
        live += {"alloc": e["size"], "free_completed": -e["size"]}.get(e["action"], 0)
        peak = max(peak, live)
    assert peak == report.peak_bytes_measured
    report.write_snapshot(tmp_path / "run.pickle")
    assert (tmp_path / "run.pickle").read_bytes() == report.memory_snapshot()
