"""The machine, search and sweep a Python caller asks for are parsed and checked by the same C++
(requests/) as the CLI's flags: the same values accepted, the same errors, numbers in the base
unit taken as they are."""
import math

import pytest

import memplan
from api_support import TRACES, cli_error

MLP4 = TRACES / "mlp4.json"


def test_text_and_numbers_give_the_same_machine():
    trace = memplan.load_trace(MLP4)
    text = memplan.machine(trace, memory="2GiB", h2d="12.5GB/s", d2h="6GB/s", latency="10us",
                           host_memory="64GiB", host_bandwidth="20GB/s", allocator="caching")
    numbers = memplan.machine(trace, memory=2 << 30, h2d=12.5e9, d2h=6e9, latency=10_000,
                              host_memory=64 << 30, host_bandwidth=20e9, allocator="caching")
    for field in ("memory_bytes", "h2d_bytes_per_s", "d2h_bytes_per_s", "copy_latency_ns",
                  "host_memory_bytes", "allocator"):
        assert getattr(text, field) == getattr(numbers, field), field
    assert text.memory_bytes == 2 << 30 and text.copy_latency_ns == 10_000


def test_a_budget_may_be_a_share_of_the_in_core_peak():
    trace = memplan.load_trace(MLP4)
    peak = trace.info().peak_bytes_incore
    assert memplan.machine(trace, memory="50%").memory_bytes == peak // 2
    assert memplan.machine(trace, memory="100%").memory_bytes == peak
    # The same budget in simulate, for a plan: what the CLI's --memory 50% gives.
    simulation = memplan.simulate(trace, policy="checkpoint-sqrt", memory="50%")
    assert simulation.summary["machine"]["memory_bytes"] == peak // 2


def test_an_interconnect_is_named_by_its_presets():
    trace = memplan.load_trace(MLP4)
    assert memplan.machine(trace).interconnect is None
    assert memplan.machine(trace, interconnect="recorded").interconnect is None
    assert memplan.machine(trace, interconnect="nvlink4").interconnect == "nvlink4"
    both = memplan.machine(trace, interconnect="nvlink4", network="ib-ndr", gpus_per_node=4)
    assert both.interconnect == "nvlink4 + ib-ndr"


def test_host_bandwidth_acts_on_an_update_on_the_host():
    trace = memplan.load_trace(MLP4)
    slow = memplan.simulate(trace, policy="zero-offload", host_bandwidth="1GB/s")
    fast = memplan.simulate(trace, policy="zero-offload", host_bandwidth="100GB/s")
    assert slow.step_s > fast.step_s


@pytest.mark.parametrize("kwargs, flag", [
    (dict(memory=-1), "--memory"),
    (dict(memory=1.5), "--memory"),
    (dict(h2d=math.nan), "--h2d"),
    (dict(d2h=0), "--d2h"),
    (dict(latency=-5), "--latency"),
    (dict(host_bandwidth="fast"), "--host-bandwidth"),
    (dict(allocator="buddy"), "--allocator"),
    (dict(interconnect="nvlink9"), "--interconnect"),
    (dict(interconnect="ib-ndr"), "--interconnect"),
    (dict(interconnect="nvlink4", network="nvlink4"), "--network"),
    (dict(network="ib-ndr"), "--network"),
    (dict(interconnect="nvlink4", gpus_per_node=0), "--gpus-per-node"),
])
def test_a_bad_machine_value_names_its_flag(kwargs, flag):
    trace = memplan.load_trace(MLP4)
    with pytest.raises(memplan.InputError, match=f"^{flag}: "):
        memplan.machine(trace, **kwargs)


def test_a_bad_text_value_is_the_cli_line():
    trace = memplan.load_trace(MLP4)
    with pytest.raises(memplan.InputError) as e:
        memplan.simulate(trace, policy="in-core", host_bandwidth="fast")
    assert str(e.value) == cli_error("simulate", MLP4, "--policy", "in-core", "--host-bandwidth",
                                     "fast")


@pytest.mark.parametrize("kwargs, flag", [
    (dict(threads=-1), "--threads"),
    (dict(threads=100_000), "--threads"),
    (dict(time_limit=math.nan), "--time-limit"),
    (dict(time_limit=0), "--time-limit"),
    (dict(time_limit=-1), "--time-limit"),
    (dict(rounds=2_000_000_000), "--rounds"),
    (dict(rounds=0), "--rounds"),
])
def test_a_search_out_of_range_is_refused_before_it_starts(kwargs, flag):
    trace = memplan.load_trace(MLP4)
    with pytest.raises(memplan.InputError, match=f"^{flag}: "):
        memplan.search(trace, memory="1MiB", **kwargs)


def test_a_sweep_takes_memories_as_text_or_bytes():
    trace = memplan.load_trace(MLP4)
    as_text = memplan.sweep([trace], memory=["1MiB"], policies=["in-core"], search=False)
    as_bytes = memplan.sweep([trace], memory=[1 << 20], policies=["in-core"], search=False)
    a, b = as_text.to_dataframe(), as_bytes.to_dataframe()
    assert list(a["memory_bytes"]) == list(b["memory_bytes"]) == [1 << 20]
    with pytest.raises(memplan.InputError, match="^--search-time-limit: "):
        memplan.sweep([trace], search_time_limit=-1)
