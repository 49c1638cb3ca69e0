"""memplan for PyTorch: capture a user's training step as a memplan trace.

`capture(model, batch, loss_fn, optimizer)` records one real step under a dispatch-level recorder
(memplan.torch.recorder) and returns a `Capture` whose `.trace` is trace format v1 JSON and
`.save(path)` writes it. `python3 -m memplan.torch capture ...` is the command line behind
`memplan capture`.
"""

from memplan.torch.capture import Capture, capture, saved_bytes_in_trace, write_trace

__all__ = ["Capture", "capture", "saved_bytes_in_trace", "write_trace"]
