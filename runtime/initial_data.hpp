#pragma once
// The data a training step starts from, as a function of (seed, tensor, element) only: inputs and
// parameters uniform in [-1, 1) (parameters scaled by 1/sqrt(fan-in)), labels in range of the
// logits their loss reads, optimizer state zero. Every backend fills its tensors with this (the
// CUDA backend fills on the host and uploads), so runs of different plans and of different
// backends see the same data and weights.
#include <cstddef>
#include <cstdint>

#include "core/workload.hpp"

namespace memplan::runtime {

/// Writes the initial value of tensor `t` of `workload` into `out` (t.bytes bytes).
/// Throws BackendError for a dtype it has no initial data for.
void fill_initial_data(const sim::Workload& workload, const sim::Tensor& t, std::uint64_t seed,
                       std::byte* out);

}  // namespace memplan::runtime
