"""`python3 -m memplan.torch` (what `memplan capture` and `memplan validate --backend torch` run):
models it supports as they are (auxiliary outputs, a tuple target), and everything else (a model
at an input size it refuses, a batch-norm layer given one value per channel, sparse gradients)
one line on stderr naming where and what, exit status 2, no file left behind."""

import json
import os
import pathlib
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "build/release/python"))  # unless $PYTHONPATH names a build

import memplan  # noqa: E402

MEMPLAN = pathlib.Path(os.environ.get("MEMPLAN_BINARY", ROOT / "build/release/bin/memplan"))

USER_MODELS = '''
import torch
from torch import nn
from torch.nn import functional as F


class TwoHeads(nn.Module):
    """Two classifiers on one input: the target is a tuple of their labels."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 4), nn.Linear(8, 3)

    def forward(self, x):
        return self.a(x), self.b(x)

    def memplan_batch(self, batch, dims):
        return (torch.randn(batch, 8),
                (torch.randint(0, 4, (batch,)), torch.randint(0, 3, (batch,))))

    @staticmethod
    def memplan_loss(output, target):
        return F.cross_entropy(output[0], target[0]) + F.cross_entropy(output[1], target[1])


class SparseBag(nn.Module):
    """An embedding with sparse gradients."""

    def __init__(self):
        super().__init__()
        self.emb, self.fc = nn.Embedding(50, 8, sparse=True), nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.emb(x).mean(1))

    def memplan_batch(self, batch, dims):
        return torch.randint(0, 50, (batch, 6)), torch.randint(0, 4, (batch,))


def two_heads():
    return TwoHeads()


def sparse_bag():
    return SparseBag()


def clipped_step(model, batch, loss_fn, optimizer):
    """A step of the user's own: bf16 autocast, gradients clipped to norm 1."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(model(*batch[:-1]), batch[-1])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss


def exits():
    """A factory that ends the interpreter itself."""
    import sys
    sys.exit(0)


def slow(pid_file):
    """A factory that says where it runs, then takes its time."""
    import os
    import time
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(60)
    return TwoHeads()


def accumulating_step(model, batch, loss_fn, optimizer):
    """Two micro-batches' gradients accumulated, then one update."""
    optimizer.zero_grad(set_to_none=True)
    for _ in range(2):
        loss_fn(model(*batch[:-1]), batch[-1]).backward()
    optimizer.step()
'''


