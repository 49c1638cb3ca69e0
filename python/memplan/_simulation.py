"""simulate and compare, and what they return: a Simulation with its Timeline, a Comparison."""
import json
import os

from memplan import _core, _plans, _tables
from memplan._files import write_output
from memplan._traces import Job, as_trace


class Timeline:
    """The simulated iteration: every instruction on its stream, the compute stream's stalls and
    the device memory curve. Exports as `memplan simulate --timeline` (Chrome/Perfetto trace JSON)
    and `--memory-csv` do."""

    def __init__(self, simulation):
        self._simulation = simulation

    def chrome_trace(self):
        """The Chrome trace event JSON as a dict (`traceEvents`; opens in ui.perfetto.dev)."""
        return json.loads(self._simulation.chrome_trace_json())

    def write(self, path):
        """Writes the Chrome trace JSON to `path` atomically."""
        write_output(path, self._simulation.chrome_trace_json())

    def to_dataframe(self):
        """One row per span: track (the stream, or "compute stalls") and track_id (the tracks'
        order), name, category (run, copy-in, copy-out, encode, decode, recompute; a stall's
        cause), start_s, duration_s."""
        events = self.chrome_trace()["traceEvents"]
        tracks = {e["tid"]: e["args"]["name"] for e in events
                  if e.get("ph") == "M" and e.get("name") == "thread_name"}
        rows = [{"track": tracks.get(e["tid"], str(e["tid"])), "track_id": e["tid"],
                 "name": e.get("name", ""),
                 "category": e.get("cat", ""), "start_s": e["ts"] * 1e-6,
                 "duration_s": e["dur"] * 1e-6}
                for e in events if e.get("ph") == "X"]
        return _tables.frame(rows, ["track", "track_id", "name", "category", "start_s",
                                    "duration_s"])

    def memory_csv(self):
        """`time_ns,live_bytes,reserved_bytes`, one line per allocation and free."""
        return self._simulation.memory_csv()

    def memory(self):
        """The device memory curve as a DataFrame: time_ns, live_bytes, reserved_bytes."""
        return _tables.read_csv(self.memory_csv())

    def memory_snapshot(self):
        """The device memory over the step as a PyTorch memory snapshot, pickle bytes (what
        `memplan simulate --snapshot-out` writes; pickle.loads gives the dict that
        torch.cuda._memory_viz and pytorch.org/memory_viz take)."""
        return self._simulation.memory_snapshot()

    def write_snapshot(self, path):
        """Writes memory_snapshot() to `path` atomically (`--snapshot-out`)."""
        write_output(path, self._simulation.memory_snapshot())


class Simulation(_tables.JsonFields):
    """One plan simulated on one machine (`memplan simulate`): `summary` is the `--json` object
    (feasible, step_s: the period back to back, what a training loop sees, step_alone_s,
    peak_bytes, stall_s_by_cause, actions, machine, oom, ...), whose keys
    are also attributes; `plan` the plan simulated; `timeline` its Timeline; `oom` the one-line
    diagnosis when it does not fit (None when it fits)."""

    def __init__(self, simulation, plan, machine):
        self._simulation = simulation
        self.plan = plan
        self.machine = machine
        self.summary = json.loads(simulation.summary_json())
        self.summary["policy"] = plan.policy
        self.timeline = Timeline(simulation)
        self.oom = simulation.oom_text()

    _fields = "summary"

    @property
    def text(self):
        """The report `memplan simulate` prints."""
        return self._simulation.summary_text(self.plan.policy)

    def to_dataframe(self):
        """The summary as one row (nested keys flattened: `stall_s_by_cause.swap-in`, ...)."""
        return _tables.frame([self.summary])

    def __str__(self):
        return self.text

    def __repr__(self):
        fit = f"step {self.step_s:.6g} s" if self.feasible else "does not fit"
        return f"<memplan.Simulation {self.plan.policy!r}: {fit}, peak {self.peak_bytes} B>"


def rank_frame(ranks):
    """A job report's `ranks` as a DataFrame, one row per rank, nested keys flattened, without
    the collectives' calls (a list)."""
    rows = [{**r, "collectives": {k: v for k, v in r["collectives"].items() if k != "by_call"}}
            for r in ranks]
    return _tables.frame(rows, ["rank"])


