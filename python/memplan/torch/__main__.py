"""`python3 -m memplan.torch capture MODEL ...`: what `memplan capture` runs (cli/capture_command);
`python3 -m memplan.torch validate TRACE --model MODEL ...`: what `memplan validate --backend
torch` runs (cli/validate_command).

validate predicts the plan in process (memplan._core) on the trace's device with the what-if
flags applied (--memory, --link, --h2d, --d2h, --latency, --host-memory, --host-bandwidth (an
update on the host), --allocator, --alloc-conf: the values `memplan simulate` takes); --policy
plans for that machine, --encode applies Gist's encodings to the plan's kept maps, as in `memplan
validate`.

Bad input (a model spec, an extent, a device, a plan for another model, a what-if value) is one
line on stderr and exit status 2, and so is a model or step that fails (a model at an input size
it refuses, a batch-norm layer given one value per channel, a tensor the recorder cannot record):
the line names where (building the model, making its batch, the step's forward pass, loss,
backward pass or optimizer step, the innermost module of the model on the way) and what (the
exception's type and first line). validate exits 1 when the planned step's results are not the
baseline's (bitwise, or within the tolerance for a plan that narrows maps) or its peaks not the
predicted ones, when the simulator says the plan does not fit (unless --force), as `memplan
validate` does, and when the planned step runs out of memory (a plan's result too: one line).
A trace `capture -o` cannot write is said before the capture's work, naming the file asked for.
"""

import argparse
import contextlib
import json
import sys

import torch

import memplan
from memplan._files import check_output
from memplan.torch.capture import StepError, capture, run_step
from memplan.torch.models import (SpecError, compile_model, load_model, load_step, loss_of,
                                  make_batch, parse_dims)
from memplan.torch.recorder import UnsupportedTensor
from memplan.torch.schedule import PlanError
from memplan.torch.validate import DoesNotFit, validate

# The what-if flags validate passes to the simulator, as memplan.simulate's keywords.
_WHAT_IF = ("memory", "link", "h2d", "d2h", "latency", "host_memory", "host_bandwidth", "allocator",
            "alloc_conf")


class _Failed(Exception):
    """The user's model or step failed: one line saying where and what (`_user_code`), and the
    exit status: 1 when the planned step ran out of memory (a plan's result, as a plan that does
    not fit is), else 2."""

    def __init__(self, line, status=2):
        super().__init__(line)
        self.status = status


def _out_of_memory(error):
    """Whether `error` is an allocator's out of memory (CUDA's, or the CPU's)."""
    kinds = tuple(k for k in (getattr(torch, "OutOfMemoryError", None),
                              getattr(torch.cuda, "OutOfMemoryError", None), MemoryError) if k)
    text = str(error)
    return isinstance(error, kinds) or (isinstance(error, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text))


_OURS = (SpecError, PlanError, StepError, UnsupportedTensor, memplan.InputError, OSError)


def _innermost_module(error, model):
    """The innermost module of `model` whose code the traceback of `error` passes through, and
    its name in `named_modules` ("" for the model itself); (None, None) when there is none."""
    names = {id(m): n for n, m in model.named_modules()} if model is not None else {}
    found = None
    tb = error.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if owner is not None and id(owner) in names:
            found = owner
        tb = tb.tb_next
    return found, names.get(id(found))


@contextlib.contextmanager
def _user_code(what, model=None):
    """Runs the user's code (`what`: building the model, making its batch, the captured step):
    an exception other than memplan's own becomes one line (_Failed) naming `what`, the part of
    the step (memplan.torch.capture.step_part) and the innermost module it came from, then the
    exception's type and first line."""
    try:
        yield
    except _OURS:
        raise
    except (Exception, SystemExit) as e:  # a factory or step that calls sys.exit fails too
        where = what
        for part in (getattr(e, "step_run", None), getattr(e, "step_part", None)):
            if part:
                where += f", in {part}"
        module, name = _innermost_module(e, model)
        if module is not None:
            kind = type(module).__name__
            where += f", in module '{name}' ({kind})" if name else f", in the model ({kind})"
        lines = (str(e).strip().splitlines() if not isinstance(e, SystemExit)
                 else [f"the user's code called sys.exit({e.code!r})"])
        planned = getattr(e, "step_run", None) == "the planned step"
        raise _Failed(f"{where}: {type(e).__name__}" + (f": {lines[0]}" if lines else ""),
                      1 if planned and _out_of_memory(e) else 2) from e


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise SpecError(message)


