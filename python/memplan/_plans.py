"""Plans (keep / swap / recompute / encode per feature map) and the machine they run on."""
import json
import os

from memplan import _core, _tables
from memplan._files import write_output
from memplan._traces import Job, as_trace


class Plan:
    """A memory plan for one trace: what happens to each feature map (docs/simulator.md, "Plan
    files"). Read one with read_plan(), or get one from simulate(policy=...), search()."""

    def __init__(self, plan, trace):
        self._plan = plan
        self.trace = trace

    @property
    def policy(self):
        """Who made it: a policy's name, "search", "hand-written", ..."""
        return self._plan.policy

    def to_json(self):
        """The plan file's text (one map per line, stable)."""
        return _core.write_plan(self._plan, self.trace._workload)

    def to_dict(self):
        return json.loads(self.to_json())

    def write(self, path):
        """Writes the plan file atomically (readable by read_plan and `memplan simulate --plan`)."""
        write_output(path, self.to_json())

    def to_dataframe(self):
        """One row per feature map: tensor, action and the action's fields."""
        return _tables.frame(self.to_dict()["maps"], ["tensor", "action"])

    def __eq__(self, other):
        return isinstance(other, Plan) and self._plan == other._plan

    def __repr__(self):
        return f"<memplan.Plan {self.policy!r} for {self.trace.name!r}>"


def read_plan(path, trace):
    """Reads a plan file for `trace`, checked against it. Raises InputError naming the file and
    JSON path. For a Job, a list of one Plan per rank: a job plan file's own plan for each (what
    `memplan search JOB -o` and JobSearchResult.write write), or a plan file's for every rank."""
    trace = as_trace(trace)
    if isinstance(trace, Job):
        plans = _core.read_job_plans(os.fspath(path), trace._job)
        return [Plan(p, t) for p, t in zip(plans, trace.ranks)]
    return Plan(_core.read_plan(os.fspath(path), trace._workload), trace)


def parse_plan(text, trace, name="<string>"):
    """Parses plan text for `trace`; `name` names it in errors."""
    trace = _one_step(trace)
    return Plan(_core.parse_plan(text, name, trace._workload), trace)


def _one_step(trace, what="a plan is one step's"):
    """`trace` as a Trace: for what takes one step (a plan, a validation), a Job is a TypeError
    that says `what`."""
    trace = as_trace(trace)
    if isinstance(trace, Job):
        raise TypeError(f"{what}: give a Trace, or one rank of the Job (job.ranks[r])")
    return trace


def policies():
    """The names policy= takes: every policy (as `memplan compare` lists them), then swap-all and
    recompute-all."""
    return _core.named_plan_names().split(", ")


def _encode_text(encode):
    if encode is None:
        return ""
    return encode if isinstance(encode, str) else ",".join(encode)


def machine(trace, memory=None, link=None, h2d=None, d2h=None, latency=None, host_memory=None,
            host_bandwidth=None, allocator=None, alloc_conf=None, interconnect=None, network=None,
            gpus_per_node=None):
    """The trace's device with the what-if values of `memplan simulate` applied: memory ("16GiB"
    or bytes), link (a preset: pcie3, pcie4, pcie5, nvlink2, c2c; or "recorded", the trace's
    measured link), h2d and d2h ("12.5GB/s" or bytes/s), latency ("10us" or ns), host_memory
    (pinned host bytes for swapped maps), host_bandwidth (the host CPU's streaming speed at an
    update on the host: "20GB/s" or bytes/s), allocator ("arena" or "caching": PyTorch's caching
    allocator), alloc_conf (the caching allocator's PYTORCH_CUDA_ALLOC_CONF, such as
    "expandable_segments:True" or "max_split_size_mb:128"), interconnect (the fabric inside a node that prices a multi-GPU step's
    collectives: nvlink3, nvlink4, nvlink5, pcie4-p2p, pcie5-p2p, xgmi; or "recorded", their
    recorded times), network (between nodes: ib-hdr, ib-ndr, roce-400g) and gpus_per_node (an
    int, default 8). Text takes the CLI's units; a number is in the base unit (requests/ parses
    both). For a Job, each rank's machine, in rank order: its device with the same values."""
    trace = as_trace(trace)
    request = _core.MachineRequest(memory=memory, link=link, h2d=h2d, d2h=d2h, latency=latency,
                                   host_memory=host_memory, host_bandwidth=host_bandwidth,
                                   allocator=allocator, alloc_conf=alloc_conf,
                                   interconnect=interconnect,
                                   network=network, gpus_per_node=gpus_per_node)
    if isinstance(trace, Job):
        return _core.make_machines(trace._job, request)
    return _core.make_machine(trace._workload, request)


def resolve_plan(trace, machine_, plan, policy, encode, command):
    """The plan a command runs: `plan` (a Plan or a plan file) or the `policy`'s, with `encode`'s
    Gist encodings applied to its kept maps."""
    if (plan is None) == (policy is None):
        raise _core.InputError(f"{command}: give plan=PLAN or policy=NAME (one of them)")
    if policy is not None:
        raw = _core.named_plan(policy, trace._workload, machine_)
    elif isinstance(plan, Plan) and plan.trace == trace:
        raw = plan._plan
    elif isinstance(plan, Plan):  # made for another trace: checked against this one as a file is
        raw = _core.parse_plan(plan.to_json(), f"plan {plan.policy!r}", trace._workload)
    else:
        raw = _core.read_plan(os.fspath(plan), trace._workload)
    return Plan(_core.apply_encodings(raw, trace._workload, _encode_text(encode)), trace)


def resolve_plans(job, machines, plan, policy, encode, command):
    """resolve_plan for each rank of `job` on its machine: the same policy, or the same plan (a
    file, or a Plan made for any rank), read against each rank's trace."""
    return [resolve_plan(t, m, plan, policy, encode, command)
            for t, m in zip(job.ranks, machines)]
