"""Traces through the Python API: load, write, zoo, info, and that `import memplan` stays light."""
import gzip
import json
import subprocess
import sys

import pytest

import memplan
from api_support import TRACES, cli_error, cli_json, run_cli


def test_load_write_round_trip(tmp_path):
    trace = memplan.load_trace(TRACES / "mlp4.json")
    assert (trace.op_count, trace.tensor_count) == (17, 30)  # `memplan info traces/mlp4.json`
    path = tmp_path / "copy.json"
    trace.write(path)
    again = memplan.load_trace(path)
    assert again == trace
    assert path.read_text() == trace.to_json() == again.to_json()  # writing is stable


def test_parse_trace_names_the_source_in_errors():
    with pytest.raises(memplan.InputError, match=r"^mine: "):
        memplan.parse_trace('{"format": "memplan-trace", "version": 7}', "mine")


def test_zoo_trace_is_the_one_memplan_zoo_writes(tmp_path):
    path = tmp_path / "r18.json"
    status, _, err = run_cli("zoo", "resnet18", "--device", "v100-16gb", "--batch", 32, "-o", path)
    assert status == 0, err
    trace = memplan.zoo("resnet18", "v100-16gb", batch=32)
    assert trace.to_json() == path.read_text()
    gpt = memplan.zoo("gpt", "a100-40gb", batch=2, layers=2, hidden=128, heads=4, seq=64, vocab=1000)
    status, _, err = run_cli("zoo", "gpt", "--device", "a100-40gb", "--batch", 2, "--layers", 2,
                             "--hidden", 128, "--heads", 4, "--seq", 64, "--vocab", 1000, "-o", path)
    assert status == 0, err
    assert gpt.to_json() == path.read_text()
    llama = memplan.zoo("llama", "h100-80gb", batch=1, layers=2, hidden=64, heads=4, seq=16,
                        vocab=100, intermediate=128, kv_heads=2)
    status, _, err = run_cli("zoo", "llama", "--device", "h100-80gb", "--batch", 1, "--layers", 2,
                             "--hidden", 64, "--heads", 4, "--seq", 16, "--vocab", 100,
                             "--intermediate", 128, "--kv-heads", 2, "-o", path)
    assert status == 0, err
    assert llama.to_json() == path.read_text()
    assert "resnet50" in memplan.zoo_models() and "v100-16gb" in memplan.zoo_devices()


def test_zoo_precision_is_the_cli_precision(tmp_path):
    path = tmp_path / "step.json"
    for precision in ("tf32", "bf16", "fp16"):
        trace = memplan.zoo("llama", "h100-80gb", batch=1, layers=2, hidden=64, heads=4, seq=16,
                            vocab=100, kv_heads=2, optimizer="adam", precision=precision)
        status, _, err = run_cli("zoo", "llama", "--device", "h100-80gb", "--batch", 1,
                                 "--layers", 2, "--hidden", 64, "--heads", 4, "--seq", 16,
                                 "--vocab", 100, "--kv-heads", 2, "--optimizer", "adam",
                                 "--precision", precision, "-o", path)
        assert status == 0, err
        assert trace.to_json() == path.read_text()
    assert memplan.zoo("resnet18", "v100-16gb", batch=2, precision="fp32").to_json() == \
        memplan.zoo("resnet18", "v100-16gb", batch=2).to_json()
    nhwc = memplan.zoo("resnet18", "a100-40gb", batch=2, precision="fp16", channels_last=True)
    status, _, err = run_cli("zoo", "resnet18", "--device", "a100-40gb", "--batch", 2,
                             "--precision", "fp16", "--channels-last", "-o", path)
    assert status == 0, err
    assert nhwc.to_json() == path.read_text()
    assert nhwc.to_json() != memplan.zoo("resnet18", "a100-40gb", batch=2,
                                         precision="fp16").to_json()
    for device, precision in (("v100-16gb", "bf16"), ("h100-80gb", "fp8")):
        with pytest.raises(memplan.InputError) as e:
            memplan.zoo("resnet18", device, batch=2, precision=precision)
        assert str(e.value) == cli_error("zoo", "resnet18", "--device", device, "--batch", 2,
                                         "--precision", precision, "-o", tmp_path / "x.json")