def _model_flags(cmd):
    """The flags that make the model, batch and optimizer (the same for capture and validate)."""
    cmd.add_argument("--batch", type=int, default=32)
    cmd.add_argument("--input", default="224x224", help="HxW for images, a length for GPTs")
    cmd.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    cmd.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    cmd.add_argument("--seed", type=int, default=0)
    cmd.add_argument("--step", help="package.module:function, the user's own training step")
    cmd.add_argument("--compile", metavar="BACKEND",
                     help="torch.compile the model with this backend (inductor, aot_eager, ...)")


def _parser():
    parser = _Parser(prog="memplan")
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture", help="record one training step of a PyTorch model")
    cap.error = parser.error
    cap.add_argument("model", help="torchvision:NAME or package.module:factory")
    _model_flags(cap)
    cap.add_argument("-o", "--output", required=True)
    val = sub.add_parser("validate", help="run a plan in PyTorch against the baseline step")
    val.error = parser.error
    val.add_argument("trace", help="the trace memplan capture wrote for this model and batch")
    val.add_argument("--model", required=True, help="the MODEL given to memplan capture")
    _model_flags(val)
    val.add_argument("--plan", help="plan file (JSON)")
    val.add_argument("--policy", help="a policy (see memplan compare) or swap-all, recompute-all")
    val.add_argument("--encode", help="Gist encodings for kept maps (as memplan validate takes)")
    for flag in _WHAT_IF:
        val.add_argument("--" + flag.replace("_", "-"), dest=flag,
                         help="the machine the plan is predicted on (as memplan simulate takes it)")
    val.add_argument("--force", action="store_true",
                     help="run even when the simulator says the plan does not fit")
    val.add_argument("--json", action="store_true")
    return parser


def _optimizer(name, model):
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)


def _setup(args):
    """The model, batch, optimizer and step `capture` saw for these flags (same seed)."""
    if args.batch <= 0:
        raise SpecError(f"--batch {args.batch} must be positive")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SpecError("--device cuda: no CUDA device here (torch.cuda.is_available() is false)")
    dims = parse_dims(args.input)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    with _user_code(f"building {args.model}"):
        model = load_model(args.model).to(device)
    if args.compile is not None:
        model = compile_model(model, args.compile)
    with _user_code(f"making a batch of {args.batch} at --input {args.input} for {args.model}",
                    model):
        batch = make_batch(model, args.batch, dims, device)
    step = None
    if args.step is not None:
        with _user_code(f"importing --step {args.step}"):
            step = load_step(args.step)
    return model, batch, _optimizer(args.optimizer, model), step


def _step_of(args, model):
    """The context the step runs in: its failures as one line (_user_code)."""
    return _user_code(f"{args.model} at batch {args.batch}, --input {args.input}", model)


def run_capture(args):
    check_output(args.output, "-o")
    model, batch, optimizer, step = _setup(args)
    with _step_of(args, model):
        result = capture(model, batch, loss_of(model), optimizer, step=step, name=args.model)
    result.save(args.output)
    report = sys.stderr if args.output == "-" else sys.stdout  # the trace went to stdout
    s = result.stats
    held = (f" and {result.held_bytes} held for it beside them ({len(s['held_tensors'])} tensors)"
            if result.held_bytes else "")
    phases = ", ".join(f"{p} {n}" for p, n in s["ops_by_phase"].items())
    print(f"captured {args.model}: {s['ops']} ops ({phases}), {s['tensors']} tensors, "
          f"{result.saved_bytes_hooks} bytes saved for backward (saved-tensor hooks)"
          f"{held}, "
          f"{s['capture_seconds']:.2f} s -> {args.output}", file=report)
    device = result.trace["device"]
    if device["name"] == "cpu":  # what a simulation of the trace assumes unless told otherwise
        print(f"device memory: the trace's device is this CPU, with its "
              f"{device['memory_bytes']} bytes of physical memory; --memory (an amount, or a "
              "share of the in-core peak such as 50%) gives a GPU's", file=report)


