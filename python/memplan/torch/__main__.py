"""`python3 -m memplan.torch capture MODEL ...`: what `memplan capture` runs (cli/capture_command).

Bad input (a model spec, an extent, a device) is one line on stderr and exit status 2.
"""

import argparse
import sys

import torch

from memplan.torch.capture import capture
from memplan.torch.models import SpecError, load_model, loss_of, make_batch, parse_dims


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise SpecError(message)


def _parser():
    parser = _Parser(prog="memplan capture")
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture", help="record one training step of a PyTorch model")
    cap.error = parser.error
    cap.add_argument("model", help="torchvision:NAME or package.module:factory")
    cap.add_argument("--batch", type=int, default=32)
    cap.add_argument("--input", default="224x224", help="HxW for images, a length for GPTs")
    cap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    cap.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    cap.add_argument("--seed", type=int, default=0)
    cap.add_argument("-o", "--output", required=True)
    return parser


def _optimizer(name, model):
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)


def run_capture(args):
    if args.batch <= 0:
        raise SpecError(f"--batch {args.batch} must be positive")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SpecError("--device cuda: no CUDA device here (torch.cuda.is_available() is false)")
    dims = parse_dims(args.input)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    model = load_model(args.model).to(device)
    batch = make_batch(model, args.batch, dims, device)
    result = capture(model, batch, loss_of(model), _optimizer(args.optimizer, model),
                     name=args.model)
    result.save(args.output)
    s = result.stats
    phases = ", ".join(f"{p} {n}" for p, n in s["ops_by_phase"].items())
    print(f"captured {args.model}: {s['ops']} ops ({phases}), {s['tensors']} tensors, "
          f"{result.saved_bytes_hooks} bytes saved for backward (saved-tensor hooks), "
          f"{s['capture_seconds']:.2f} s -> {args.output}")


def main(argv=None):
    try:
        args = _parser().parse_args(argv)
        run_capture(args)
    except SpecError as e:
        print(f"memplan: capture: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"memplan: capture: {e.filename or ''}: {e.strerror}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