def run_module(tmp_path, *args):
    """`python -m memplan.torch ARGS` with this test's package, and the user models above
    importable as `user_models`."""
    (tmp_path / "user_models.py").write_text(textwrap.dedent(USER_MODELS))
    package = pathlib.Path(sys.modules["memplan"].__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=f"{package}:{tmp_path}")
    return subprocess.run([sys.executable, "-m", "memplan.torch", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)


def only_line(run):
    """The one line a failed run wrote on stderr (warnings of the model's own aside)."""
    lines = [line for line in run.stderr.splitlines() if line.startswith("memplan:")]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    return lines[0]


# ---- issue 36, defect 6: one line, or support ---------------------------------------------------

@pytest.mark.parametrize("args", [
    ["torchvision:googlenet", "--batch", 2, "--input", "64x64"],  # training adds aux outputs
    ["user_models:two_heads", "--batch", 2],  # the target is a tuple
], ids=["auxiliary-outputs", "tuple-target"])
def test_models_the_command_supports_as_they_are(tmp_path, args):
    out = tmp_path / "t.json"
    run = run_module(tmp_path, "capture", *args, "-o", out)
    assert run.returncode == 0, run.stderr
    trace = memplan.load_trace(str(out))
    assert trace.info().feature_map_bytes > 0


@pytest.mark.parametrize("args,where,what", [
    (["torchvision:vit_b_16", "--batch", 2, "--input", "64x64"],
     "making a batch of 2 at --input 64x64 for torchvision:vit_b_16, in the model "
     "(VisionTransformer)", "AssertionError: Wrong image height! Expected 224 but got 64!"),
    (["torchvision:resnet18", "--batch", 1, "--input", "32x32"],
     "torchvision:resnet18 at batch 1, --input 32x32, in the forward pass, in module "
     "'layer4.0.bn1' (BatchNorm2d)", "ValueError: Expected more than 1 value per channel when "
                                     "training, got input size torch.Size([1, 512, 1, 1])"),
    (["user_models:sparse_bag", "--batch", 2],
     "'emb.weight.momentum_buffer' (optimizer_state)",
     "is a sparse_coo tensor of [50, 8]: memplan.torch records strided tensors only"),
], ids=["vit-at-a-size-it-refuses", "batch-norm-of-one-value", "sparse-gradients"])
def test_a_model_that_fails_is_one_line_naming_where_and_what(tmp_path, args, where, what):
    out = tmp_path / "t.json"
    run = run_module(tmp_path, "capture", *args, "-o", out)
    assert run.returncode == 2, run.stderr
    line = only_line(run)
    assert line.startswith(f"memplan: capture: {where}") and what in line, line
    assert not out.exists()


# ---- issue 36, defect 7: messages that name the cause ------------------------------------------

def captured_gpt(tmp_path, batch):
    out = tmp_path / f"gpt{batch}.json"
    run = run_module(tmp_path, "capture", "memplan.torch.models:gpt_block", "--batch", batch,
                     "--input", 16, "-o", out)
    assert run.returncode == 0, run.stderr
    return out


def validate_gpt(tmp_path, trace, batch, *flags):
    return run_module(tmp_path, "validate", trace, "--model", "memplan.torch.models:gpt_block",
                      "--batch", batch, "--input", 16, "--policy", "swap-all", *flags)


def test_another_optimizer_at_validate_is_named_as_such(tmp_path):
    # Before: "op 0 is 'arange' (aten::arange) here and 'arange' (aten::arange) in the captured
    # trace: another model or input shape" (Adam's state shifted every id after it).
    trace = captured_gpt(tmp_path, 2)
    run = validate_gpt(tmp_path, trace, 2, "--optimizer", "adam")
    assert run.returncode == 2, run.stderr
    line = only_line(run)
    assert line.startswith("memplan: validate: the optimizer's state holds 'wte.weight.") and \
        "where the captured trace holds 'wte.weight.momentum_buffer' (1048576 B): another " \
        "optimizer, or other options, than the captured step's" in line, line


def test_a_batch_whose_tensors_share_a_storage_is_the_captured_batch(tmp_path):
    # GPT's inputs and targets at batch 1 are two views of one row of tokens: one tensor of the
    # trace. Before: "batch tensor 1 is [1, 16]; the captured trace has nothing: another input
    # shape".
    run = validate_gpt(tmp_path, captured_gpt(tmp_path, 1), 1)
    assert run.returncode == 0, run.stderr + run.stdout


# ---- issue 36: the user's own training step (--step) -------------------------------------------

def test_a_step_of_the_users_own_is_captured_and_its_plan_validated(tmp_path):
    out = tmp_path / "t.json"
    gpt = ["memplan.torch.models:gpt_block", "--batch", 2, "--input", 16]
    run = run_module(tmp_path, "capture", *gpt, "--step", "user_models:clipped_step", "-o", out)
    assert run.returncode == 0, run.stderr
    # A CPU capture says what device memory a simulation of it assumes.
    memory = json.loads(out.read_text())["device"]["memory_bytes"]
    assert f"device memory: the trace's device is this CPU, with its {memory} bytes of physical " \
        "memory; --memory" in run.stdout
    validate = ["validate", out, "--model", *gpt, "--policy", "recompute-all"]
    run = run_module(tmp_path, *validate, "--step", "user_models:clipped_step", "--json")
    assert run.returncode == 0, run.stderr + run.stdout
    report = json.loads(run.stdout)
    assert report["lossless"] and report["peaks_match"] and report["recomputed_ops"] > 0
    # Without --step, validate runs the default step, without autocast: said, naming --step.
    run = run_module(tmp_path, *validate)
    assert run.returncode == 2
    assert "the step's code differs from the captured one (the model's forward, its loss, or the " \
        "training step itself: capture's `step`, `--step`" in only_line(run)


def test_a_step_with_two_backward_passes_is_captured_and_its_plan_validated(tmp_path):
    # Gradient accumulation (before: "the step ran a second backward pass", exit 2): two forward
    # and backward passes, then the update, and a plan of it carried out bitwise.
    out = tmp_path / "t.json"
    gpt = ["memplan.torch.models:gpt_block", "--batch", 2, "--input", 16]
    step = ["--step", "user_models:accumulating_step"]
    run = run_module(tmp_path, "capture", *gpt, *step, "-o", out)
    assert run.returncode == 0, run.stderr
    phases = [op["phase"] for op in json.loads(out.read_text())["ops"]]
    starts = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    assert starts == ["forward", "backward", "forward", "backward", "update"]
    run = run_module(tmp_path, "validate", out, "--model", *gpt, "--policy", "swap-all", *step,
                     "--json")
    assert run.returncode == 0, run.stderr + run.stdout
    report = json.loads(run.stdout)
    assert report["lossless"] and report["peaks_match"]


# ---- issue 36, defect 8: exit statuses and the file a failed capture names ---------------------

@pytest.mark.parametrize("where", ["a-folder", "no-folder"])
def test_a_trace_capture_cannot_write_is_said_first_naming_the_file_asked_for(tmp_path, where):
    # Before: after the whole capture, "memplan: capture: .../.t.json.r5vrddv7: Is a directory".
    out = tmp_path / "t.json"
    if where == "a-folder":
        out.mkdir()
    else:
        out = tmp_path / "missing" / "t.json"
    run = run_module(tmp_path, "capture", "torchvision:resnet18", "--batch", 2, "--input",
                     "32x32", "-o", out)
    assert run.returncode == 2, run.stderr
    line = only_line(run)
    reason = ("is a directory, not a file" if where == "a-folder"
              else f": the folder '{out.parent}' does not exist")
    assert line == f"memplan: -o: '{out}'" + (" " if where == "a-folder" else "") + reason, line
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["t.json", "user_models.py"] if where == "a-folder" else ["user_models.py"])


