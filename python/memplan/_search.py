"""search (the plan search, with progress and cancellation) and sweep (a grid of cells)."""
import json

from memplan import _core, _plans, _simulation, _tables
from memplan._files import write_output
from memplan._numbers import real, whole, whole_or_none
from memplan._traces import Job, as_trace


class SearchResult:
    """The best plan the search found (`memplan search`): `plan`, its `simulation`, the policy
    it started from (`best_policy`, `best_policy_step_s`, None when that plan does not fit),
    `evaluated` plans, `rounds`, `converged` (stopped because no move improved), `within_gap`
    (stopped because the plan is within the gap asked of the lower bound), `cancelled`
    (the progress callback stopped it), `search_s`, `lower_bound_s` (no plan that fits has a
    shorter step alone; None when none fits), `period_lower_bound_s` (for a step with a host side:
    none repeats it faster back to back; else None) and `gap` (the plan's step against the bound of
    the step it is ranked by, back to back where there is a host side, else alone; None when it
    does not fit).
    `step_s` is the step a training loop sees (the period back to back), what the search
    optimises; `step_alone_s` one step from an idle device."""

    def __init__(self, outcome, plan, simulation):
        self.plan = plan
        self.simulation = simulation
        self.best_policy = outcome.best_policy
        best = outcome.best_policy_evaluation
        self.best_policy_feasible = best.feasible
        self.best_policy_step_s = best.step_ns * 1e-9 if best.feasible else None
        self.evaluated = outcome.evaluated
        self.rounds = outcome.rounds
        self.converged = outcome.converged
        self.within_gap = outcome.within_gap
        self.cancelled = outcome.cancelled
        self.search_s = outcome.elapsed_s
        bound = json.loads(outcome.bound_json)
        self.lower_bound_s = bound.get("lower_bound_s")
        self.period_lower_bound_s = bound.get("period_lower_bound_s")
        self.gap = bound.get("gap")

    @property
    def feasible(self):
        return self.simulation.feasible

    @property
    def step_s(self):
        return self.simulation.step_s

    @property
    def step_alone_s(self):
        return self.simulation.step_alone_s

    def to_dict(self):
        """The object `memplan search --json` prints."""
        return {**self.simulation.summary, "best_policy": self.best_policy,
                "best_policy_feasible": self.best_policy_feasible,
                "best_policy_step_s": self.best_policy_step_s,
                "evaluated": self.evaluated, "rounds": self.rounds, "converged": self.converged,
                "within_gap": self.within_gap, "cancelled": self.cancelled,
                "search_s": self.search_s,
                "lower_bound_s": self.lower_bound_s,
                "period_lower_bound_s": self.period_lower_bound_s, "gap": self.gap}

    def __repr__(self):
        fit = f"step {self.step_s:.6g} s" if self.feasible else "no plan fits"
        return (f"<memplan.SearchResult {fit} (best policy {self.best_policy}), "
                f"{self.rounds} rounds"
                f"{', cancelled' if self.cancelled else ''}>")


class JobSearchResult(_tables.JsonFields):
    """The plans searched for a job (`memplan search` of a job's file): searched on the rank
    that sets the job's step in core, priced among its peers, and shared by the ranks it applies
    to (the others get a search of their own); or, when they make the job's step shorter, the
    best policy's plans with each rank its own decision. `data` is the `--json` object, whose
    keys are also attributes (feasible, step_s, plans_from, searched_plans_step_s, slowest_rank,
    searched_rank, best_policy, evaluated, rounds, converged, within_gap (a policy's plans were
    within `gap=` of the job's lower bound: no rank searched), search_s, lower_bound_s,
    period_lower_bound_s and gap as for a step, of the job's step, lower_bound_rank, ranks: each
    with `plan`, "searched", "shared", "own search" or "policy"); `plans` each rank's (what `-o`
    and write() write), `plan` the searched rank's, `simulation` the JobSimulation of every rank
    under its plan, `cancelled` (progress stopped it)."""

    def __init__(self, outcome, job, machines):
        self._outcome = outcome
        self._job = job
        self.plans = [_plans.Plan(p, t) for p, t in zip(outcome.plans, job.ranks)]
        self.plan = self.plans[outcome.searched]
        self.simulation = _simulation.JobSimulation(outcome.simulation, self.plans, machines,
                                                    "search")
        self.cancelled = outcome.cancelled
        self.data = json.loads(outcome.json())

    @property
    def ok(self):
        """Every rank fits under its plan (the command's exit 0)."""
        return self.feasible

    def write(self, path):
        """Writes the ranks' plans as a job plan file, atomically (what `memplan search JOB -o`
        writes; read_plan(path, job) and `memplan simulate JOB --plan` read it)."""
        write_output(path, _core.write_job_plan([p._plan for p in self.plans],
                                                self._job._job))

    @property
    def text(self):
        """The report `memplan search` prints for a job."""
        return self._outcome.text()

    def to_dict(self):
        """The object `memplan search --json` prints for a job, and `cancelled`."""
        return {**self.data, "cancelled": self.cancelled}

    def to_dataframe(self):
        """One row per rank: its summary under its plan and where the plan came from (`plan`,
        `why`)."""
        return _simulation.rank_frame(self.ranks)

    def __str__(self):
        return self.text

    def __repr__(self):
        fit = f"step {self.step_s:.6g} s" if self.feasible else "no plan fits every rank"
        return (f"<memplan.JobSearchResult {fit}, searched on rank {self.searched_rank}"
                f"{', cancelled' if self.cancelled else ''}>")