def _plan(args, trace, what_if):
    """The plan validate runs: the --plan file or the --policy's plan for the machine, with the
    --encode encodings applied (memplan.simulate resolves it as `memplan simulate` does). A plan
    the simulator says does not fit the machine stops here, before the model is built, unless
    --force."""
    if (args.plan is None) == (args.policy is None):
        raise SpecError("give --plan FILE or --policy NAME")
    simulation = memplan.simulate(trace, plan=args.plan, policy=args.policy, encode=args.encode,
                                  **what_if)
    if not simulation.feasible and not args.force:
        raise DoesNotFit(simulation.oom)
    return simulation.plan


def _print_text(args, v):
    print("backend            torch")
    print(f"plan               {args.plan or args.policy}")
    m = v["machine"]
    print(f"predicted on       {m['memory_bytes']} B device memory, {m['allocator']} allocator; "
          f"h2d {m['h2d_bytes_per_s'] / 1e9:g} GB/s, d2h {m['d2h_bytes_per_s'] / 1e9:g} GB/s, "
          f"latency {m['copy_latency_ns']} ns")
    print(f"bitwise            loss {v['loss_equal']}, gradients {v['gradients_equal']}, "
          f"updated weights {v['weights_equal']}")
    if v["narrowed_maps"]:
        print(f"narrowed maps      {v['narrowed_maps']}: gradients' relative error "
              f"{v['gradient_relative_error']:.2e} (tolerance {v['gradient_tolerance']:.2e})")
    print(f"saved peak bytes   predicted {v['predicted_saved_peak_bytes']}  measured "
          f"{v['measured_saved_peak_bytes']} (map buffers and the plan's copies on the device)")
    print(f"host peak bytes    predicted {v['predicted_host_peak_bytes']}  measured "
          f"{v['measured_host_peak_bytes']} (swap copies)")
    if v["measured_cuda_step_peak_bytes"] is not None:
        print(f"CUDA step memory   predicted {v['predicted_step_peak_bytes']}  measured "
              f"{v['measured_cuda_step_peak_bytes']} (baseline step "
              f"{v['baseline_cuda_step_peak_bytes']}; above the resident tensors)")
    if v["predicted_seconds"] is None:
        print(f"iteration time     predicted: does not fit (--force)  measured "
              f"{v['measured_seconds']:.6f} s")
        return
    error = v["measured_seconds"] / v["predicted_seconds"] - 1
    print(f"iteration time     predicted {v['predicted_seconds']:.6f} s  measured "
          f"{v['measured_seconds']:.6f} s  ({error:+.1%})")


def run_validate(args):
    trace = memplan.load_trace(args.trace)
    with open(args.trace) as f:
        captured = json.load(f)
    what_if = {k: getattr(args, k) for k in _WHAT_IF if getattr(args, k) is not None}
    plan = _plan(args, trace, what_if)
    model, batch, optimizer, step = _setup(args)
    with _step_of(args, model):
        # capture's warm-up: optimizer state
        run_step(model, batch, loss_of(model), optimizer, step=step)
        v = validate(model, batch, loss_of(model), optimizer, plan, captured, step=step,
                     seed=args.seed, force=args.force, **what_if)
    if args.json:
        print(json.dumps(dict(v, backend="torch", lossless=v.lossless_ok,
                              peaks_match=v.peaks_match,
                              within_tolerance=v.within_tolerance), indent=2))
    else:
        _print_text(args, v)
    return 0 if v.within_tolerance and v.peaks_match else 1


def main(argv=None):
    command = "memplan"
    try:
        args = _parser().parse_args(argv)
        command = args.command
        if command == "capture":
            run_capture(args)
            return 0
        return run_validate(args)
    except DoesNotFit as e:  # as `memplan validate`: exit 1, as `memplan simulate`
        print(f"memplan: the simulator says the plan does not fit (--force runs it): {e.oom}",
              file=sys.stderr)
        return 1
    except memplan.InputError as e:  # memplan's own line, which names the file or flag
        print(f"memplan: {e}", file=sys.stderr)
        return 2
    except (SpecError, PlanError, StepError, UnsupportedTensor, _Failed) as e:
        print(f"memplan: {command}: {e}", file=sys.stderr)
        return getattr(e, "status", 2)
    except OSError as e:
        print(f"memplan: {command}: {e.filename or ''}: {e.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"memplan: {command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
