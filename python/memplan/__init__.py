"""memplan: plan GPU memory for training steps that do not fit, from Python.

The same libraries as the `memplan` command, in process:

    import memplan
    trace = memplan.zoo("resnet18", "v100-16gb", batch=512)      # or memplan.load_trace(path)
    print(trace.info())
    sim = memplan.simulate(trace, policy="vdnn-all", memory="8GiB")
    job = memplan.load_job("job.json")      # or memplan.import_kineto_job("profiles/")
    step = memplan.simulate(job, policy="in-core", interconnect="nvlink4").step_s
    table = memplan.compare(trace, memory="8GiB").to_dataframe()
    found = memplan.search(trace, memory="8GiB", time_limit=30)
    found.plan.write("plan.json")
    report = memplan.validate(memplan.load_trace("traces/mlp4.json"), policy="pooch")

Bad input (a trace, a plan, an argument) raises InputError (a ValueError) with the one-line
message the command prints. memplan.torch (capture from PyTorch) is imported on demand:
`import memplan.torch`; this package itself does not import torch.
"""
import os

from memplan._core import InputError
from memplan._files import set_input_limits
from memplan._plans import Plan, machine, parse_plan, policies, read_plan
from memplan._search import JobSearchResult, SearchResult, Sweep, search, sweep
from memplan._simulation import Comparison, JobSimulation, Simulation, Timeline, compare, simulate
from memplan._traces import (Info, Job, Snapshot, Trace, as_trace, import_kineto, import_kineto_job,
                             import_snapshot, load_job, load_trace, parse_job, parse_trace, zoo,
                             zoo_devices, zoo_models)
from memplan._validation import ValidationReport, validate

__version__ = "0.1.0"


def info(trace):
    """What `memplan info` shows about `trace` (a Trace, a memplan.torch Capture or a trace
    file)."""
    if isinstance(trace, (str, os.PathLike)):
        trace = load_trace(trace)
    return as_trace(trace).info()


__all__ = [
    "InputError", "Trace", "Job", "Info", "Plan", "Simulation", "JobSimulation", "Timeline",
    "Comparison", "SearchResult", "JobSearchResult", "Sweep", "ValidationReport", "load_trace",
    "parse_trace", "load_job", "parse_job", "zoo", "zoo_models", "zoo_devices", "import_kineto",
    "import_kineto_job", "import_snapshot", "Snapshot", "info", "read_plan", "parse_plan",
    "policies", "machine", "simulate", "compare", "search", "sweep", "validate", "as_trace",
    "set_input_limits",
]