def test_the_planned_step_running_out_of_memory_is_a_result():
    # A plan whose step runs out of memory is exit 1, as a plan the simulator says does not fit
    # (tests/cli/capture_command_test.cpp); the baseline step running out is the model not
    # fitting the device at all: exit 2.
    import torch
    from memplan.torch.__main__ import _Failed, _user_code
    from memplan.torch.capture import step_part
    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    for run, status in (("the planned step", 1), ("the baseline step", 2)):
        with pytest.raises(_Failed) as failed:
            with _user_code("gpt_block at batch 2"), step_part(run, "step_run"), \
                    step_part("the forward pass"):
                raise oom("CUDA out of memory. Tried to allocate 2.00 GiB")
        assert failed.value.status == status
        assert str(failed.value) == (f"gpt_block at batch 2, in {run}, in the forward pass: "
                                     "OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                     "2.00 GiB")


# ---- issue 40, items 1 and 7: capture -o is written as every memplan output ----------------------

def capture_two_heads(tmp_path, out):
    return run_module(tmp_path, "capture", "user_models:two_heads", "--batch", 2, "-o", out)


def test_capture_writes_a_device_a_symlink_and_a_fifo_as_the_other_commands_do(tmp_path):
    # Before: mkstemp + os.replace replaced /dev/full by a regular file (as root) and exit 0,
    # replaced a symlink by a file and a FIFO by a file, and wrote files of mode 0600.
    full = capture_two_heads(tmp_path, "/dev/full")
    assert full.returncode == 2, full.stderr
    assert "No space left on device" in only_line(full)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)

    target = tmp_path / "target.json"
    link = tmp_path / "link.json"
    link.symlink_to(target)
    old = os.umask(0o022)
    try:
        assert capture_two_heads(tmp_path, link).returncode == 0
    finally:
        os.umask(old)
    assert link.is_symlink() and memplan.load_trace(str(target)).info().ops > 0
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644  # the umask's, not mkstemp's 0600

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    read = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_text()))
    reader.start()
    run = capture_two_heads(tmp_path, fifo)
    reader.join(60)
    assert run.returncode == 0, run.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert memplan.parse_trace(read[0], "fifo").info().ops > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fifo", "link.json", "target.json", "user_models.py"]  # no temporary left


def test_capture_to_standard_output(tmp_path):
    # Before: `-o -` wrote a file named "-".
    run = capture_two_heads(tmp_path, "-")
    assert run.returncode == 0, run.stderr
    assert memplan.parse_trace(run.stdout, "stdout").info().ops > 0
    assert "captured user_models:two_heads" in run.stderr
    assert not (tmp_path / "-").exists()


def test_a_factory_that_exits_is_one_line_and_exit_2(tmp_path):
    # Before: a factory calling sys.exit(0) ended the capture with exit 0 and no file.
    out = tmp_path / "t.json"
    run = run_module(tmp_path, "capture", "user_models:exits", "-o", out)
    assert run.returncode == 2, run.stderr
    assert only_line(run) == ("memplan: capture: building user_models:exits: SystemExit: the "
                              "user's code called sys.exit(0)")
    assert not out.exists()


