"""The plan `apply` carries out: read against the captured trace, refused where PyTorch cannot
carry it out, and laid out op by op (`Schedule`).

What: `plan_schedule(plan, trace)` takes a plan (a dict in plan format v1, or a memplan.Plan) and
the captured trace (a dict), and returns the `Schedule` the planned step follows: each map's
action, the ops before which swapped maps are brought back and released, the op after which a
swapped or encoded map leaves the device, and the op after which the trace reads a tensor for the
last time; and the plan's host placement (Note [Host placement] in core/plan.hpp): the tensors
that are not feature maps it places on the host (parameters and buffers, gradients, optimizer
state, the input batch), the op before which each group of their uses gets a device copy and the
op after which that copy goes, and whether the update runs on the host. `check_model`,
`check_batch` and `check_optimizer_state` refuse a model, batch or optimizer other than the
captured one.

Why this way: whether the plan was made for this workload (its fingerprint), which action a map
may take (encodings of float32 maps only, a lossy map that a recomputation would re-read), which
tensor may go to the host and whether the update may run there, where a swapped map is prefetched
by default, where a map the plan does not keep leaves the device and where a tensor is read last
are the simulator's rules. memplan._core answers them (the C++ plan reader, which refuses a
placement or host update the simulator would not carry out; `memplan._validation.map_points`,
`memplan._validation.host_points`, `Trace.last_uses`), so the step follows the lowering it is
compared with rather than a copy of it: a device copy made or dropped at another op than the
lowering's would change the measured device peak. Refused here, one line each (PlanError), is
what PyTorch adds to the simulator's rules: ops run with another algorithm, and binarize for a map
a backward op reads for more than its sign.
"""

import json

import memplan
from memplan import _validation
from memplan.torch.capture import memplan_trace
from memplan.torch.recorder import LOOP_STATE, flat_tensors, untyped_storage


class PlanError(ValueError):
    """A plan that cannot be applied to this model and batch (one line)."""


def read_plan(plan, trace):
    """`plan` (a dict in plan format v1, or a memplan.Plan) as a memplan.Plan of `trace` (a
    memplan.Trace), read by memplan's plan reader: PlanError (one line) for a plan made for another
    workload or with an action a map may not take."""
    if isinstance(plan, memplan.Plan):
        if plan.trace == trace:
            return plan
        text, source = plan.to_json(), f"plan {plan.policy!r}"
    else:
        text, source = json.dumps(plan), "the plan"
    try:
        return memplan.parse_plan(text, trace, source)
    except memplan.InputError as e:
        raise PlanError(str(e)) from None


def plan_schedule(plan, trace):
    """The `Schedule` of `plan` on the captured `trace` (a dict); PlanError when the plan is not
    for this trace or asks for what apply does not carry out (see the module's docstring)."""
    captured = memplan_trace(trace)
    plan = read_plan(plan, captured)
    points = _validation.map_points(plan)
    data = plan.to_dict()
    _refuse_what_torch_does_not_carry_out(data, points, trace)
    schedule = Schedule(points, captured.last_uses())
    if "recompute" in schedule.actions.values():
        for tid, op, occurrence in _validation.regenerated_frees(plan):
            schedule.regenerated_frees.setdefault((op, occurrence), []).append(tid)
    if schedule.per_use:
        schedule.node_ends = set(captured.backward_node_ends())
    schedule.place_on_host(_validation.host_points(plan), data.get("update") == "host", trace)
    return schedule


def host_tensors(plan):
    """The tensors `plan` (a memplan.Plan) places on the host, ascending."""
    return [p.tensor for p in _validation.host_points(plan)]


def _refuse_what_torch_does_not_carry_out(data, points, trace):
    if data.get("algorithms"):
        op = data["algorithms"][0]["op"]
        raise PlanError(f"the plan runs op '{op}' with another algorithm, which "
                        "memplan.torch.apply does not choose (PyTorch picks its kernels)")
    tensors = trace["tensors"]
    for p in points:
        name = tensors[p.tensor]["name"]
        if p.action == "encode:binarize":
            _check_binarizable(trace, p.tensor, name)


