#pragma once
// Saved activations: the bytes of the distinct buffers that backward reads from forward — what
// PyTorch's saved-tensor hooks report when they sum the storages autograd saves (parameters left
// out, a tensor written in place over another counted once with its buffer, the input image
// included because the first conv saves it for its weight gradient). This is the number frameworks
// and papers quote as "activation memory", and the zoo's tests pin it against measured values.
#include "core/workload.hpp"

namespace memplan::zoo {

/// Requires a validated workload.
sim::Bytes saved_activation_bytes(const sim::Workload& workload);

}  // namespace memplan::zoo