def test_zoo_data_parallel_is_the_cli_job(tmp_path):
    """memplan.zoo(..., fsdp=N) is `memplan zoo ... --fsdp N`: a Job of rank 0's step."""
    path = tmp_path / "job.json"
    job = memplan.zoo("gpt", "a100-40gb", batch=2, layers=2, seq=64, optimizer="adam", fsdp=8,
                      fsdp_strategy="shard-grad-op", network="ib-ndr")
    status, _, err = run_cli("zoo", "gpt", "--device", "a100-40gb", "--batch", 2, "--layers", 2,
                             "--seq", 64, "--optimizer", "adam", "--fsdp", 8, "--fsdp-strategy",
                             "shard-grad-op", "--network", "ib-ndr", "-o", path)
    assert status == 0, err
    assert isinstance(job, memplan.Job) and job.world_size == 8
    assert job.to_json() == path.read_text()
    with pytest.raises(memplan.InputError) as e:
        memplan.zoo("gpt", "a100-40gb", batch=2, layers=2, seq=64, fsdp_prefetch=2)
    assert str(e.value) == cli_error("zoo", "gpt", "--device", "a100-40gb", "--batch", 2,
                                     "--layers", 2, "--seq", 64, "--fsdp-prefetch", 2,
                                     "-o", tmp_path / "x.json")


def test_info_is_memplan_info():
    info = memplan.info(TRACES / "resnet_tiny.json")
    assert info.data == cli_json("info", TRACES / "resnet_tiny.json")
    assert info.peak_bytes_incore == info.data["peak_bytes_incore"]
    _, text, _ = run_cli("info", TRACES / "resnet_tiny.json")
    assert str(info) == text
    per_layer = info.to_dataframe()
    assert per_layer["ops"].sum() == info.ops


def test_ops_and_tensors_tables():
    trace = memplan.load_trace(TRACES / "mlp4.json")
    ops, tensors = trace.ops(), trace.tensors()
    assert len(ops) == trace.op_count and len(tensors) == trace.tensor_count
    assert list(ops["id"]) == list(range(trace.op_count))
    assert set(ops["phase"]) == {"forward", "backward", "update"}


def test_errors_carry_the_cli_line(tmp_path):
    missing = tmp_path / "missing.json"
    with pytest.raises(memplan.InputError) as e:
        memplan.load_trace(missing)
    assert str(e.value) == cli_error("info", missing)
    assert isinstance(e.value, ValueError)
    bad = tmp_path / "bad.json"
    bad.write_text(TRACES.joinpath("mlp4.json").read_text().replace('"bytes":4096', '"bytes":4095', 1))
    with pytest.raises(memplan.InputError) as e:
        memplan.load_trace(bad)
    assert str(e.value) == cli_error("info", bad)
    with pytest.raises(memplan.InputError) as e:
        memplan.zoo("resnet18", "no-such-gpu", batch=1)
    assert str(e.value) == cli_error("zoo", "resnet18", "--device", "no-such-gpu", "--batch", 1,
                                     "-o", tmp_path / "x.json")


def test_import_memplan_does_not_import_torch():
    code = "import sys, memplan; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_import_kineto_is_memplan_import(tmp_path):
    # The real profiler trace ships in ../shared beside the repository, as the C++ importer tests
    # expect it.
    kineto = TRACES.parent.parent / "shared/data/kineto/resnet50_b32_v100_worker0.pt.trace.json.gz"
    assert kineto.exists(), f"{kineto} is not present: the tests expect shared/ beside the repository"
    status, _, err = run_cli("import", "kineto", kineto, "-o", tmp_path / "r50.json")
    assert status == 0, err
    trace = memplan.import_kineto(kineto)
    assert trace.to_json() == (tmp_path / "r50.json").read_text()
    with pytest.raises(memplan.InputError) as e:
        memplan.import_kineto(tmp_path / "nope.json")
    assert str(e.value) == cli_error("import", "kineto", tmp_path / "nope.json", "-o",
                                     tmp_path / "x.json")