# Backward ops that read a binarized map for its sign, or for its geometry only: ReLU's backward
# (threshold_backward: result <= 0 ? 0 : grad) and a max-pool's backward, whose CPU and CUDA
# kernels read the input's sizes and memory format and take the positions from the saved indices.
_SIGN_READERS = {"relu": (".threshold_backward",),
                 "max_pool2d": (".max_pool2d_with_indices_backward",)}
_GEOMETRY_READERS = {"aten::detach", "aten::view", "aten::_reshape_alias", "aten::alias",
                     "aten::as_strided", "aten::t", "aten::transpose", "aten::permute",
                     "aten::expand", "aten::unsqueeze", "aten::squeeze"}


def _check_binarizable(trace, tid, name):
    """Refuses (PlanError) binarizing a map a backward op reads for more than its sign: binarize
    keeps one bit, and decodes to 1.0 / 0.0, which gives PyTorch's backward the same bits only
    where every backward reader is a ReLU's or a max-pool's backward (Gist's pattern)."""
    for op in trace["ops"]:
        if op["phase"] != "backward" or tid not in op["inputs"]:
            continue
        if op["layer"] in _GEOMETRY_READERS or op["name"].endswith(
                _SIGN_READERS.get(op["layer"], ())):
            continue
        raise PlanError(f"tensor '{name}': encode:binarize keeps the map's sign only, and backward "
                        f"op '{op['name']}' ({op['layer']}) reads its values (binarize is for a "
                        "map only ReLU's and max-pool's backward read)")


class Schedule:
    """A plan's decisions on the captured trace, as the step carries them out, from the
    simulator's answers (`map_points`: one per feature map, in tensor id order; `last_uses`):
    - `actions`: tensor id -> keep | swap | recompute | encode:SCHEME;
    - `prefetch_before`: op id -> swapped maps brought back before it (the plan's point, else the
      simulator's default); `release_before`: op id -> swapped maps whose device buffers go before
      it (Note [Release point]), `released_late` those maps;
    - `forward_drops`: op id -> [(map, action)] the lowering drops after it (its last forward use),
      swapped and encoded maps in tensor id order: a swapped map's buffer goes once its copy-out has
      read it, an encoded map is encoded and its buffer goes; `encode_at`: encoded map -> that op;
    - `drop_after`: op id -> tensors the trace reads last there (a copy brought back or
      regenerated is let go after it);
    - `per_use`: the maps recomputed per use, and `node_ends`, the ops that end a backward node
      (sim::ends_backward_node), after which what a node regenerated for them goes (filled only
      when `per_use` is not empty);
    - `regenerated_frees`: (op id, occurrence) -> the tensors whose copies, made by
      recomputations and read by no op of the step, go after that re-run of the op
      (`_validation.regenerated_frees`);
    - host placement (`place_on_host`; Note [Host placement] in core/plan.hpp): `host_tensors`,
      the tensors placed on the host; `host_update`, whether the update runs there;
      `host_prefetch_before`: op id -> host-placed tensors whose device copy is made before it, in
      the lowering's order (by point, first use, tensor), after the maps' (`prefetch_before`);
      `host_drop_after`: op id -> host-placed tensors whose device copy goes after it (the last
      use of a pre-existing tensor's group, a gradient's drop point, the last update use of a
      gradient brought back for an update on the device), in the lowering's order;
      `host_group_phase`: (tensor, op of a host drop) -> the phase of the group it ends."""

    def __init__(self, points, last_uses):
        self.actions = {p.tensor: p.action for p in points}
        self.prefetch_before, self.release_before = {}, {}
        self.released_late = set()
        self.forward_drops, self.encode_at = {}, {}
        for p in points:
            if p.action == "swap":
                self.prefetch_before.setdefault(p.prefetch_before, []).append(p.tensor)
                if p.release_before is not None:
                    self.release_before.setdefault(p.release_before, []).append(p.tensor)
                    self.released_late.add(p.tensor)
            if p.action == "swap" or p.action.startswith("encode:"):
                self.forward_drops.setdefault(p.last_forward_use, []).append((p.tensor, p.action))
                if p.action.startswith("encode:"):
                    self.encode_at[p.tensor] = p.last_forward_use
        # per_use recomputation: its maps, and the ops that end a backward node (plan_schedule)
        self.per_use = {p.tensor for p in points if p.per_use}
        self.node_ends = set()
        self.regenerated_frees = {}
        self.drop_after = {}
        for t, op in enumerate(last_uses):
            if op is not None:
                self.drop_after.setdefault(op, []).append(t)
        self.host_tensors, self.host_update = set(), False
        self.host_prefetch_before, self.host_drop_after, self.host_group_phase = {}, {}, {}

    def place_on_host(self, points, host_update, trace):
        """Lays out the plan's host placement (`_validation.host_points`) as the lowering does
        (Lowerer::plan_host_placement); `host_update`: whether the update runs on the host."""
        self.host_update = host_update
        self.host_tensors = {p.tensor for p in points}
        ops = trace["ops"]
        prefetches = []
        for p in points:
            t = p.tensor
            if p.gradient_drop is not None:
                self.host_drop_after.setdefault(p.gradient_drop, []).append(t)
                self.host_group_phase[(t, p.gradient_drop)] = ops[p.gradient_drop]["phase"]
            for g in p.groups:
                prefetches.append((g.prefetch_before, g.first_use, t))
                # a gradient's copy brought back for the update goes after its last use there
                self.host_drop_after.setdefault(g.last_use, []).append(t)
                self.host_group_phase[(t, g.last_use)] = ops[g.first_use]["phase"]
        # at one op, the copy needed first is issued first (the lowering's order)
        for when, _, t in sorted(prefetches):
            self.host_prefetch_before.setdefault(when, []).append(t)


