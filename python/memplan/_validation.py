"""validate: a plan run for real on the host backend, against the prediction and in-core; and
what a plan carried out elsewhere (memplan.torch) takes from the simulator: the tolerance its
results are held to, where the lowering acts on each map, where it frees a copy a recomputation
makes that no op reads, and where it brings each host-placed tensor to the device and lets it go."""
from memplan import _core, _plans, _simulation, _tables
from memplan._files import write_output
from memplan._numbers import whole


def _tolerance_fields(t):
    return {"relative": t.relative, "narrowed_maps": t.narrowed_maps,
            "unit_roundoff": t.unit_roundoff, "factor": _core.TOLERANCE_FACTOR,
            "cap": _core.MAX_RELATIVE_TOLERANCE}


def tolerance(plan):
    """The tolerance `plan`'s results are held to (Note [Validation tolerance] in
    runtime/validation.hpp): None for a plan compared bitwise, else a dict with `relative` =
    min(factor * narrowed_maps * unit_roundoff, cap) and those terms."""
    t = _core.tolerance_for(plan._plan)
    return None if t.bitwise else _tolerance_fields(t)


def map_points(plan):
    """Per feature map of `plan`, in tensor id order, its decision and the ops where the lowering
    acts on it: `tensor`, `action` ("keep", "swap", "recompute", "encode:fp16", ...), `per_use`,
    `last_forward_use` (after it a map not kept leaves the device), and for a swap
    `prefetch_before` (the plan's point, else the default one) and `release_before` (Note [Release
    point] in core/plan.hpp; None: right after the last forward use)."""
    return _core.map_points(plan._plan, plan.trace._workload)


def regenerated_frees(plan):
    """Per copy that `plan`'s recomputations make and no op of the step reads (an input of a
    recomputed map's producer that was gone and is no map, an output of a re-run op that nothing
    needs), where the lowering frees it (sim::regenerated_frees): (`tensor`, `rerun`,
    `occurrence`), after the `occurrence`-th re-run (from 0) of op `rerun`, the last that reads or
    writes it; in that order."""
    return _core.regenerated_frees(plan._plan, plan.trace._workload)


def host_points(plan):
    """Per tensor `plan` places on the host (Note [Host placement] in core/plan.hpp), in tensor id
    order, the ops where the lowering (Lowerer::plan_host_placement) acts on it: `tensor`;
    `gradient_drop`, for a tensor that is not pre-existing (a gradient), the op after which its
    device copy goes (None for a parameter, optimizer state or input); `groups`, its groups of
    uses that get a device copy, ascending, each with `first_use`, `last_use` (after it a
    pre-existing tensor's copy goes), `earliest_prefetch` and `default_prefetch` (its window
    and default point) and `prefetch_before` (the plan's point, else the default one)."""
    return _core.host_points(plan._plan, plan.trace._workload)

class ValidationReport(_tables.JsonFields):
    """What `memplan validate --backend host --json` prints, as attributes: fits,
    peak_bytes_predicted/measured, peak_reserved_bytes_predicted/measured,
    iteration_s_predicted/measured, iteration_error_percent, peaks_match, gradients_match,
    bitwise_equal, comparison ("bitwise" or "tolerance"), tolerance, max_abs_diff, max_rel_diff,
    max_tensor_rel_diff, tensors_compared, spilled_bytes, calibrated. `failures` are the lines
    the CLI prints when it exits 1 (empty when the run fits, peaks match and results match);
    `oom` the diagnosis when the run ran out of memory. memory_snapshot() / write_snapshot(path):
    the measured run's device memory as a PyTorch memory snapshot (`--snapshot-out`)."""

    def __init__(self, report, plan, oom, snapshot=None):
        self.plan = plan
        self.oom = oom
        self._snapshot = snapshot
        self.failures = [] if not report.measured_feasible else list(report.failures())
        t = report.tolerance
        tolerance = None if t.bitwise else _tolerance_fields(t)
        self.data = {
            "backend": "host", "policy": plan.policy, "fits": report.measured_feasible,
            "peak_bytes_predicted": report.peak_bytes_predicted,
            "peak_bytes_measured": report.peak_bytes_measured,
            "peak_reserved_bytes_predicted": report.peak_reserved_predicted,
            "peak_reserved_bytes_measured": report.peak_reserved_measured,
            "iteration_s_predicted": report.iteration_ns_predicted * 1e-9,
            "iteration_s_measured": report.iteration_ns_measured * 1e-9,
            "iteration_error_percent": report.iteration_error_percent(),
            "peaks_match": report.peaks_match(), "gradients_match": report.gradients_match,
            "bitwise_equal": report.bitwise_equal,
            "comparison": "bitwise" if t.bitwise else "tolerance", "tolerance": tolerance,
            "max_abs_diff": report.max_abs_diff, "max_rel_diff": report.max_rel_diff,
            "max_tensor_rel_diff": report.max_tensor_rel_diff,
            "tensors_compared": report.tensors_compared, "spilled_bytes": report.spilled_bytes,
            "calibrated": report.calibrated}

    @property
    def ok(self):
        """The run fits, its peak is the predicted one and its results match in-core's."""
        return self.fits and not self.failures

    def to_dict(self):
        return dict(self.data)

    def memory_snapshot(self):
        """The measured run's device memory as a PyTorch memory snapshot, pickle bytes: the host
        backend's allocator events as they happened (what `memplan validate --snapshot-out`
        writes); None when the run ran out of memory."""
        return self._snapshot

    def write_snapshot(self, path):
        """Writes memory_snapshot() to `path` atomically; InputError when the run ran out of
        memory (no snapshot)."""
        if self._snapshot is None:
            raise _core.InputError("--snapshot-out: the run ran out of memory, no snapshot")
        write_output(path, self._snapshot)

    def to_dataframe(self):
        """The report as one row."""
        return _tables.frame([self.data])

    def __repr__(self):
        return (f"<memplan.ValidationReport {self.policy!r}: fits={self.fits}, "
                f"peaks_match={self.peaks_match}, gradients_match={self.gradients_match}>")


def validate(trace, plan=None, policy=None, encode=None, seed=1, calibrate=False, force=False,
             **what_if):
    """Runs the plan for real on the host backend and the in-core reference on the same data and
    weights (`memplan validate --backend host`).

    plan / policy / encode / what_if: as simulate() takes them. seed: of the data and weights.
    calibrate: predict with costs measured on this host instead of the trace's. A plan the
    simulator says does not fit raises InputError unless force=True.
    """
    trace = _plans._one_step(trace, "validate runs one step")
    m = _plans.machine(trace, **what_if)
    resolved = _plans.resolve_plan(trace, m, plan, policy, encode, "validate")
    predicted = _simulation.Simulation(_core.simulate(trace._workload, resolved._plan, m),
                                       resolved, m)
    if not force and not predicted.feasible:
        raise _core.InputError("the simulator says the plan does not fit (force=True "
                               f"runs it): {predicted.oom}")
    report, oom, snapshot = _core.validate_on_host(trace._workload, resolved._plan, m,
                                                   whole(seed, "--seed"), bool(calibrate))
    return ValidationReport(report, resolved, oom, snapshot)
