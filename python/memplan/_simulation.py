"""simulate and compare, and what they return: a Simulation with its Timeline, a Comparison."""
import json
import os

from memplan import _core, _plans, _tables


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
        _core.write_file_atomically(os.fspath(path), self._simulation.chrome_trace_json())

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


class Simulation:
    """One plan simulated on one machine (`memplan simulate`): `summary` is the `--json` object
    (feasible, iteration_s, peak_bytes, stall_s_by_cause, actions, machine, oom, ...), whose keys
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

    def __getattr__(self, key):
        try:
            return self.__dict__["summary"][key]
        except KeyError:
            raise AttributeError(key) from None

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
        fit = f"{self.iteration_s:.6g} s" if self.feasible else "does not fit"
        return f"<memplan.Simulation {self.plan.policy!r}: {fit}, peak {self.peak_bytes} B>"


class Comparison:
    """Every policy on the same trace and machine (`memplan compare`): `rows` are the `--json`
    rows (a policy's simulate summary plus overhead, decide_s, note), `ideal_s` the in-core time
    with unlimited memory."""

    def __init__(self, comparison):
        self._comparison = comparison
        data = json.loads(comparison.json())
        self.ideal_s = data["ideal_s"]
        self.rows = data["rows"]

    @property
    def text(self):
        """The table `memplan compare` prints."""
        return self._comparison.text()

    @property
    def csv(self):
        """What `memplan compare --csv` prints."""
        return self._comparison.csv()

    def to_dataframe(self):
        """One row per policy, the columns of `memplan compare --csv` (why_not last)."""
        return _tables.read_csv(self.csv, keep_default_na=False,
                                na_values={"iteration_s": [""], "overhead": [""]})

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"<memplan.Comparison of {len(self.rows)} policies>"


def simulate(trace, plan=None, policy=None, encode=None, **what_if):
    """Simulates one iteration of `trace` under a plan (`memplan simulate`).

    plan: a Plan or a plan file; policy: a policy's name (policies()); exactly one of the two.
    encode: Gist encodings for kept maps ("binarize,fp16", a list, or "all").
    what_if: memory, link, h2d, d2h, latency, host_memory, allocator, as machine() takes them.
    A plan that does not fit is a result (feasible False, oom says why), not an error.
    """
    m = _plans.machine(trace, **what_if)
    resolved = _plans.resolve_plan(trace, m, plan, policy, encode, "simulate")
    return Simulation(_core.simulate(trace._workload, resolved._plan, m), resolved, m)


def compare(trace, encode=None, **what_if):
    """Every policy on `trace` and the same machine, side by side (`memplan compare`)."""
    m = _plans.machine(trace, **what_if)
    return Comparison(_core.compare(trace._workload, m, _plans._encode_text(encode)))
