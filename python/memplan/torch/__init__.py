"""memplan for PyTorch: capture a user's training step as a memplan trace, carry out a plan.

- `capture(model, batch, loss_fn, optimizer)` records one real step under a dispatch-level recorder
  (memplan.torch.recorder) and returns a `Capture` whose `.trace` is trace format v1 JSON and
  `.save(path)` writes it.
- `apply(model, plan, captured)` returns a `PlannedModel` whose `.step(batch, loss_fn, optimizer)`
  runs a step with the plan carried out through saved-tensor hooks (memplan.torch.apply).
- `validate(model, batch, loss_fn, optimizer, plan, captured)` runs the baseline and the planned
  step and compares them, and the hooks' peaks with the simulator's (memplan.torch.validate).
`python3 -m memplan.torch capture|validate ...` is the command line behind `memplan capture` and
`memplan validate --backend torch`.
"""

from memplan.torch.apply import PlanError, PlannedModel, apply
from memplan.torch.capture import Capture, capture, saved_bytes_in_trace, write_trace
from memplan.torch.validate import Validation, validate

__all__ = ["Capture", "PlanError", "PlannedModel", "Validation", "apply", "capture",
           "saved_bytes_in_trace", "validate", "write_trace"]