def check_model(model, trace):
    """Refuses (PlanError) a model whose parameters differ from the captured trace's."""
    captured = {t["name"]: t.get("shape") for t in trace["tensors"] if t["kind"] == "parameter"}
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if name not in captured:
            raise PlanError(f"the model has '{name}', which the captured trace lacks: "
                            "another model")
        if captured[name] is not None and captured[name] != list(p.shape):
            raise PlanError(f"'{name}' is {list(p.shape)} here and {captured[name]} in the "
                            "captured trace: another model")


def check_optimizer_state(tensors, trace):
    """Refuses (PlanError) an optimizer whose state is not the captured one: `tensors`, the
    planned step's pre-existing tensors as its recorder registered them before the step (the
    loop's own state, a GradScaler's, is found during the step: not compared here)."""
    here = [(t["name"], t["bytes"]) for t in tensors if t["kind"] == "optimizer_state"]
    there = [(t["name"], t["bytes"]) for t in trace["tensors"] if t["kind"] == "optimizer_state"
             and not t["name"].startswith(LOOP_STATE)]  # found during the step, as here
    if here == there:
        return
    i = next((i for i, (a, b) in enumerate(zip(here, there)) if a != b), min(len(here), len(there)))

    def describe(state):
        return f"'{state[i][0]}' ({state[i][1]} B)" if i < len(state) else "nothing more"

    def kinds(state):  # 'h.0.attn.c_attn.weight.exp_avg' -> 'exp_avg'
        return {name.rpartition(".")[2] for name, _ in state}
    # The same kinds of state for other parameters: the optimizer is the captured one, but the
    # step before this one gave gradients to other parameters.
    cause = ("the step before this one gave gradients to other parameters than the captured "
             "step's (a branch on the data that went the other way, or other layers frozen)"
             if kinds(here) == kinds(there) else
             "another optimizer, or other options, than the captured step's")
    raise PlanError(f"the optimizer's state holds {describe(here)} here where the captured trace "
                    f"holds {describe(there)}: {cause}")


def check_batch(batch, trace):
    """Refuses (PlanError) a batch whose tensors' shapes differ from the captured trace's. A
    tensor over the storage of an earlier one (GPT's inputs and targets, two views of one row of
    tokens at batch 1) is no tensor of its own in the trace."""
    storages = set()
    for i, t in enumerate(flat_tensors(batch, [])):
        storage = untyped_storage(t)._cdata
        if storage in storages:
            continue
        storages.add(storage)
        captured = next((c for c in trace["tensors"] if c["name"] == f"batch.{i}"), None)
        if captured is None or captured.get("shape", list(t.shape)) != list(t.shape):
            want = captured.get("shape") if captured else "nothing"
            raise PlanError(f"batch tensor {i} is {list(t.shape)}; the captured trace has {want}: "
                            "another input shape")