class JobSimulation(_tables.JsonFields):
    """One plan simulated on every rank of a job together (`memplan simulate` of a job's file):
    `summary` is the `--json` object, whose keys are also attributes: feasible (every rank fits),
    world_size, step_s (the ranks' steps back to back, what a training loop sees), step_alone_s
    (from the first rank's start to the last rank's end), slowest_rank, rounds, policy, and `ranks`, each rank's `memplan simulate`
    summary with its rank, start_s and collectives (calls, bytes, transfer_s, wait_s and
    `by_call`: each call's transfer and wait for a later peer). `plans` and `machines` are the
    ranks', in rank order."""

    def __init__(self, simulation, plans, machines, policy):
        self._simulation = simulation
        self.plans = plans
        self.machines = machines
        self.summary = json.loads(simulation.summary_json())
        self.summary["policy"] = policy

    _fields = "summary"

    @property
    def ok(self):
        """Every rank fits (the command's exit 0)."""
        return self.feasible

    @property
    def text(self):
        """The report `memplan simulate` prints for a job."""
        return self._simulation.summary_text(self.policy)

    def chrome_trace(self):
        """The Chrome trace event JSON as a dict: a process per rank, a track per stream."""
        return json.loads(self._simulation.chrome_trace_json())

    def write_timeline(self, path):
        """Writes the Chrome trace JSON to `path` atomically (`memplan simulate --timeline`)."""
        write_output(path, self._simulation.chrome_trace_json())

    def to_dataframe(self):
        """One row per rank: its summary (nested keys flattened: `collectives.wait_s`, ...; the
        calls are in collectives())."""
        return rank_frame(self.ranks)

    def collectives(self):
        """One row per rank and collective call: rank, op, kind, group, sequence, in_bytes,
        out_bytes, arrival_ns, start_ns, end_ns, wait_s (waiting for a later peer), transfer_s."""
        rows = [{"rank": r["rank"], **call} for r in self.ranks
                for call in r["collectives"]["by_call"]]
        return _tables.frame(rows, ["rank", "op", "kind", "group", "sequence", "in_bytes",
                                    "out_bytes", "arrival_ns", "start_ns", "end_ns", "wait_s",
                                    "transfer_s"])

    def __str__(self):
        return self.text

    def __repr__(self):
        fit = f"step {self.step_s:.6g} s (rank {self.slowest_rank})" if self.feasible \
            else "does not fit"
        return f"<memplan.JobSimulation {self.policy!r} on {len(self.ranks)} ranks: {fit}>"


class Comparison(_tables.JsonFields):
    """Every policy on the same trace and machine (`memplan compare`): `data` is the `--json`
    object, whose keys are also attributes: `rows` (a policy's simulate summary plus overhead,
    gap, decide_s, note; rows rank by step_s, the step back to back), `ideal_s` the in-core step
    with unlimited memory, `lower_bound_s` no plan that fits has a shorter step alone,
    `period_lower_bound_s` (a step with a host side) none repeats it faster back to back (each row's
    gap is its step against the one of the two its rows are ranked by). For a job, every policy on
    every rank together: each row is the job's simulate summary plus policy, rank (1 is best),
    overhead, gap, wait_s, decide_s, gave_up; and `ideal_slowest_rank`, `world_size`, and the
    job's bounds (`lower_bound_s` of its step alone, `period_lower_bound_s` back to back, what its
    rows are ranked by and each row's gap is taken against)."""

    def __init__(self, comparison):
        self._comparison = comparison
        self.data = json.loads(comparison.json())

    @property
    def text(self):
        """The table `memplan compare` prints."""
        return self._comparison.text()

    @property
    def csv(self):
        """What `memplan compare --csv` prints."""
        return self._comparison.csv()

    def to_dataframe(self):
        """One row per policy (per policy and rank for a job), the columns of `memplan compare
        --csv` (why_not last)."""
        empty = [""]
        return _tables.read_csv(self.csv, keep_default_na=False, na_values={
            "overhead": empty, "step_s": empty, "step_alone_s": empty, "slowest_rank": empty,
            "wait_s": empty})

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"<memplan.Comparison of {len(self.rows)} policies>"


def simulate(trace, plan=None, policy=None, encode=None, **what_if):
    """Simulates one iteration of `trace` under a plan (`memplan simulate`).

    plan: a Plan or a plan file; policy: a policy's name (policies()); exactly one of the two.
    encode: Gist encodings for kept maps ("binarize,fp16", a list, or "all").
    what_if: memory, link, h2d, d2h, latency, host_memory, allocator, alloc_conf, interconnect, network,
    gpus_per_node, as machine() takes them.
    A plan that does not fit is a result (feasible False, oom says why), not an error.
    A Job gives a JobSimulation: every rank under the plan (a plan file or Plan is read against
    each rank's trace, a policy decides on each rank), on its machine, the ranks together.
    A memplan.torch Capture is taken as its trace.
    """
    trace = as_trace(trace)
    m = _plans.machine(trace, **what_if)
    if isinstance(trace, Job):
        plans = _plans.resolve_plans(trace, m, plan, policy, encode, "simulate")
        raw = _core.simulate_job(trace._job, [p._plan for p in plans], m)
        # As the command names it: the plan's policy, else the plan file's path.
        file = "" if isinstance(plan, _plans.Plan) else os.fspath(plan or "")
        return JobSimulation(raw, plans, m, plans[0].policy or file)
    resolved = _plans.resolve_plan(trace, m, plan, policy, encode, "simulate")
    return Simulation(_core.simulate(trace._workload, resolved._plan, m), resolved, m)


def compare(trace, encode=None, **what_if):
    """Every policy on `trace` and the same machine, side by side (`memplan compare`); on every
    rank of a Job, the ranks simulated together."""
    trace = as_trace(trace)
    m = _plans.machine(trace, **what_if)
    if isinstance(trace, Job):
        return Comparison(_core.compare_job(trace._job, m, _plans._encode_text(encode),
                                            trace.name))
    return Comparison(_core.compare(trace._workload, m, _plans._encode_text(encode)))