def test_import_kineto_with_a_snapshot_is_the_cli_import(tmp_path):
    """A trace recorded without shapes (nor [memory] events) takes its sizes from the run's
    snapshot, as `memplan import kineto --snapshot` does; without it, it has none."""
    with gzip.open(TRACES / "kineto-h200" / "gpt2.pt.trace.json.gz", "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "[memory]"]
    for e in doc["traceEvents"]:
        for key in ("Input Dims", "Input type", "Input Strides", "Concrete Inputs"):
            e.get("args", {}).pop(key, None)
    bare = tmp_path / "gpt2-bare.json"
    bare.write_text(json.dumps(doc))
    snapshot = TRACES / "kineto-h200" / "gpt2.snapshot.pickle.gz"
    status, _, err = run_cli("import", "kineto", bare, "--snapshot", snapshot,
                             "-o", tmp_path / "t.json")
    assert status == 0, err
    trace = memplan.import_kineto(bare, snapshot=snapshot)
    assert trace.to_json() == (tmp_path / "t.json").read_text()
    assert trace.info().tensors > 0
    assert memplan.import_kineto(bare).info().tensors == 0
    # A job's import takes one snapshot per rank (here, one rank).
    assert memplan.import_kineto_job(bare, snapshots=[snapshot]).to_json() == trace.to_json()
    with pytest.raises(memplan.InputError, match="device 2 has no allocator events"):
        memplan.import_kineto(bare, snapshot=snapshot, snapshot_device=2)


def test_import_snapshot_is_what_the_cli_says(tmp_path):
    """memplan.import_snapshot and `memplan import snapshot --json` are one report; a pickle that
    would call os.system is refused and runs nothing."""
    path = TRACES / "kineto-h200" / "gpt_blocks.snapshot.pickle.gz"
    snapshot = memplan.import_snapshot(path)
    assert snapshot.data == cli_json("import", "snapshot", path)
    device = snapshot.devices[0]
    assert (snapshot.segments, device["reserved_bytes"], device["events"]) == (109, 9277800448, 10975)
    frame = snapshot.to_dataframe()
    assert list(frame["peak_live_bytes"]) == [8472355016]  # pickle.load's figure
    assert "device 0: 109 segments" in str(snapshot)
    pwned = tmp_path / "pwned"
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(b"cposix\nsystem\np0\n(Vtouch " + str(pwned).encode() + b"\np1\ntp2\nRp3\n.")
    with pytest.raises(memplan.InputError, match="pickle byte 0: GLOBAL"):
        memplan.import_snapshot(evil)
    assert not pwned.exists()


def test_import_snapshot_joins_a_trace_of_the_same_run():
    """memplan.import_snapshot(path, trace=...) is `memplan import snapshot --trace`: each device's
    allocations in the trace's span attributed to the ops that made them (issue 38)."""
    path = TRACES / "kineto-h200" / "gpt2.snapshot.pickle.gz"
    trace = TRACES / "kineto-h200" / "gpt2.pt.trace.json.gz"
    snapshot = memplan.import_snapshot(path, trace=trace)
    assert snapshot.data == cli_json("import", "snapshot", path, "--trace", trace)
    join = snapshot.devices[0]["trace_join"]
    # The profiler saw 2,016 device allocations in its three steps (its [memory] events).
    assert join["allocations_in_span"] == join["attributed"] == 2016
    assert sum(op["allocations"] for op in join["by_op"]) == 2016
    assert "joined with" in str(snapshot)
    with pytest.raises(memplan.InputError, match="not the same run"):
        memplan.import_snapshot(path, trace=TRACES / "kineto-h200" / "resnet50.pt.trace.json.gz")


def test_a_snapshot_of_an_out_of_memory_reads_and_its_oom_is_checked(tmp_path):
    """The snapshot a user has when a step ran out of memory: its `oom` event has no `addr` (PyTorch
    records `device_free` there), and reads; the model fails the same request with that much free
    (issue 38). Written as torch.cuda.memory._dump_snapshot writes one (pickle of dicts)."""
    import pickle
    mib = 1 << 20
    snapshot = {
        "segments": [{"device": 0, "address": 4096, "total_size": 20 * mib,
                      "allocated_size": 5 * mib, "active_size": 5 * mib, "stream": 0,
                      "segment_type": "large",
                      "blocks": [{"address": 4096, "size": 5 * mib, "requested_size": 5 * mib,
                                  "state": "active_allocated"},
                                 {"address": 4096 + 5 * mib, "size": 15 * mib,
                                  "requested_size": 0, "state": "inactive"}]}],
        "device_traces": [[
            {"action": "segment_alloc", "addr": 4096, "size": 20 * mib, "stream": 0,
             "time_us": 1.0e15, "frames": []},
            {"action": "alloc", "addr": 4096, "size": 5 * mib, "stream": 0, "time_us": 1.0e15,
             "frames": []},
            {"action": "oom", "device_free": 10 * mib, "size": 18 * mib, "stream": 0,
             "time_us": 1.0e15, "frames": []}]]}
    path = tmp_path / "oom.pickle"
    path.write_bytes(pickle.dumps(snapshot, protocol=2))
    model = memplan.import_snapshot(path).devices[0]["model"]
    assert (model["ooms"], model["ooms_reproduced"], model["first_oom_served_event"]) == (1, 1, None)
    assert model["placed_as_recorded"] == model["allocations"] == 1
    assert model["first_reserved_mismatch_event"] is None


def test_input_limits_bound_what_is_read(tmp_path):
    # #40 item 2: inputs are read as streams within limits the user can raise, as the CLI's
    # --max-input-size and --max-input-values; a gzip'd trace reads as the trace.
    import gzip
    path = tmp_path / "mlp4.json.gz"
    path.write_bytes(gzip.compress((TRACES / "mlp4.json").read_bytes()))
    assert memplan.load_trace(path) == memplan.load_trace(TRACES / "mlp4.json")
    before = memplan.set_input_limits(values=100)
    try:
        with pytest.raises(memplan.InputError, match=r"mlp4.json.gz: holds more than 100 JSON "
                           r"values \(memplan's input limit"):
            memplan.load_trace(path)
        memplan.set_input_limits(size="1KiB", values=before[1])
        with pytest.raises(memplan.InputError, match=r"larger than 1.00 KiB once decompressed"):
            memplan.load_trace(path)
        with pytest.raises(memplan.InputError, match=r"^size: "):
            memplan.set_input_limits(size="lots")
        with pytest.raises(memplan.InputError, match=r"^values: must be at least 1"):
            memplan.set_input_limits(values=0)
    finally:
        memplan.set_input_limits(*before)
    assert memplan.load_trace(path).op_count == 17


def test_running_out_of_memory_is_a_memory_error(tmp_path):
    # #40: memory exhausted inside memplan's C++ is a MemoryError the caller can catch, and the
    # interpreter carries on (a std::bad_alloc in a noexcept destructor aborted it). A child
    # interpreter under RLIMIT_AS reads 100 strings of 4 MB (400 MB in 400 KB of gzip).
    import gzip
    import subprocess
    import sys
    path = tmp_path / "strings.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b"[")
        for _ in range(100):
            f.write(b'"' + b"x" * 4_000_000 + b'",')
        f.write(b"0]")
    child = f"""
import re, resource, memplan
size = int(re.search(r"VmSize:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (300 << 20),) * 2)
try:
    memplan.load_trace({str(path)!r})
except MemoryError as e:
    print("MemoryError:", e)
print(memplan.load_trace({str(TRACES / "mlp4.json")!r}).op_count)
"""
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout == ("MemoryError: memplan: out of memory: the call needed more memory than "
                          "this machine gave it\n17\n")


def test_an_infinite_whole_number_is_an_input_error():
    # Found by scripts/fuzz-cli --python: int(float("inf")) raised OverflowError.
    with pytest.raises(memplan.InputError, match=r"^--batch: inf is not a whole number"):
        memplan.zoo("resnet18", "v100-16gb", batch=float("inf"))
    with pytest.raises(memplan.InputError, match=r"^--threads: inf is not a whole number"):
        memplan.search(memplan.load_trace(TRACES / "mlp4.json"), threads=float("inf"))
    with pytest.raises(memplan.InputError, match=r"^--time-limit: 1000.* is too large"):
        memplan.search(memplan.load_trace(TRACES / "mlp4.json"), time_limit=10**400)


def test_a_plan_is_read_for_one_step_not_a_job():
    # Found by fuzz-cli --python: read_plan/parse_plan with a Job raised AttributeError, and so
    # did validate.
    job = memplan.load_job(TRACES / "mlp4.json")
    with pytest.raises(TypeError, match=r"^a plan is one step's: give a Trace, or one rank"):
        memplan.parse_plan("{}", job)
    with pytest.raises(TypeError, match=r"^validate runs one step: give a Trace, or one rank"):
        memplan.validate(job, policy="in-core")
    trace = memplan.load_trace(TRACES / "mlp4.json")
    plan = memplan.simulate(trace, policy="swap-all").plan
    assert memplan.parse_plan(plan.to_json(), job.ranks[0]).to_json() == plan.to_json()