def test_memplan_killed_ends_its_python_child_which_writes_nothing(tmp_path):
    # Before: SIGTERM to `memplan capture` left its Python child running, which wrote -o after
    # the parent had failed.
    if not MEMPLAN.exists():
        pytest.skip(f"{MEMPLAN} is not built (scripts/build release)")
    (tmp_path / "user_models.py").write_text(textwrap.dedent(USER_MODELS))
    pid_file, out = tmp_path / "child.pid", tmp_path / "t.json"
    env = dict(os.environ, PYTHONPATH=str(tmp_path), MEMPLAN_PYTHON=sys.executable)
    (tmp_path / "slow_model.py").write_text(
        f"import user_models\n\ndef model():\n    return user_models.slow({str(pid_file)!r})\n")
    parent = subprocess.Popen([str(MEMPLAN.resolve()), "capture", "slow_model:model", "-o", str(out)],
                              env=env, cwd=tmp_path, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(10) == -signal.SIGTERM
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the Python child outlived memplan")
    assert not out.exists()


DATA_BRANCH = '''
import torch
from torch import nn

THRESHOLD = 0.0


class DataBranch(nn.Module):
    """A step whose path depends on the data: one head or the other by the batch's first value."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.b(h) if x[0, 0] > THRESHOLD else self.c(h) * 2

    def memplan_batch(self, batch, dims):
        return torch.randn(batch, 8), torch.randint(0, 4, (batch,))


def data_branch():
    return DataBranch()
'''


def test_validate_in_torch_rebuilds_the_model_and_batch_capture_made(tmp_path):
    # `memplan validate --backend torch` rebuilt the model and batch with the host backend's
    # default seed, 1, where `memplan capture` uses 0: the same weights' shapes and batch shapes,
    # other values, so a step whose path depends on the data left the captured one (SSDlite's
    # loss: "op 944 is 'detector.index_put_' here and 'detector.view' in the captured trace").
    # Here the model takes one head at capture's seed and the other at seed 1 (the threshold lies
    # between the two batches' first values), so validate passes only on capture's batch.
    import importlib.util
    import torch
    source = tmp_path / "branchy.py"
    source.write_text(textwrap.dedent(DATA_BRANCH))
    spec = importlib.util.spec_from_file_location("branchy_here", source)
    branchy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(branchy)
    first = []
    for seed in (0, 1):  # as memplan.torch's setup makes them: the seed, the model, its batch
        torch.manual_seed(seed)
        first.append(float(branchy.data_branch().memplan_batch(4, [8])[0][0, 0]))
    assert first[0] != first[1]
    source.write_text(textwrap.dedent(DATA_BRANCH).replace("THRESHOLD = 0.0",
                                                           f"THRESHOLD = {sum(first) / 2!r}"))
    package = pathlib.Path(sys.modules["memplan"].__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=f"{package}:{tmp_path}", MEMPLAN_PYTHON=sys.executable)
    model = ["--model", "branchy:data_branch", "--batch", "4", "--input", "8"]
    trace = tmp_path / "t.json"
    run = subprocess.run([str(MEMPLAN), "capture", "branchy:data_branch", "--batch", "4",
                          "--input", "8", "-o", str(trace)], capture_output=True, text=True,
                         env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    validate = [str(MEMPLAN), "validate", str(trace), "--backend", "torch", "--policy",
                "swap-all", *model]
    run = subprocess.run(validate, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr + run.stdout
    # Another seed is another batch: here the other head, from the warm-up step on (it gave the
    # other head gradients, so the optimizer holds state for it), said as a branch on the data,
    # not as another optimizer.
    run = subprocess.run(validate + ["--seed", "1"], capture_output=True, text=True, env=env,
                         cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "the step before this one gave gradients to other parameters than the captured " \
        "step's (a branch on the data" in only_line(run), run.stderr


# ---- issue 36: a torch.compile'd model from the command line (--compile) -----------------------

def test_a_model_compiled_with_compile_is_captured_as_its_split_and_its_plan_validated(tmp_path):
    import torch
    out = tmp_path / "t.json"
    gpt = ["memplan.torch.models:gpt_block", "--batch", 2, "--input", 16]
    run = run_module(tmp_path, "capture", *gpt, "--compile", "aot_eager_decomp_partition",
                     "-o", out)
    if not hasattr(torch, "compile"):
        assert run.returncode == 2 and "torch.compile needs PyTorch 2.0" in only_line(run)
        assert not out.exists()
        return
    assert run.returncode == 0, run.stderr
    names = {op["name"] for op in json.loads(out.read_text())["ops"]}
    assert "var_mean" in names and "native_layer_norm" not in names  # the split's decomposition
    run = run_module(tmp_path, "validate", out, "--model", gpt[0], *gpt[1:], "--compile",
                     "aot_eager_decomp_partition", "--policy", "swap-all")
    assert run.returncode == 0, run.stderr + run.stdout
    # validated against the eager model instead: the step differs from the captured one
    run = run_module(tmp_path, "validate", out, "--model", gpt[0], *gpt[1:], "--policy",
                     "swap-all")
    assert run.returncode == 2 and "differs from the captured one" in only_line(run)
    run = run_module(tmp_path, "capture", *gpt, "--compile", "no_such_backend", "-o", out)
    assert run.returncode == 2 and "torch.compile has no backend 'no_such_backend'" in \
        only_line(run)
