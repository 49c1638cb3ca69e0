"""memplan for PyTorch: capture a user's training step as a memplan trace, carry out a plan.

- `capture(model, batch, loss_fn, optimizer, step=None)` records one real step under a
  dispatch-level recorder (memplan.torch.recorder) and returns a `Capture` whose `.trace` is trace
  format v1 JSON and `.save(path)` writes it. The step is `default_step` or the user's own
  (`step(model, batch, loss_fn, optimizer)` returning the loss: autocast and a GradScaler,
  gradient clipping, a loss of its own), its phases told by what it calls.
- `apply(model, plan, captured, step=None)` returns a `PlannedModel` whose
  `.step(batch, loss_fn, optimizer)` runs a step with the plan carried out through saved-tensor
  hooks (memplan.torch.apply; the plan read and laid out by memplan.torch.schedule, Gist's
  encodings in memplan.torch.encodings).
- `validate(model, batch, loss_fn, optimizer, plan, captured, step=None, **what_if)` runs the
  baseline and the planned step and compares them, and the hooks' peaks with the simulator's,
  predicting on the machine `what_if` describes (memplan.torch.validate).
Every question to the simulator (plans, predictions, feature maps, fingerprints, tolerances,
encoded sizes) is asked of memplan._core in this process. `python3 -m memplan.torch
capture|validate ...` is the command line behind `memplan capture` and `memplan validate --backend
torch`.
"""

from memplan.torch.apply import PlanError, PlannedModel, apply
from memplan.torch.compiled import CompiledModelWarning
from memplan.torch.capture import (Capture, StepError, capture, default_step,
                                   saved_bytes_in_trace, write_trace)
from memplan.torch.validate import DoesNotFit, Validation, validate

__all__ = ["Capture", "CompiledModelWarning", "DoesNotFit", "PlanError", "PlannedModel",
           "StepError", "Validation", "apply", "capture", "default_step", "saved_bytes_in_trace",
           "validate", "write_trace"]