def search(trace, encode=None, threads=0, time_limit=10.0, rounds=None, seed=1,
           deterministic=False, maps_only=False, progress=None, gap=0.005, **what_if):
    """Searches for a plan better than every policy's (`memplan search`).

    time_limit: seconds for the whole search, the policies' seeding included; rounds: stop after
    this many (None: until converged); threads: 0 for every core; deterministic: the same plan
    for any thread count; maps_only: plan feature maps only (keep parameters, gradients, optimizer
    state and the input batch on the device); gap: stop once
    the plan is within this of the lower bound (a fraction, 0.005, or a percentage, "0.5%";
    `memplan search --gap`; a step with a host side, of its step back to back). progress(p) is called once for every policy that seeds the search
    (p.stage "seeding", p.policy its name) and after every round (p.stage "round"), with
    p.round, p.evaluated, p.elapsed_s and p.best (feasible, step_ns, iteration_ns: the step alone, peak_bytes); returning
    False stops the search (a seeding policy at its next simulation, the rounds at the next
    round), which returns the best plan so far (`cancelled` True). An exception in it stops the search and
    is raised. what_if: as machine() takes them.
    A Job gives a JobSearchResult (time_limit and rounds apply to each rank's search; progress
    reports each). A memplan.torch Capture is taken as its trace.
    """
    trace = as_trace(trace)
    m = _plans.machine(trace, **what_if)
    request = _core.SearchRequest()
    request.threads = whole(threads, "--threads")
    request.time_limit_s = real(time_limit, "--time-limit")
    request.rounds = whole_or_none(rounds, "--rounds")
    request.seed = whole(seed, "--seed")
    request.deterministic = bool(deterministic)
    request.maps_only = bool(maps_only)
    request.encode = _plans._encode_text(encode)
    request.gap = gap if isinstance(gap, str) else real(gap, "--gap")
    if isinstance(trace, Job):
        return JobSearchResult(_core.search_job(trace._job, m, request, trace.name, progress),
                               trace, m)
    outcome = _core.search(trace._workload, m, request, progress)
    plan = _plans.Plan(outcome.plan, trace)
    simulation = _simulation.Simulation(_core.simulate(trace._workload, outcome.plan, m), plan, m)
    return SearchResult(outcome, plan, simulation)


class Sweep:
    """A grid of traces x memories x links x (policies and the search) (`memplan sweep`): `csv`
    is the CSV the command writes (docs/sweep.md), to_dataframe() reads it."""

    def __init__(self, csv):
        self.csv = csv

    def to_dataframe(self):
        return _tables.read_csv(self.csv, keep_default_na=False,
                                na_values={"step_s": [""], "overhead": [""],
                                           "slowest_rank": [""], "wait_s": [""]})

    def write(self, path):
        write_output(path, self.csv)


def _list(value):
    """One value or several, as a list (text or numbers in the base unit: requests/ parses them)."""
    if value is None:
        return []
    if isinstance(value, (str, int, float)):
        return [value]
    return list(value)


def sweep(traces, memory=None, link=None, bandwidth=None, policies=None, search=True,
          encode=None, threads=0, search_time_limit=10.0, search_rounds=None, seed=1,
          progress=None, interconnects=None, gpus_per_node=None, world_sizes=None):
    """Runs the grid and returns a Sweep (`memplan sweep`).

    traces: Traces or Jobs (named by their `name` in the CSV; a Job's cells run every rank
    together) or a dict {name: Trace or Job}; memory: budgets
    ("8GiB" or bytes; default each trace's); link: presets; bandwidth: one bandwidth both ways
    per point ("8GB/s" or bytes/s; its text is the point's label in the CSV); policies: names (default every policy); search: add the search column.
    interconnects ("recorded", "nvlink4", "nvlink4+ib-ndr", ...), gpus_per_node and world_sizes
    (for one rank of a job, its peers assumed alike) make a grid of jobs, with the job's columns
    (`memplan sweep --interconnects --gpus-per-node --world-sizes`).
    progress(p) is called after every cell with p.done, p.total, p.elapsed_s (an exception in it
    is raised once the grid has run).
    """
    items = (traces.items() if isinstance(traces, dict)
             else [(t.name, t) for t in map(as_trace, traces)])
    request = _core.SweepRequest()
    request.memories = _list(memory)
    request.links = _list(link)
    request.bandwidths = [b if isinstance(b, str) else f"{b!r}B/s" for b in _list(bandwidth)]
    request.policies = list(policies or [])
    request.search = bool(search)
    request.threads = whole(threads, "--threads")
    request.encode = _plans._encode_text(encode)
    request.search_time_limit_s = real(search_time_limit, "--search-time-limit")
    request.search_rounds = whole_or_none(search_rounds, "--search-rounds")
    request.seed = whole(seed, "--seed")
    request.interconnects = [str(i) for i in _list(interconnects)]
    request.gpus_per_node = whole_or_none(gpus_per_node, "--gpus-per-node")
    request.world_sizes = [whole(w, "--world-sizes") for w in _list(world_sizes)]
    arguments = _core.SweepArguments()
    arguments.traces = [(str(name), t._job if isinstance(t, Job) else t._workload)
                        for name, t in items]
    arguments.request = request
    return Sweep(_core.sweep(arguments, progress))
